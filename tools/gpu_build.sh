# Sourced by the GPU-machine scripts (gpu-sanitize.sh, bench/llama_check.sh, bench/gemv_sweep.sh):
# the dependencies unpacked by ../shared/tools/device-deps.sh (DING_DEPS, default .deps/usr), the
# build folder (DING_GPU_BUILD, default build-gpu) and one function that configures and builds it.
#   gpu_build NAME LOG [TARGET]   Release, CUDA on, DING_CUDA_ARCH (e.g. 90) if set, the TMA core if
#                                 DING_CUDA_TMA=ON; on failure prints the log's tail and exits 1 as
#                                 "NAME: build failed"
# `cores` is the machine's core count (nproc alone reads OMP_NUM_THREADS, which the scripts set).
deps=${DING_DEPS:-$PWD/.deps/usr}
build=${DING_GPU_BUILD:-build-gpu}
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
# The logs folder: the script's first argument, else $OUT, else NAME-logs; created. Sets `out`.
gpu_out() { out=${2:-${OUT:-$1-logs}}; mkdir -p "$out"; }
gpu_build() {
  local name=$1 log=$2 target=${3:-}
  { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$deps" -DDING_CUDA=ON -DDING_CUDA_TMA=${DING_CUDA_TMA:-OFF} \
      ${DING_CUDA_ARCH:+-DCMAKE_CUDA_ARCHITECTURES=$DING_CUDA_ARCH} &&
    cmake --build "$build" --parallel "$cores" ${target:+--target "$target"}; } >"$log" 2>&1 ||
    { tail -40 "$log"; echo "$name: build failed"; exit 1; }
}
