#!/usr/bin/env bash
# The whole test suite on a GPU machine that has CUDA, CMake and ninja but no Debian packages:
# builds with the dependencies unpacked by ../shared/tools/device-deps.sh (default .deps/usr),
# runs ding_tests in one gtest shard per core, then prints the op-parity table (passed / failed /
# skipped parity cases per op and backend), the failed cases and the totals.
#   tools/gpu-check.sh [ding_tests arguments, e.g. --gtest_filter='*Parity*']
# Environment: DING_DEPS (prefix of the unpacked packages), DING_GPU_BUILD (build folder),
# DING_CUDA_ARCH (e.g. 90: build for the chip at hand only; default: CMake's list, sm_89 and sm_90),
# DING_CUDA_TMA (ON: also the persistent TMA matmul core, so DING_GEMM_TMA=1 runs can use it),
# DING_GPU_HIP (1: also the hip backend, built through HIP's NVIDIA headers, so the parity suite
# and the fixtures run on "hip" on the same GPU; default: 1 when the deps hold include/hip, which
# `device-deps.sh .deps libamdhip64-dev` unpacks), DING_GPU_BUILD_ONLY (1: stop after the build, so a
# caller can prepare test data meanwhile and run this again for the tests).
set -uo pipefail
cd "$(dirname "$0")/.."
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-gpu}
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc alone reads OMP_NUM_THREADS
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}  # ctest runs a process per core; more threads each only oversubscribe
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
hip=${DING_GPU_HIP:-$([[ -f $deps/include/hip/hip_runtime.h ]] && echo 1 || echo 0)}
hip_args=(-DDING_HIP=OFF)
((hip)) && hip_args=(-DDING_HIP=ON -DDING_HIP_PLATFORM=nvidia -DDING_HIP_INCLUDE="$deps/include")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON -DDING_CUDA_TMA=${DING_CUDA_TMA:-OFF} "${hip_args[@]}" \
  ${DING_CUDA_ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$DING_CUDA_ARCH} >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$build" --parallel "$cores" 2>&1 | grep -E "error:|warning: |FAILED" | head -50
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "gpu-check: build failed"; exit 1; }
echo "gpu-check: build took $(($(date +%s) - start)) s on $cores cores (hip: $hip)"
[[ ${DING_GPU_BUILD_ONLY:-0} == 1 ]] && exit 0
# One ding_tests process per core, each a gtest shard (tools/test_shards.sh); the op-parity table
# from their reports, then the failures and totals.
summary=$(tools/test_shards.sh "$build/tests/ding_tests" "$cores" "$build/tests" "$@")
status=$?
python3 tools/parity_table.py "$build"/tests/shard-*.xml
sed '$s/^/gpu-check: /' <<<"$summary"
exit $status
