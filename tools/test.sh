#!/usr/bin/env bash
# Set up, build, and run every test (GoogleTest through ctest), then the same CPU tests and the
# fuzz targets again under ASan + UBSan (tools/sanitize.sh); prints both ctest summaries.
set -euo pipefail
cd "$(dirname "$0")/.."
# CUDA as CMake finds it, the kokkos backend on Debian's Kokkos, tests and tools on, whatever
# tools/main.sh left in build/'s cache. Without an NVIDIA GPU the CUDA code is compiled to PTX only
# (DING_CUDA_PTX_ONLY): nothing here runs it, and every line still compiles in about an eighth of
# the time. Likewise without an AMD GPU (no /dev/kfd) the hip kernels are compiled at -O0
# (DING_HIP_CHECK_ONLY).
ptx_only=ON
nvidia-smi -L >/dev/null 2>&1 && ptx_only=OFF
hip_check_only=ON
[[ -e /dev/kfd ]] && hip_check_only=OFF
tools/setup.sh --hip --kokkos --sanitize -UDING_CUDA -DDING_CUDA_PTX_ONLY=$ptx_only -DDING_HIP_CHECK_ONLY=$hip_check_only \
  -DDING_BUILD_TOOLS=ON -DDING_BUILD_TESTS=ON
(cd build && ctest --output-on-failure --parallel "$(nproc)" --timeout 600)
exec tools/sanitize.sh
