#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel, on a GPU machine with Nsight Compute: ncu
# times every kernel of a short ding-bench model run (each alone), and step_kernels.py sums one
# decode step's kernels by name. Builds ding-bench first (DING_GPU_BUILD, default build-speed).
#   DING_CUDA_ARCH=90 tools/bench/step_kernels.sh SHAPE [BATCH]      e.g. olmoe-1b-7b 1
# DING_STEP_ARGS: ding-bench's extra arguments, by default --no-graphs: the step op by op, since ncu's
# replay of a recorded step's kernels failed with LaunchFailed on the MoE shapes (OLMoE, Qwen3-Next);
# each kernel is timed alone either way.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
shape=${1:?shape}
batch=${2:-1}
out=${OUT:-$PWD/results/step-kernels}
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-speed}
mkdir -p "$out"
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [[ ! -x $build/tools/ding-bench ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${DING_CUDA_ARCH:-90}" >"$out/build.txt" 2>&1 &&
    cmake --build "$build" --parallel "$(env -u OMP_NUM_THREADS nproc)" --target ding-bench >>"$out/build.txt" 2>&1 ||
    { tail -30 "$out/build.txt"; exit 1; }
fi
csv="$out/ncu_${shape}_b$batch.csv"
# --cache-control none and --clock-control none: the clocks and caches as a real step sees them.
timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$build/tools/ding-bench" model --backend cuda --dtype bf16 --prompt 8 --new 3 --shape "$shape" --batch "$batch" \
  ${DING_STEP_ARGS---no-graphs} \
  >"$csv" 2>"$out/ncu_${shape}_b$batch.err"
status=$?
# ncu's own messages go to stdout beside the CSV: on failure they are the CSV file's non-CSV lines.
((status == 0)) || { echo "step_kernels: ncu exited with $status"; grep -v '^"' "$csv" | tail -8; tail -5 "$out/ncu_${shape}_b$batch.err"; }
python3 tools/bench/step_kernels.py "$csv" --list "${DING_STEP_LIST:-0}"
