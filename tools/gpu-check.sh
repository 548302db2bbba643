#!/usr/bin/env bash
# The whole test suite on a GPU machine that has CUDA, CMake and ninja but no Debian packages:
# builds with the dependencies unpacked by ../shared/tools/device-deps.sh (default .deps/usr),
# runs every test through ctest, then prints the ctest summary and the op-parity table
# (passed / failed / skipped parity cases per op and backend).
#   tools/gpu-check.sh [ctest arguments, e.g. -R Parity]
# Environment: DING_DEPS (prefix of the unpacked packages), DING_GPU_BUILD (build folder),
# DING_CUDA_ARCH (e.g. 90: build for the chip at hand only; default: CMake's list, sm_89 and sm_90),
# DING_GPU_HIP (1: also the hip backend, built through HIP's NVIDIA headers, so the parity suite
# and the fixtures run on "hip" on the same GPU; default: 1 when the deps hold include/hip, which
# `device-deps.sh .deps libamdhip64-dev` unpacks).
set -uo pipefail
cd "$(dirname "$0")/.."
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-gpu}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}  # ctest runs a process per core; more threads each only oversubscribe
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
hip=${DING_GPU_HIP:-$([[ -f $deps/include/hip/hip_runtime.h ]] && echo 1 || echo 0)}
hip_args=(-DDING_HIP=OFF)
((hip)) && hip_args=(-DDING_HIP=ON -DDING_HIP_PLATFORM=nvidia -DDING_HIP_INCLUDE="$deps/include")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON "${hip_args[@]}" \
  ${DING_CUDA_ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$DING_CUDA_ARCH} >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$build" --parallel "$(nproc)" 2>&1 | grep -E "error:|warning: |FAILED" | head -50
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "gpu-check: build failed"; exit 1; }
echo "gpu-check: build took $(($(date +%s) - start)) s on $(nproc) cores (hip: $hip)"
cd "$build"
ctest --parallel "$(nproc)" --timeout 900 --output-junit ctest-junit.xml "$@" >ctest.log 2>&1
status=$?
python3 ../tools/parity_table.py ctest-junit.xml
sed -n '/tests passed/p; /The following tests FAILED/,/Errors while/p' ctest.log
exit $status
