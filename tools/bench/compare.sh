#!/usr/bin/env bash
# ding against the best PyTorch stack on the same GPU, in one go (issues 5 and 17): builds ding-bench
# and ding-run, runs the seed benchmark (bf16, 256-token prompt + 256 new) on both for GPT-2 and
# Llama shapes, the GEMM/GEMV, attention_decode and matmul_chain op benchmarks, keeps every raw
# output and prints a side-by-side table.
#   tools/bench/compare.sh [--shape NAME]... [build folder]      (from anywhere; runs in the repository root)
# --shape (repeatable) picks the model shapes, each at batch 1 and 8 (names: ding-bench model --help), or
# NAME:B one batch only (deepseek-v2-lite:1: two copies of its 31 GB would not fit beside ding's);
# without it: gpt2-xl (batch 1 and 8), gpt2 (batch 1) and llama-3.2-1b (batch 1 and 8).
# Environment:
#   OUT              results folder (default results/compare-<date>); raw outputs + table.txt
#   DING_CUDA_ARCH   CMAKE_CUDA_ARCHITECTURES (default 90, the H100)
#   DING_DEPS        the unpacked Debian packages (default $PWD/.deps/usr, as tools/bench/cuda_seed.sh)
#   PYTHON           the Python with torch + transformers (default python3)
#   DING_COMPARE_BUDGET  seconds for the whole run (default 520: one device call allows 10 minutes)
#   DING_COMPARE_QUANTIZE  8-bit formats (e.g. "int8 fp8"): ding's runs again with --quantize, each, after
#                    the bf16 ones (issue 22's table: tok/s and the share of their own roofline)
#   DING_COMPARE_TESTS   a gtest filter: also build ding_tests and run those tests (e.g. the cuda
#                    parity cases of the ops under work, '*cuda_matmul*') while PyTorch compiles
# Time: the PyTorch runs compile (torch.compile, minutes) in the background while ding
# builds, then wait; every timed run, ding's and PyTorch's, has the GPU to itself. A step that
# fails or runs out of time leaves its output with the error and shows as n/a in the table.
set -uo pipefail
script="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../.." || exit 1
deps=${DING_DEPS:-$PWD/.deps/usr}
arch=${DING_CUDA_ARCH:-90}
build=build-compare
shapes=()
while (( $# > 0 )); do
  case $1 in
    --shape) [[ $# -ge 2 ]] || { echo "compare.sh: --shape needs a name" >&2; exit 1; }; shapes+=("$2"); shift 2 ;;
    --shape=*) shapes+=("${1#--shape=}"); shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compare.sh: unknown option $1" >&2; exit 1 ;;
    *) build=$1; shift ;;
  esac
done
# The model runs, shape:batch; each has a ding_<shape>_b<batch> and a torch_<shape>_b<batch> output.
if (( ${#shapes[@]} == 0 )); then
  model_runs=(gpt2-xl:1 gpt2-xl:8 gpt2:1 llama-3.2-1b:1 llama-3.2-1b:8)
else
  model_runs=()
  for shape in "${shapes[@]}"; do
    if [[ $shape == *:* ]]; then model_runs+=("$shape"); else model_runs+=("$shape:1" "$shape:8"); fi
  done
fi
# Seconds a ding-bench model run may take: most of it is drawing the random weights on the host.
ding_limit() {
  case ${1%%:*} in
    gpt2) echo 40 ;; gpt2-medium) echo 60 ;; gpt2-large) echo 90 ;; llama-3.1-8b | deepseek-v2-lite) echo 420 ;; *) echo 120 ;;
  esac
}
python=${PYTHON:-python3}
out=${OUT:-$PWD/results/compare-$(date +%Y%m%d-%H%M%S)}
budget=${DING_COMPARE_BUDGET:-520}
mkdir -p "$out"
python_env=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")  # PyTorch keeps the caller's libraries; ding gets .deps
export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
start=$SECONDS
note() { echo "[$((SECONDS - start))s] $*"; }
left() { echo $((budget - (SECONDS - start))); }

# run NAME LIMIT CMD...: CMD's stdout + stderr into $out/NAME.txt, at most LIMIT seconds (less
# if the budget is nearly spent), keeping the reserve for what must still run after it.
reserve=0
run() {
  local name=$1 limit=$2
  shift 2
  local avail=$(( $(left) - reserve ))
  (( avail < limit )) && limit=$avail
  if (( limit < 5 )); then
    echo "skipped: out of time (budget ${budget}s)" >"$out/$name.txt"
    note "$name: skipped, out of time"
    return
  fi
  note "$name (limit ${limit}s): $*"
  { echo "\$ $*"; timeout --kill-after=5 "$limit" "$@"; } >"$out/$name.txt" 2>&1
  local rc=$?
  (( rc != 0 )) && { echo "exit status $rc" >>"$out/$name.txt"; note "$name: exit status $rc (see $out/$name.txt)"; }
}

