#!/usr/bin/env bash
# Installs what ding needs from Debian 12 packages (only what is missing), then configures and
# builds into build/. Used by tools/main.sh and tools/test.sh; safe to rerun.
#   --hip         also install Debian's hipcc and HIP headers and build the hip backend for AMD
#                 GPUs (gfx90a and gfx1030; tools/test.sh passes it): without an AMD GPU its tests
#                 report SKIPPED, and the build keeps the GPU sources single-source.
#   --kokkos      also install Debian's Kokkos (libtrilinos-kokkos-dev: 3.4.1, Serial) and build
#                 the kokkos backend against it (tools/test.sh passes it).
#   --sanitize    also install what tools/sanitize.sh builds with: clang, its ASan/UBSan and
#                 libFuzzer runtimes, its OpenMP runtime and llvm-symbolizer (for readable reports).
#   --deps-only   install the packages and stop (no configure, no build).
#   --target=T    build only target T (and what it needs) instead of everything.
# Without -DDING_CUDA=... the CUDA backend is built whenever nvcc is found
# (/usr/local/cuda/bin/nvcc or on PATH). Other arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build libeigen3-dev libgtest-dev libgmock-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libicu-dev)
cmake_args=()
build=1
targets=()
for arg in "$@"; do
  if [[ $arg == --hip ]]; then
    packages+=(hipcc libamdhip64-dev)
    cmake_args+=(-DDING_HIP=ON)
  elif [[ $arg == --kokkos ]]; then
    packages+=(libtrilinos-kokkos-dev)
    cmake_args+=(-DDING_KOKKOS=ON)
  elif [[ $arg == --sanitize ]]; then
    packages+=(clang libclang-rt-14-dev libomp-dev llvm-14)
  elif [[ $arg == --deps-only ]]; then
    build=0
  elif [[ $arg == --target=* ]]; then
    targets=(--target "${arg#--target=}")
  else
    cmake_args+=("$arg")
  fi
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
((build)) || exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
cmake --build build --parallel "$(nproc)" "${targets[@]}"
