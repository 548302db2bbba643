#!/usr/bin/env bash
# The sanitizer build (what tools/test.sh runs after the main one): the CPU code compiled by clang
# with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's coverage, into build-san/;
# then, through ctest, the whole CPU test suite and each fuzz target (tests/fuzz) for
# DING_FUZZ_RUNS executions from a fixed seed over its committed corpus. Any sanitizer report fails
# the run: UBSan is built not to recover, ASan stops at its first error, LeakSanitizer checks each
# process at exit. -O1 with line tables keeps the build and the tests fast enough for CI; asserts
# stay on (no NDEBUG). Extra arguments go to cmake (e.g. -DDING_FUZZ_RUNS=100000).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --sanitize --deps-only

cmake -S . -B build-san -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DDING_CUDA=OFF -DDING_SANITIZE=ON -DDING_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" "$@"
cmake --build build-san --parallel "$(nproc)"

export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[[ -x $symbolizer ]] && export ASAN_SYMBOLIZER_PATH=$symbolizer
cd build-san
exec ctest --output-on-failure --parallel "$(nproc)" --timeout 900
