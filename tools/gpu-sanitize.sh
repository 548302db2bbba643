#!/usr/bin/env bash
# compute-sanitizer over the cuda tests and a ding-run of every model fixture, on a GPU machine
# with CUDA, CMake and ninja (dependencies as for tools/gpu-check.sh). Each tool's test run is
# split into gtest shards, one compute-sanitizer process per core; a tool passes when every
# process reports "ERROR SUMMARY: 0 errors". Each process's log stays in the build folder
# (sanitize/); the folder given (default $OUT) gets the build log and, per tool, one file with the
# logs that report errors.
#   tools/gpu-sanitize.sh [out-dir]      TOOLS="memcheck racecheck synccheck" FILTER='*cuda*'
# Environment: DING_DEPS, DING_GPU_BUILD, DING_CUDA_ARCH as for tools/gpu-check.sh; SHARDS (default
# the core count).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-sanitize-logs}}
mkdir -p "$out"
source tools/gpu_build.sh
# One shard per core (gpu_build.sh counts them).
shards=${SHARDS:-$cores}
export OMP_NUM_THREADS=1
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
gpu_build gpu-sanitize "$out/build.log"
logs=$build/sanitize
rm -rf "$logs" && mkdir -p "$logs"
status=0
# One line per log: the file and its error summary (or that it has none: the process died).
summarize() {
  local failed=0
  for log in "$@"; do
    local line
    # memcheck and synccheck end with "ERROR SUMMARY: 0 errors", racecheck with
    # "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
    line=$(grep -ah "SUMMARY: " "$log" | tail -1)
    [[ $line == *"ERROR SUMMARY: 0 errors"* || $line == *"SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"* ]] || { failed=1; echo "  $(basename "$log"): ${line:-no summary (see the log)}"; }
  done
  return $failed
}
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
  extra=()
  [[ $tool == memcheck ]] && extra=(--leak-check full)
  start=$SECONDS
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 9 \
      "$build/tests/ding_tests" --gtest_filter="${FILTER:-*cuda*}" --gtest_brief=1 >"$logs/$tool-tests-$i.log" 2>&1 &
  done
  wait
  for fixture in tests/data/*-fixtures/*/; do
    name=$(basename "$fixture")
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 9 "$build/tools/ding-run" -m "$fixture" --backend cuda \
      --tokens 1,2,3,4 -n 8 --seed 1 >"$logs/$tool-run-$name.log" 2>&1 &
  done
  wait
  if summarize "$logs/$tool"-*.log; then
    passed=$(cat "$logs/$tool"-tests-*.log | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s += $1} END {print s + 0}')
    echo "$tool: 0 errors in ${passed:-0} passed tests ($shards shards) and $(ls "$logs/$tool"-run-*.log | wc -l) ding-run fixtures ($((SECONDS - start)) s)"
  else
    echo "$tool: errors above"; status=1
    for log in "$logs/$tool"-*.log; do
      summarize "$log" >/dev/null || { echo "==== $(basename "$log")"; head -c 200000 "$log"; }
    done >"$out/$tool-errors.log"
  fi
  grep -h "^\[  FAILED  \]" "$logs/$tool"-tests-*.log | head -10
done
exit $status
