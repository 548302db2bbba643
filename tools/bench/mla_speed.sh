#!/usr/bin/env bash
# Latent attention's decode on a GPU machine, with programs tools/device_pack.sh brought (in DIR,
# default /tmp/bin, after `tools/device_pack.sh --unpack`): the mla_decode op benches under each
# value of the DING_MLA_* switches named (each twice, interleaved), the 32k-key case's kernels
# alone under ncu with the merge and projection in one launch (tools/bench/op_kernels.sh), and
# DeepSeek-V2-Lite's decode step at a short and a 32k context under each switch.
#   tools/bench/mla_speed.sh [DIR]        DING_MLA_AB="DING_MLA_FOLD=1 DING_MLA_FOLD=0" (the default): the
#                                         settings, each one or more switches joined by commas
#                                         (DING_MLA_STAGES=2,DING_MLA_FOLD=1); DING_MLA_MODEL_AB: the
#                                         model's settings, DING_MLA_NCU_AB the kernel profile's
#                                         (default DING_MLA_FOLD=1), where they differ from those
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-/tmp/bin}
bench="$bin/ding-bench"
for round in 1 2; do
  for setting in ${DING_MLA_AB:-DING_MLA_FOLD=1 DING_MLA_FOLD=0}; do
    echo "== round $round, $setting"
    env ${setting//,/ } timeout 120 "$bench" ops --backend cuda --op mla_decode --filter bench_ 2>&1 | grep "bench_"
  done
done
if command -v ncu >/dev/null; then
  for setting in ${DING_MLA_NCU_AB:-DING_MLA_FOLD=1}; do
    echo "== kernels alone (ncu), $setting"
    env ${setting//,/ } DING_BENCH="$bench" tools/bench/op_kernels.sh mla_decode bench_B1_S32768,Dv128_bf16_full
  done
fi
for prompt in 256 32768; do
  for setting in ${DING_MLA_MODEL_AB:-${DING_MLA_AB:-DING_MLA_FOLD=1 DING_MLA_FOLD=0}}; do
    echo "== deepseek-v2-lite, prompt $prompt, $setting"
    env ${setting//,/ } timeout 300 "$bench" model --backend cuda --dtype bf16 --shape deepseek-v2-lite --prompt "$prompt" \
      --new 16 2>&1 | grep -E "decode|roofline|error"
  done
done
