#!/usr/bin/env bash
# The main job: set up, build ding-run alone (no tests, no ding-bench) and run it on the shipped
# default model (a small GPT-2 trained on the Brown corpus). The CUDA backend is compiled only
# where nvidia-smi sees a GPU (and nvcc is found), or when --cuda, the first argument, asks for it:
# without a GPU it could only report itself unavailable, and it is most of the build time.
# Other arguments go to ding-run, e.g. -p "Once upon a time" -n 200.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --cuda ]]; then
  shift
  cuda=(-DDING_CUDA=ON)
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  cuda=(-UDING_CUDA)  # CMake's own choice: on when nvcc is found
else
  cuda=(-DDING_CUDA=OFF)
fi
# The build folder is tools/test.sh's too: the flags are given each time, so neither inherits
# the other's from CMake's cache.
tools/setup.sh --target=ding-run "${cuda[@]}" -DDING_BUILD_TOOLS=ON -DDING_BUILD_TESTS=OFF
exec build/tools/ding-run "$@"
