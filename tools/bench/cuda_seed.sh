#!/usr/bin/env bash
# On a GPU machine (as tools/gpu-check.sh: CUDA, CMake, ninja, Python with torch + transformers,
# the Debian packages unpacked into .deps): builds ding-run and ding-bench, generates from the
# shipped model and from a gpt2-xl-shaped model with random weights on `cuda`, and runs the seed
# benchmark (256-token prompt, 256 new tokens, batch 1, gpt2-xl shapes, bf16).
#   tools/bench/cuda_seed.sh [build folder]
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${1:-build-gpu}
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target ding-run ding-bench >/dev/null
echo "== ding-run, shipped model, cuda"
"$build/tools/ding-run" --backend cuda -p "The jury said" -n 48 --greedy
xl=${DING_GPT2_XL:-/tmp/gpt2-xl-random}
[[ -f $xl/model.safetensors ]] || python3 tools/fixtures/make_random_gpt2.py --shape gpt2-xl --dtype bf16 --out "$xl"
echo "== ding-run, gpt2-xl shape (random weights), cuda, bf16"
"$build/tools/ding-run" -m "$xl" --backend cuda --dtype bf16 -p "The jury said" -n 64 --greedy
echo "== seed benchmark: ding-bench model --shape gpt2-xl --backend cuda --dtype bf16"
"$build/tools/ding-bench" model --shape gpt2-xl --backend cuda --dtype bf16 --prompt 256 --new 256
echo "== the same without CUDA graphs"
"$build/tools/ding-bench" model --shape gpt2-xl --backend cuda --dtype bf16 --prompt 256 --new 256 --no-graphs