# ---- PyTorch: compile and warm up now, time later -------------------------------------------
declare -A torch_args
torch_order=()
for run_spec in "${model_runs[@]}"; do
  name="torch_${run_spec%%:*}_b${run_spec##*:}"
  torch_args[$name]="--shape ${run_spec%%:*} --batch ${run_spec##*:}"
  torch_order+=("$name")
done
declare -A torch_pid
go="$out/.go"
mkdir -p "$go"
rm -f "$go"/*
{ "${python_env[@]}" "$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; \
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1; } >"$out/versions.txt" 2>&1
for name in "${torch_order[@]}"; do
  # shellcheck disable=SC2086  # the arguments are words
  { echo "\$ $python tools/bench/peer_torch.py ${torch_args[$name]} --prompt 256 --new 256"; \
    exec timeout --kill-after=5 "$budget" "${python_env[@]}" "$python" tools/bench/peer_torch.py ${torch_args[$name]} --prompt 256 --new 256 \
      --wait-for "$go/$name" --wait-timeout "$budget"; } >"$out/$name.txt" 2>&1 &
  torch_pid[$name]=$!
done
note "PyTorch runs compiling in the background: ${torch_order[*]}"

# ---- ding: build ---------------------------------------------------------------------------
reserve=$(( 40 * ${#model_runs[@]} + 60 ))  # the ding and PyTorch timed runs after the build
tests=${DING_COMPARE_TESTS:-}
run build 360 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH='$deps' \
  -DDING_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES='$arch' && \
  cmake --build '$build' --parallel $(nproc) --target ding-bench ding-run ${tests:+ding_tests}"
bench="$build/tools/ding-bench"
[[ -x $bench ]] || note "no ding-bench: the ding rows will show n/a"
# Correctness first (the GPU is shared with PyTorch's compile-time warm-up, which times nothing).
[[ -n $tests ]] && run tests 90 "$build/tests/ding_tests" --gtest_filter="$tests" --gtest_brief=1

# Wait until every PyTorch run is compiled (or gone) before timing anything on the GPU.
for name in "${torch_order[@]}"; do
  while [[ ! -e $go/$name.ready ]] && kill -0 "${torch_pid[$name]}" 2>/dev/null && (( $(left) > 150 )); do sleep 1; done
  [[ -e $go/$name.ready ]] || note "$name: not ready (see $out/$name.txt)"
done
note "PyTorch compiled; timing"

# ---- ding: the seed benchmark and variants, then the ops --------------------------------------
reserve=$(( 20 * ${#model_runs[@]} ))  # the PyTorch timed phases
model=(model --backend cuda --dtype bf16 --prompt 256 --new 256)
for run_spec in "${model_runs[@]}"; do
  run "ding_${run_spec%%:*}_b${run_spec##*:}" "$(ding_limit "$run_spec")" "$bench" "${model[@]}" \
    --shape "${run_spec%%:*}" --batch "${run_spec##*:}"
done

for q in ${DING_COMPARE_QUANTIZE:-}; do
  for run_spec in "${model_runs[@]}"; do
    run "ding_${run_spec%%:*}_b${run_spec##*:}_q$q" "$(ding_limit "$run_spec")" "$bench" "${model[@]}" \
      --shape "${run_spec%%:*}" --batch "${run_spec##*:}" --quantize "$q"
  done
done

# Time PyTorch now (each alone on the GPU), before the op benchmarks that may run out of time.
reserve=0
for name in "${torch_order[@]}"; do
  # still compiling: wait for it while the budget lasts, then 60 s for its timed runs
  while [[ ! -e $go/$name.ready ]] && kill -0 "${torch_pid[$name]}" 2>/dev/null && (( $(left) > 30 )); do sleep 1; done
  touch "$go/$name"
  waited=0
  while kill -0 "${torch_pid[$name]}" 2>/dev/null && (( waited < 120 && $(left) > 0 )); do sleep 0.5; waited=$((waited + 1)); done
  if kill -0 "${torch_pid[$name]}" 2>/dev/null; then
    kill "${torch_pid[$name]}" 2>/dev/null
    echo "killed: no result within 60 s of the go signal, or out of time" >>"$out/$name.txt"
  fi
  wait "${torch_pid[$name]}" 2>/dev/null
  note "$name: done"
done

ops=(ops --backend cuda --min-time 0.2)
run ops_matmul_ding 120 "$bench" "${ops[@]}" --op matmul --filter 'M1_|M256_|M2048_' --filter xbf16
run ops_matmul_cublas 90 "$bench" "${ops[@]}" --op matmul --filter 'M256_|M2048_' --filter xbf16 --matmul cublas
run ops_chain 60 "$bench" "${ops[@]}" --op matmul_chain --filter 50304
run ops_attention 40 "$bench" "${ops[@]}" --op attention_decode --filter S4096 --filter bf16

rm -rf "$go"
"$python" tools/bench/compare_table.py "$out" | tee "$out/table.txt"
note "raw outputs and table.txt in $out"
