#!/usr/bin/env bash
# One GPU-machine run that times the prefill products of a Llama layer (ding-bench ops, matmul at
# M rows; default the 8B shape's four products at M = 256) under every plan the sm_90 GEMM cores
# can be forced to (MatmulTuning: DING_GEMM_TMA, DING_GEMM_TILE, DING_GEMM_SPLIT), beside the
# automatic plan and cuBLAS, then the model's prefill. Builds ding-bench first where the build
# folder lacks it (DING_CUDA_ARCH=90 for an H100 only). Logs go to the folder given (default $OUT).
#   tools/bench/gemm_sweep.sh [out-dir]     ROWS=M256_ KS='K4096|K14336' SPLITS="1 2 3 4" SHAPE=llama-3.1-8b
#     WGMMA_TILES="128x128 128x256" TMA_TILES="128x256 128x128 64x128" MIN_TIME=0.3 (seconds per case)
set -uo pipefail
cd "$(dirname "$0")/../.."
export DING_CUDA_TMA=ON  # the sweep times the TMA core
source tools/gpu_build.sh
gpu_out gemm-sweep "${1:-}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
gpu_build gemm-sweep "$out/build.log" ding-bench
bench=$build/tools/ding-bench
log="$out/gemm-sweep.log"
: >"$log"
# One plan: its label, then the environment that forces it.
plan() {
  local label=$1
  shift
  echo "== $label" >>"$log"
  env "$@" "$bench" ops --op matmul --backend cuda --filter "${ROWS:-M256_}" --filter "${KS:-K4096|K14336}" \
    --min-time "${MIN_TIME:-0.3}" ${MATMUL:+--matmul $MATMUL} >>"$log" 2>&1 || echo "   (failed)" >>"$log"
}
MATMUL=cublas plan cublas
plan "wgmma auto"
plan "tma auto" DING_GEMM_TMA=1
for split in ${SPLITS:-1 2 3 4}; do
  for tile in ${WGMMA_TILES-128x128 128x256}; do plan "wgmma $tile split $split" DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split; done
  for tile in ${TMA_TILES-128x256 128x128 64x128}; do
    plan "tma $tile split $split" DING_GEMM_TMA=1 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split
  done
done
# The table: one row per plan, one column per product (ms).
awk '/^== /{sub(/^== /, ""); label=$0; next} /^matmul\//{t[label] = t[label] sprintf(" %8s", $2); if (!(label in seen)) {order[++n]=label; seen[label]=1}; if (n == 1) names = names " " $1}
     END {print "products:" names; for (i = 1; i <= n; ++i) printf "%-26s%s\n", order[i], t[order[i]]}' "$log"
for tma in 0 1; do
  DING_GEMM_TMA=$tma "$bench" model --shape "${SHAPE:-llama-3.1-8b}" --backend cuda --dtype bf16 --prompt 256 --new 32 2>&1 |
    grep -E "^prefill" | sed "s/^/  tma=$tma /"
done
