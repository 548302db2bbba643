#!/usr/bin/env bash
# Issue 20's speed tables in one GPU call: ding against PyTorch (tools/bench/peer_torch.py) on the
# OLMoE-1B-7B shape at batch 1 and 8 and the DeepSeek-V2-Lite shape at batch 1 (bf16, 256-token
# prompt, 64 new; ding's batch-1 runs also print a per-op profile), then ding-bench cache (MHA, GQA, MQA, MLA at 4k and 32k context). PyTorch's
# OLMoE compiles while ding builds; every timed run has the GPU to itself. Each result is a file
# in $OUT as soon as it exists, so a run cut short still returns what it finished; DeepSeek-V2-Lite
# at 32k context comes last.
#   DING_CUDA_ARCH=90 tools/bench/moe_speed.sh
# DING_TORCH=0: ding's runs only (PyTorch's take minutes of compilation); DING_GPU_BUILD: the
# build folder (an existing one is reused).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=${OUT:-$PWD/results/moe-speed}
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-speed}
mkdir -p "$out"
start=$SECONDS
note() { echo "[$((SECONDS - start))s] $*"; }
torch_run() {  # NAME ARGS...: peer_torch.py with the caller's libraries (not .deps)
  local name=$1
  shift
  python3 tools/bench/peer_torch.py --prompt 256 --new 64 "$@" >"$out/$name.txt" 2>&1
}
torch=${DING_TORCH:-1}
torch_olmoe=
if ((torch)); then
  torch_run torch_olmoe_b1 --shape olmoe-1b-7b --batch 1 --wait-for "$out/.go_olmoe" --wait-timeout 400 &
  torch_olmoe=$!
fi
caller_libraries=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${DING_CUDA_ARCH:-90}" >"$out/build.txt" 2>&1 &&
  cmake --build "$build" --parallel "$(env -u OMP_NUM_THREADS nproc)" --target ding-bench >>"$out/build.txt" 2>&1 ||
  { note "build failed"; tail -30 "$out/build.txt"; exit 1; }
note "built"
bench="$build/tools/ding-bench"
ding_run() {  # NAME PROMPT NEW ARGS...
  local name=$1 prompt=$2 new=$3
  shift 3
  note "$name"
  timeout 150 "$bench" model --backend cuda --dtype bf16 --prompt "$prompt" --new "$new" "$@" >"$out/$name.txt" 2>&1 ||
    echo "exit status $?" >>"$out/$name.txt"
  grep -E "^(weights|decode|roofline)" "$out/$name.txt"; sed -n "/per-op profile/,/^roofline/p" "$out/$name.txt" | head -30
}
while ((torch)) && [[ ! -e $out/.go_olmoe.ready ]] && kill -0 "$torch_olmoe" 2>/dev/null && ((SECONDS - start < 200)); do sleep 1; done
ding_run ding_olmoe_b1 256 64 --shape olmoe-1b-7b --batch 1 --profile
ding_run ding_olmoe_b8 256 64 --shape olmoe-1b-7b --batch 8
touch "$out/.go_olmoe"
if ((torch)); then
  wait "$torch_olmoe"
  note "torch_olmoe_b1"; grep -E "^(decode|compiled|WARNING|peer_torch)" "$out/torch_olmoe_b1.txt" | tail -4
fi
ding_run ding_deepseek_b1 256 64 --shape deepseek-v2-lite --batch 1 --profile
note "cache"
timeout 200 "$bench" cache --backend cuda --contexts 4096 32768 --steps 16 >"$out/cache.txt" 2>&1 || echo "exit status $?" >>"$out/cache.txt"
cat "$out/cache.txt"
if ((!torch)); then
  ding_run ding_deepseek_b1_32k 32768 16 --shape deepseek-v2-lite --batch 1
  note "done (DING_TORCH=0)"
  exit 0
fi
note "torch_deepseek_b1"
LD_LIBRARY_PATH=$caller_libraries timeout 240 python3 tools/bench/peer_torch.py --prompt 256 --new 64 --shape deepseek-v2-lite --batch 1 \
  >"$out/torch_deepseek_b1.txt" 2>&1
grep -E "^(decode|compiled|WARNING|peer_torch)" "$out/torch_deepseek_b1.txt" | tail -4
# 32k context (the prefill of 32768 tokens is most of it), when time is left.
ding_run ding_deepseek_b1_32k 32768 16 --shape deepseek-v2-lite --batch 1
note "torch_deepseek_b1_32k"
LD_LIBRARY_PATH=$caller_libraries timeout 200 python3 tools/bench/peer_torch.py --prompt 32768 --new 16 --shape deepseek-v2-lite \
  --batch 1 >"$out/torch_deepseek_b1_32k.txt" 2>&1
grep -E "^(decode|compiled|WARNING|peer_torch)" "$out/torch_deepseek_b1_32k.txt" | tail -4
note "done"
