#!/usr/bin/env bash
# Issue 21 on the GPU in one call: the whole suite (tools/gpu-check.sh: the new ops, the hybrid model
# tests and the qwen3_next fixtures on cuda), transformers' own qwen3_next fixtures
# (tools/fixtures/make_hybrid_fixtures.py, written to $OUT/hybrid-fixtures to bring back), then the speed
# tables: the delta rule's forms across chunk sizes (op benches), the qwen3-next-80b-a3b-12l shape's prefill at
# 1k to 32k tokens and decode, the cache table (Gated DeltaNet and the 3:1 hybrid beside MHA/GQA/MQA/MLA at 1k
# to 32k context), and PyTorch's pure-torch path on the same shape. Each result is a file in $OUT as soon as it
# exists, so a run cut short returns what it finished.
#   DING_CUDA_ARCH=90 DING_GPU_HIP=0 tools/bench/hybrid_speed.sh
# DING_TORCH=0 skips transformers (fixtures and PyTorch's timings), DING_PEERS=0 PyTorch's timings alone;
# DING_CHECK=0 skips the suite.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-$PWD/results/hybrid-speed}
build=${DING_GPU_BUILD:-build-gpu}
deps=${DING_DEPS:-$PWD/.deps/usr}
mkdir -p "$out"
start=$SECONDS
note() { echo "[$((SECONDS - start))s] $*"; }
caller_libraries=${LD_LIBRARY_PATH:-}
if ((${DING_CHECK:-1})); then
  DING_GPU_BUILD=$build tools/gpu-check.sh >"$out/check.txt" 2>&1
  note "suite: $(grep -E "passed|failed" "$out/check.txt" | tail -2 | tr '\n' ' ')"
else
  DING_GPU_BUILD=$build DING_GPU_BUILD_ONLY=1 tools/gpu-check.sh >"$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
fi
if ((${DING_TORCH:-1})); then
  (cd tools/fixtures && LD_LIBRARY_PATH=$caller_libraries timeout 300 python3 make_hybrid_fixtures.py --out "$out/hybrid-fixtures") \
    >"$out/fixtures.txt" 2>&1
  note "fixtures: $(tail -3 "$out/fixtures.txt" | tr '\n' ' ')"
fi
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
bench="$build/tools/ding-bench"
timeout 300 "$bench" ops --backend cuda --op gated_delta_rule --filter bench_ >"$out/delta_rule_ops.txt" 2>&1
timeout 100 "$bench" ops --backend cuda --op linear_attention --filter bench_ >"$out/linear_attention_ops.txt" 2>&1
note "op benches"; grep -h "bench_" "$out"/delta_rule_ops.txt "$out"/linear_attention_ops.txt | cut -c1-160
for prompt in 1024 4096 16384 32768; do
  timeout 200 "$bench" model --backend cuda --dtype bf16 --shape qwen3-next-80b-a3b-12l --prompt $prompt --new 32 \
    >"$out/ding_qwen3_next_p$prompt.txt" 2>&1 || echo "exit status $?" >>"$out/ding_qwen3_next_p$prompt.txt"
  note "ding prompt $prompt"; grep -E "^(weights|prefill|decode|roofline)" "$out/ding_qwen3_next_p$prompt.txt"
done
timeout 200 "$bench" model --backend cuda --dtype bf16 --shape qwen3-next-80b-a3b-12l --prompt 4096 --new 32 --profile \
  >"$out/ding_qwen3_next_profile.txt" 2>&1
# The Gated DeltaNet layers alone (qwen3-next-80b-a3b-gdn-12l): decode against their byte roofline,
# after a short and a long prompt (flat in context).
for prompt in 1024 32768; do
  timeout 200 "$bench" model --backend cuda --dtype bf16 --shape qwen3-next-80b-a3b-gdn-12l --prompt $prompt --new 64 \
    $( ((prompt == 1024)) && echo --profile) >"$out/ding_gdn_p$prompt.txt" 2>&1 || echo "exit status $?" >>"$out/ding_gdn_p$prompt.txt"
  note "gdn layers, prompt $prompt"; grep -E "^(weights|prefill|decode|roofline)" "$out/ding_gdn_p$prompt.txt"
done
timeout 300 "$bench" cache --backend cuda --contexts 1024 4096 16384 32768 --steps 16 >"$out/cache.txt" 2>&1
note "cache"; cat "$out/cache.txt"
if ((${DING_TORCH:-1} && ${DING_PEERS:-1})); then
  for prompt in 1024 4096; do
    LD_LIBRARY_PATH=$caller_libraries timeout 240 python3 tools/bench/peer_torch_hybrid.py --prompt $prompt --new 16 \
      >"$out/torch_qwen3_next_p$prompt.txt" 2>&1
    note "torch prompt $prompt"; tail -3 "$out/torch_qwen3_next_p$prompt.txt"
  done
fi
note "done"
