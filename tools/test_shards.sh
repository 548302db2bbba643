#!/usr/bin/env bash
# One ding_tests binary run as SHARDS gtest shards at once (a GPU test process pays seconds of device
# start-up, which a process per test would pay for each of thousands of cases), then the failed tests
# and, last, the totals. Each shard's output stays in DIR: shard-I.log, and shard-I.xml for
# tools/parity_table.py.
#   tools/test_shards.sh DING_TESTS SHARDS DIR [ding_tests arguments]
# Environment: DING_SHARD_THREADS (OpenMP threads a shard, default 1). Exit status 0 when every shard passed.
set -uo pipefail
usage="usage: test_shards.sh DING_TESTS SHARDS DIR [ding_tests arguments]"
tests=${1:?$usage} shards=${2:?$usage} dir=${3:?$usage}
shift 3
[[ -x $tests ]] || { echo "test_shards.sh: error: '$tests' is not an executable" >&2; exit 1; }
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "test_shards.sh: error: SHARDS must be a positive integer, got '$shards'" >&2; exit 1; }
mkdir -p "$dir" && rm -f "$dir"/shard-*.xml "$dir"/shard-*.log
pids=()
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i OMP_NUM_THREADS=${DING_SHARD_THREADS:-1} "$tests" --gtest_brief=1 \
    --gtest_output="xml:$dir/shard-$i.xml" "$@" >"$dir/shard-$i.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
# Failed tests counted by name: --gtest_brief prints no "N tests, listed below" summary.
failures=$(grep -h -E "^\[  FAILED  \] [A-Za-z]" "$dir"/shard-*.log | sort -u)
[[ -n $failures ]] && head -40 <<<"$failures"
cat "$dir"/shard-*.log | awk -v shards="$shards" -v f="$(grep -c . <<<"$failures")" '
  /^\[  PASSED  \]/ { p += $4 } /^\[  SKIPPED \] [0-9]+ tests?[.,]/ { s += $4 }
  END { printf "%d passed, %d skipped, %d failed (gtest, %d shards)\n", p, s, f, shards }'
exit $status
