#!/usr/bin/env bash
# One GPU-machine run for the Llama family: build (DING_CUDA_ARCH=90 builds for an H100 only),
# the cuda attention/rope/kv_append parity cases and the model fixtures, then ding-bench on the
# Llama-3.1-8B and 3.2-1B shapes (bf16, 256 + 256, batch 1 and 8, a per-op profile of each) and
# the Llama layer's matmuls at decode and prefill rows. Logs go to the folder given (default $OUT).
#   tools/bench/llama_check.sh [out-dir]
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu_build.sh
gpu_out llama-check "${1:-}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
gpu_build llama-check "$out/build.log"
(cd "$build" && ctest --parallel "$cores" --timeout 300 \
  -R 'cuda.*(attention|kv_append|rope)|ModelParity.*cuda|ModelFixtures|ModelConfig|DingRun' >"$out/ctest.log" 2>&1)
status=$?
grep -E "tests passed|\(Failed\)|Timeout" "$out/ctest.log"
bench=$build/tools/ding-bench
for shape in llama-3.1-8b llama-3.2-1b; do
  for batch in 1 8; do
    "$bench" model --shape "$shape" --backend cuda --dtype bf16 --prompt 256 --new 256 --batch "$batch" --profile \
      >"$out/model-$shape-b$batch.log" 2>&1 || status=1
    grep -E "prefill|decode|roofline" "$out/model-$shape-b$batch.log"
  done
done
"$bench" ops --op matmul --backend cuda --filter 'K2048|K4096|K8192|K14336' --filter outbf16 >"$out/matmul.log" 2>&1 || status=1
exit $status
