#!/usr/bin/env bash
# Two ding-bench programs on the same decode runs, interleaved, so both see the same machine: for
# each run (a quoted string of ding-bench model arguments) and each round, A then B, printing each
# one's decode and roofline lines. For a change judged by its whole step, e.g. the binaries of the
# parent commit (A) and of the change (B), both built here and carried to the GPU machine.
#   tools/bench/model_ab.sh A B ROUNDS "RUN ARGS" ["RUN ARGS" ...]
#   e.g. tools/bench/model_ab.sh /tmp/base/ding-bench /tmp/bin/ding-bench 2 \
#          "--shape olmoe-1b-7b --prompt 256 --new 64" "--shape deepseek-v2-lite --prompt 256 --new 16"
# Each run is `ding-bench model --backend cuda --dtype bf16 RUN ARGS` unless RUN ARGS name them.
set -uo pipefail
(($# >= 4)) || { echo "model_ab.sh: error: usage: model_ab.sh A B ROUNDS \"RUN ARGS\"..." >&2; exit 1; }
a=$1 b=$2 rounds=$3
shift 3
for program in "$a" "$b"; do
  [[ -x $program ]] || { echo "model_ab.sh: error: '$program' is not an executable" >&2; exit 1; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "model_ab.sh: error: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 1; }
status=0
for run in "$@"; do
  defaults=()
  [[ $run == *--backend* ]] || defaults+=(--backend cuda)
  [[ $run == *--dtype* ]] || defaults+=(--dtype bf16)
  echo "== $run"
  for ((r = 1; r <= rounds; ++r)); do
    for side in A B; do
      program=$a
      [[ $side == B ]] && program=$b
      # shellcheck disable=SC2086  # RUN ARGS are words by design
      output=$(timeout 300 "$program" model "${defaults[@]}" $run 2>&1)
      rc=$?
      echo "$output" | grep -E "^(decode|roofline)" | sed "s/^/$side round $r: /"
      if ((rc)); then
        status=1
        echo "$side round $r: exit status $rc"
        echo "$output" | tail -3
      fi
    done
  done
done
exit $status
