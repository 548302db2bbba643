#!/usr/bin/env bash
# One GPU-machine run that sweeps the tensor-core GEMV's L2 fetch size (MatmulTuning's
# DING_GEMV_L2, stream.h) over the Llama shapes' decode products (ding-bench ops at M = 1 and 8) and the 8B and 1B decode steps. Builds
# first where the build folder is missing (DING_CUDA_ARCH=90 for an H100 only). Logs go to the
# folder given (default $OUT).
#   tools/bench/gemv_sweep.sh [out-dir]        SWEEP="0 128 256" SHAPES="llama-3.1-8b …" BATCHES="1 8"
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_build.sh
gpu_out gemv-sweep "${1:-}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
gpu_build gemv-sweep "$out/build.log" ding-bench
bench=$build/tools/ding-bench
status=0
for l2 in ${SWEEP:-0 128 256}; do
  log="$out/sweep-l2-$l2.log"
  export DING_GEMV_L2=$l2
  echo "== L2 fetch $l2 bytes"
  "$bench" ops --op matmul --backend cuda --filter 'M1_|M8_' --filter 'K2048|K4096|K8192|K14336' >"$log" 2>&1 || status=1
  grep -E "^matmul/" "$log" | awk '{printf "  %-62s %s ms %s\n", $1, $2, $NF}'
  for shape in ${SHAPES:-llama-3.1-8b llama-3.2-1b}; do
    for batch in ${BATCHES:-1 8}; do
      "$bench" model --shape "$shape" --backend cuda --dtype bf16 --prompt 256 --new 256 --batch "$batch" 2>&1 |
        grep -E "^decode|reached" | tr '\n' ' ' | sed "s/^/  $shape b$batch: /"; echo
    done
  done
done
exit $status
