#!/usr/bin/env bash
# One parity case under many seeds, to size a tolerance from measurements rather than from one
# failing seed: each seed's verdict, then tools/parity_table.py over every seed's XML report (the
# largest NMSE over its bound the case reached).
#   tools/case_seeds.sh DING_TESTS CASE [SEEDS] [FIRST_SEED]
#   e.g. tools/case_seeds.sh /tmp/bin/ding_tests \
#          cuda_gated_delta_rule_B1_T100_Hk1_Hv2_Dk256_Dv48_bf16_gatesbf16_outbf16_chunk64_gated 40
# CASE is the parity test's name after Ops/Parity.MatchesReference/ (backend first).
set -uo pipefail
(($# >= 2)) || { echo "case_seeds.sh: error: usage: case_seeds.sh DING_TESTS CASE [SEEDS] [FIRST_SEED]" >&2; exit 1; }
tests=$1 name=$2 seeds=${3:-20} first=${4:-1000}
[[ -x $tests ]] || { echo "case_seeds.sh: error: '$tests' is not an executable" >&2; exit 1; }
[[ $seeds =~ ^[1-9][0-9]*$ && $first =~ ^[0-9]+$ ]] || { echo "case_seeds.sh: error: SEEDS and FIRST_SEED must be integers" >&2; exit 1; }
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
failed=0
for ((seed = first; seed < first + seeds; ++seed)); do
  DING_TEST_SEED=$seed "$tests" --gtest_filter="Ops/Parity.MatchesReference/$name" --gtest_output="xml:$reports/$seed.xml" \
    >"$reports/$seed.log" 2>&1
  rc=$?
  grep -q '<testcase' "$reports/$seed.xml" 2>/dev/null ||
    { echo "case_seeds.sh: error: seed $seed ran no case '$name' (exit $rc)" >&2; exit 1; }
  ((rc == 0)) || ((++failed))
  echo "seed $seed: $( ((rc == 0)) && echo passed || echo FAILED)"
done
echo "$failed of $seeds seeds failed"
python3 "$(dirname "$0")/parity_table.py" "$reports"/*.xml
