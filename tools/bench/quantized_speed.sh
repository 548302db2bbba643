#!/usr/bin/env bash
# Issue 22's GPU check and speed table in one GPU call: builds everything (gpu_build.sh), runs the
# matmul, moe and quantized-weight tests on the GPU, the matmul and moe_matmul op benchmarks, then
# ding-bench model decode (bf16 activations,
# 256-token prompt, 64 new, batch 1) for each shape with bf16, int8 and fp8 projections, and the
# 8-bit ones with the LM head quantized too. Each
# result is a file in the logs folder as soon as it exists, so a run cut short still returns what
# it finished; the 8B shape (minutes of host-side weight drawing) comes last.
#   DING_CUDA_ARCH=90 tools/bench/quantized_speed.sh [logs folder]
# Environment: DING_QUANT_SHAPES (default "gpt2-xl olmoe-1b-7b llama-3.1-8b"), DING_QUANT_FORMATS
# (default "none int8 fp8 int8:head fp8:head"; :head also quantizes the LM head), DING_QUANT_TESTS
# (a gtest filter; empty: no tests), DING_QUANT_ROWS (the matmul bench filters, default "M1_ M8_
# M256_"), DING_QUANT_MOE (the moe_matmul bench filter, default bench_olmoe), DING_QUANT_TORCH=0 (no
# PyTorch products), DING_GPU_BUILD / DING_DEPS as gpu_build.sh. The op benches draw their
# tensors on the host: the OLMoE expert cases take ~30 s each.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
caller_libraries=${LD_LIBRARY_PATH:-}
source tools/gpu_build.sh
gpu_out quantized-speed "${1:-}"
start=$SECONDS
note() { echo "[$((SECONDS - start))s] $*"; }
gpu_build quantized_speed "$out/build.txt"
note "built"
tests=${DING_QUANT_TESTS-*matmul*:*Quantiz*:*quantiz*:*moe*:*Moe*}
if [[ -n $tests ]]; then
  (cd "$build/tests" && OMP_NUM_THREADS=2 timeout 300 ./ding_tests --gtest_brief=1 --gtest_filter="$tests" >"$out/tests.txt" 2>&1)
  echo "tests exit status $?" >>"$out/tests.txt"
  note "tests"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests exit" "$out/tests.txt" | head -20
fi
bench="$build/tools/ding-bench"
# PyTorch's 8-bit products at the same shapes (the caller's libraries, not .deps).
if [[ ${DING_QUANT_TORCH:-1} != 0 ]]; then
  LD_LIBRARY_PATH=${caller_libraries:-} timeout 120 python3 tools/bench/peer_scaled_mm.py >"$out/torch_scaled_mm.txt" 2>&1 ||
    echo "exit status $?" >>"$out/torch_scaled_mm.txt"
  note "torch 8-bit products"; cat "$out/torch_scaled_mm.txt"
fi
# The products alone: Llama-3.1-8B's decode and prefill (M = 256) rows with bf16, i8 and E4M3
# weights among them, and OLMoE's experts at 1, 8 and 256 tokens.
for rows in ${DING_QUANT_ROWS-M1_ M8_ M256_}; do
  log="$out/ops_matmul_${rows//[^A-Za-z0-9_]/_}.txt"
  timeout 180 "$bench" ops --backend cuda --op matmul --filter "$rows" >"$log" 2>&1 || echo "exit status $?" >>"$log"
  note "ops matmul $rows"; grep -E "K4096|K14336|exit status" "$log" | head -36
done
timeout 240 "$bench" ops --backend cuda --op moe_matmul --filter "${DING_QUANT_MOE:-bench_olmoe}" >"$out/ops_moe_matmul.txt" 2>&1 ||
  echo "exit status $?" >>"$out/ops_moe_matmul.txt"
note "ops moe_matmul"; grep -E "bench_olmoe|exit status" "$out/ops_moe_matmul.txt" | head -24
for shape in ${DING_QUANT_SHAPES:-gpt2-xl olmoe-1b-7b llama-3.1-8b}; do
  for q in ${DING_QUANT_FORMATS:-none int8 fp8 int8:head fp8:head}; do
    name="ding_${shape}_${q/:/_}"
    args=()
    [[ $q != none ]] && args=(--quantize "${q%:head}")
    [[ $q == *:head ]] && args+=(--quantize-lm-head)
    timeout 300 "$bench" model --backend cuda --dtype bf16 --prompt 256 --new 64 --shape "$shape" --batch 1 "${args[@]}" \
      >"$out/$name.txt" 2>&1 || echo "exit status $?" >>"$out/$name.txt"
    note "$name"; grep -E "^(weights|prefill|decode|roofline|exit status)" "$out/$name.txt"
  done
done
