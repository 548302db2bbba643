#!/usr/bin/env bash
# HIP on an NVIDIA GPU (issue 19, item 3), first step: HIP's NVIDIA platform headers from Debian's
# libamdhip64-dev, patched for CUDA 13 into the build tree (cmake/hip_nvidia_headers.cmake), and
# a smoke program of the host API ding's GPU code uses, built with nvcc and run.
#   tools/hip-nvidia-check.sh [build folder]     DING_CUDA_ARCH (default 89;90), HIP_INCLUDE (default /usr/include/hip)
# On a machine without the package (the GPU machine), point HIP_INCLUDE at an unpacked copy, e.g.
# ../shared/tools/device-deps.sh .deps libamdhip64-dev gives .deps/usr/include/hip. Without a
# GPU the program is built and not run.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-hip-nvidia}
include="$build/hip-nvidia/include"
cmake -DSOURCE="${HIP_INCLUDE:-/usr/include/hip}" -DDEST="$include/hip" -P cmake/hip_nvidia_headers.cmake
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
arch_flags=()
IFS=';' read -ra archs <<<"${DING_CUDA_ARCH:-89;90}"
for arch in "${archs[@]}"; do arch_flags+=("--generate-code=arch=compute_$arch,code=sm_$arch"); done
"$nvcc" -std=c++17 -O2 -D__HIP_PLATFORM_NVIDIA__ -isystem "$include" "${arch_flags[@]}" \
  -o "$build/hip_nvidia_smoke" tests/hip/hip_nvidia_smoke.cu
if nvidia-smi -L >/dev/null 2>&1; then
  "$build/hip_nvidia_smoke"
else
  echo "hip-nvidia-check: built $build/hip_nvidia_smoke; no NVIDIA GPU here to run it"
fi
