#!/usr/bin/env bash
# How long a from-scratch build takes on this machine, and which translation units take it:
# configures a fresh build folder, builds the library alone, then the rest of the tree, and prints
# both wall times and the slowest units (from ninja's log, each unit's own compile time).
#   tools/build-time.sh [cmake arguments, e.g. -DDING_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90]
# Environment: DING_DEPS (prefix of the packages unpacked by ../shared/tools/device-deps.sh, default
# .deps/usr when it exists), DING_BUILD_TIME_DIR (the folder, default build-time; emptied first),
# OUT (where ninja's log is copied, if set).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DING_BUILD_TIME_DIR:-build-time}
deps=${DING_DEPS:-$PWD/.deps/usr}
prefix=()
[[ -d $deps ]] && prefix=(-DCMAKE_PREFIX_PATH="$deps")
rm -rf "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" "$@" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; echo "build-time: configure failed"; exit 1; }
jobs=$(nproc)
seconds() {
  local start=$EPOCHREALTIME
  "$@" >>"$build.log" 2>&1 || { tail -30 "$build.log" >&2; echo "build-time: build failed" >&2; return 1; }
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }'
}
library=$(seconds cmake --build "$build" --parallel "$jobs" --target ding) || exit 1
rest=$(seconds cmake --build "$build" --parallel "$jobs") || exit 1
printf 'build-time: library (ding) %.0f s, then the rest of the tree %.0f s, on %d cores (%s)\n' \
  "$library" "$rest" "$jobs" "$*"
echo "build-time: slowest units (s, each compiled alongside up to $((jobs - 1)) others):"
awk 'NR > 1 { printf "%8.1f  %s\n", ($2 - $1) / 1000, $4 }' "$build/.ninja_log" | sort -rn | head -20
[[ -n ${OUT:-} ]] && cp "$build/.ninja_log" "$OUT/ninja_log.txt"
exit 0
