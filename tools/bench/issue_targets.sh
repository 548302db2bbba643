#!/usr/bin/env bash
# The GPU speed targets still open (issues 20, 21 and 22) measured in one call with a ding-bench
# already built (tools/device_pack.sh), each run printed under a short name with its decode and
# roofline lines, so a session starts from this machine's numbers rather than another card's:
#   issue 20: OLMoE-1B-7B decode at batch 1 and 8 (share of its byte roofline, target 70 %); MLA
#             decode at 32768 keys (share of the copy bandwidth, target 80 %) and DeepSeek-V2-Lite's step;
#   issue 21: the gated delta rule at 4096 tokens, recurrent against chunk-wise (target 10×); Gated
#             DeltaNet decode (share of its byte roofline, target 70 %);
#   issue 22: Llama-3.1-8B decode in bf16, int8 and fp8, the 8-bit ones with the LM head in 8 bits
#             (target 1.8× bf16, 85 % of their own roofline).
#   tools/bench/issue_targets.sh DING_BENCH [LOG]   (LOG: every run's whole output, default $OUT/targets.txt)
# Environment: DING_TARGETS (default "20 21 22": the issues to measure).
set -uo pipefail
bench=${1:?usage: issue_targets.sh DING_BENCH [LOG]}
log=${2:-${OUT:-/tmp}/targets.txt}
[[ -x $bench ]] || { echo "issue_targets.sh: error: '$bench' is not an executable" >&2; exit 1; }
: >"$log"
start=$SECONDS
# One measurement: its tag, then ding-bench's arguments; the lines worth reading are printed
# (decode, roofline, and the op cases' rows), the whole output appended to the log (the device
# tool brings back few files, so one).
measure() {
  local tag=$1 output rc
  shift
  output=$(timeout 300 "$bench" "$@" 2>&1)
  rc=$?
  printf '== %s: ding-bench %s\n%s\n' "$tag" "$*" "$output" >>"$log"
  echo "== $tag [$((SECONDS - start)) s, exit $rc]: ding-bench $*"
  grep -E "decode|roofline|bench_|ceiling|error" <<<"$output" | head -12
}
source "$(dirname "$0")/target_runs.sh"
# shellcheck disable=SC2046  # the run's arguments are words by design
model() { measure "$1" model --backend cuda --dtype bf16 $(target_run_args "$1"); }
for issue in ${DING_TARGETS:-20 21 22}; do
  case $issue in
    20)
      model olmoe-b1
      model olmoe-b8
      measure mla-op ops --backend cuda --op mla_decode --filter bench_B1_
      model dsv2-32k ;;
    21)
      measure delta-rule ops --backend cuda --op gated_delta_rule --filter bench_B1_T4096_
      model gdn-1k ;;
    22)
      model llama-bf16
      model llama-int8
      model llama-fp8 ;;
    *) echo "issue_targets.sh: error: no targets for issue '$issue' (20, 21, 22)" >&2; exit 1 ;;
  esac
done
