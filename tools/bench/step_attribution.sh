#!/usr/bin/env bash
# What each op costs a decode step where it runs, inside the recorded step: the step timed as it
# is, then with each op left out in turn (ding-bench model --skip-op: its outputs left as they
# were, so only the times mean anything). The difference is the op's share of the step, its launch
# gaps and lost overlap included, which ncu's kernels-alone times (step_kernels.sh) do not show.
#   tools/bench/step_attribution.sh DING_BENCH "RUN ARGS" [OP ...]
#   e.g. tools/bench/step_attribution.sh build/tools/ding-bench "--shape olmoe-1b-7b --prompt 256 --new 64" \
#          attention_decode moe_route moe_matmul moe_combine matmul
# RUN ARGS are ding-bench model's (--backend cuda --dtype bf16 unless they name them); the ops
# default to a decode step's usual ones.
set -uo pipefail
(($# >= 2)) || { echo "step_attribution.sh: error: usage: step_attribution.sh DING_BENCH \"RUN ARGS\" [OP ...]" >&2; exit 1; }
bench=$1 run=$2
shift 2
[[ -x $bench ]] || { echo "step_attribution.sh: error: '$bench' is not an executable" >&2; exit 1; }
ops=("$@")
((${#ops[@]})) || ops=(matmul attention_decode mla_decode moe_route moe_matmul moe_combine rms_norm gated_delta_rule causal_conv1d argmax)
defaults=()
[[ $run == *--backend* ]] || defaults+=(--backend cuda)
[[ $run == *--dtype* ]] || defaults+=(--dtype bf16)
# ms/step of the decode line, or empty when the run failed.
step_ms() {
  # shellcheck disable=SC2086  # RUN ARGS are words by design
  timeout 600 "$bench" model "${defaults[@]}" $run "$@" 2>&1 | sed -n 's/^decode .*: \([0-9.]*\) ms\/step.*/\1/p'
}
base=$(step_ms)
[[ -n $base ]] || { echo "step_attribution.sh: error: the run without skips printed no decode line" >&2; exit 1; }
echo "== $run"
printf '%-20s %10s %12s\n' "left out" "ms/step" "op's share"
printf '%-20s %10s %12s\n' "nothing" "$base" ""
for op in "${ops[@]}"; do
  ms=$(step_ms --skip-op "$op")
  if [[ -z $ms ]]; then
    printf '%-20s %10s\n' "$op" "failed"
  else
    awk -v op="$op" -v ms="$ms" -v base="$base" 'BEGIN { printf "%-20s %10s %11.1f%%\n", op, ms, (base - ms) / base * 100 }'
  fi
done
