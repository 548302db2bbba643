#!/usr/bin/env bash
# The GEMM cores on a GPU machine: matmul parity with the automatic plans, with
# wgmma off, with the TMA core on (DING_GEMM_TMA=1, each of its tiles and a K split forced), and
# with every mma.sync tile and a few K splits forced; then ding-bench for the bf16 matmul cases
# (ding, ding without wgmma, ding with the TMA core, cuBLAS) and sweeps of forced plans.
#   tools/gemm-check.sh [out-dir]      (default $OUT, else gemm-check-logs)
# Uses .deps/usr as tools/gpu-check.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gemm-check-logs}}
mkdir -p "$out"
rm -f "$out/summary.txt"
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-gemm}
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
{ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON -DDING_CUDA_TMA=ON &&
  cmake --build "$build" --parallel "$(nproc)" --target ding_tests ding-bench; } >"$out/build.log" 2>&1 ||
  { tail -50 "$out/build.log"; echo "gemm-check: build failed"; exit 1; }
tests=$build/tests/ding_tests
bench=$build/tools/ding-bench

status=0
all='*Parity*cuda_matmul_*:-*matmul_chain*'
tensor_core='*Parity*cuda_matmul_*xbf16_wbf16*:*Parity*cuda_matmul_*xf16_wf16*:-*matmul_chain*'
filter=$all
parity() {  # name, then environment assignments; cases: $filter
  local name=$1; shift
  env "$@" "$tests" --gtest_filter="$filter" >"$out/parity-$name.log" 2>&1 || status=1
  printf '%-28s %s\n' "$name" "$(grep -E '^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ test' "$out/parity-$name.log" | tr '\n' ' ')" \
    >>"$out/summary.txt"
}
parity auto
parity no-wgmma DING_GEMM_WGMMA=0
filter=$tensor_core  # forced plans: only the products the tensor-core cores take
for tile in 128x128 128x64 64x128 64x64; do
  for split in 1 3; do parity "mma-$tile-s$split" DING_GEMM_WGMMA=0 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split; done
done
parity wgmma-128x128 DING_GEMM_TILE=128x128
parity wgmma-128x256 DING_GEMM_TILE=128x256
filter=$all
parity tma DING_GEMM_TMA=1
filter=$tensor_core
for tile in 128x256 128x128 64x128; do
  for split in 1 3; do parity "tma-$tile-s$split" DING_GEMM_TMA=1 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split; done
done

# Out-of-bounds or misaligned accesses in the new kernels: memcheck over a few small cases (wgmma
# with both tiles, split-K on both cores, the TMA core), where the toolkit has compute-sanitizer.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -n "$sanitizer" ]]; then
  small='*cuda_matmul_M264_N2846*:*cuda_matmul_B70_*:*cuda_matmul_B72_*:*cuda_matmul_M65_N904*:*cuda_matmul_M40_N40_K520*'
  for env in DING_GEMM_WGMMA=1 DING_GEMM_WGMMA=0 DING_GEMM_TMA=1; do
    env $env "$sanitizer" --tool memcheck --error-exitcode 9 "$tests" --gtest_filter="$small" >"$out/memcheck-$env.log" 2>&1 ||
      status=1
    printf '%-28s %s\n' "memcheck $env" "$(grep -E 'ERROR SUMMARY|^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ test' "$out/memcheck-$env.log" | tr '\n' ' ')" \
      >>"$out/summary.txt"
  done
fi

cases="--op matmul --filter _xbf16_wbf16_outbf16 --backend cuda"
"$bench" ops $cases >"$out/bench-ding.log" 2>&1
DING_GEMM_WGMMA=0 "$bench" ops $cases >"$out/bench-ding-no-wgmma.log" 2>&1
DING_GEMM_TMA=1 "$bench" ops $cases >"$out/bench-ding-tma.log" 2>&1
"$bench" ops $cases --matmul cublas >"$out/bench-cublas.log" 2>&1
for tile in 128x128 128x64 64x128 64x64; do
  for split in 1 2 4 6; do
    echo "== DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split (mma.sync)"
    DING_GEMM_WGMMA=0 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split "$bench" ops --op matmul --filter M256_N --backend cuda \
      --min-time 0.1 2>&1 | grep -E "xbf16"
  done
done >"$out/bench-sweep-m256.log" 2>&1
for tile in 128x128 128x256; do
  echo "== DING_GEMM_TILE=$tile (wgmma)"
  DING_GEMM_TILE=$tile "$bench" ops $cases --min-time 0.1 2>&1 | grep -E "xbf16"
done >"$out/bench-sweep-wgmma.log" 2>&1
for tile in 128x256 128x128 64x128; do  # every case unsplit, then K splits at M = 256
  echo "== DING_GEMM_TILE=$tile DING_GEMM_SPLIT=1 (tma)"
  DING_GEMM_TMA=1 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=1 "$bench" ops $cases --min-time 0.1 2>&1 | grep -E "xbf16"
  for split in 2 4; do
    echo "== DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split (tma)"
    DING_GEMM_TMA=1 DING_GEMM_TILE=$tile DING_GEMM_SPLIT=$split "$bench" ops --op matmul --filter M256_N --backend cuda \
      --min-time 0.1 2>&1 | grep -E "xbf16"
  done
done >"$out/bench-sweep-tma.log" 2>&1
cat "$out/summary.txt"
grep -E "xbf16" "$out/bench-ding.log" "$out/bench-ding-no-wgmma.log" "$out/bench-ding-tma.log" "$out/bench-cublas.log"
exit $status
