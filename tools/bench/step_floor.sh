#!/usr/bin/env bash
# The floor under each open target's decode step (issues 20–22): the step's reads, as ding's own
# per-op profile of the step gives them (every op call's bytes), replayed by bare read kernels
# (tools/bench/chain_floor.cu): as kernels that each wait for the one before before loading, as
# kernels that load part of their bytes before that wait the way ding's GEMVs do (the estimate of
# what a kernel an op can reach), and as one persistent kernel (what the bytes alone cost), printed
# beside the step's graph-replayed time and its roofline line. An op call counts as one kernel:
# mla_decode's three launches are spelled out only in the mla-op run, so dsv2-32k's floor is
# optimistic by two launches a layer.
#   tools/bench/step_floor.sh DING_BENCH CHAIN_FLOOR [LOG]   (LOG: the whole outputs, default $OUT/floor.txt)
# Environment: DING_FLOOR_RUNS (default "olmoe-b1 llama-int8 gdn-1k mla-op"): the runs to measure.
set -uo pipefail
bench=${1:?usage: step_floor.sh DING_BENCH CHAIN_FLOOR [LOG]}
floor=${2:?usage: step_floor.sh DING_BENCH CHAIN_FLOOR [LOG]}
log=${3:-${OUT:-/tmp}/floor.txt}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/target_runs.sh"
for program in "$bench" "$floor"; do
  [[ -x $program ]] || { echo "step_floor.sh: error: '$program' is not an executable" >&2; exit 1; }
done
: >"$log"
start=$SECONDS
gbs=  # the copy bandwidth ding-bench's roofline divides by, from the first model run
# chain_floor's lines with the share of the step's roofline (ROOF ms) each floor reaches.
with_share() {
  awk -v roof="$1" -v gbs="$gbs" '{ for (i = 1; i < NF; ++i) { if ($(i + 1) == "ms/step") ms = $i; if ($(i + 1) == "GB/s") bw = $i }
    if (roof != "") printf "%s  [roofline %.0f%%]\n", $0, 100 * roof / ms;
    else if (gbs != "") printf "%s  [%.0f%% of %s GB/s]\n", $0, 100 * bw / gbs, gbs; else print }'
}
# One model run (target_runs.sh): its name and its layers.
model() {
  local tag=$1 layers=$2 output step args
  args=$(target_run_args "$tag")
  set -- $args
  output=$(timeout 300 "$bench" model --backend cuda --dtype bf16 "$@" --profile --profile-by-bytes 2>&1)
  printf '== %s: ding-bench model %s\n%s\n' "$tag" "$*" "$output" >>"$log"
  echo "== $tag [$((SECONDS - start)) s]: ding-bench model --backend cuda --dtype bf16 $*"
  grep -E "^decode|^roofline|error" <<<"$output"
  step=$(python3 "$here/step_floor.py" "$tag" "$layers" <<<"$output" 2>>"$log") || { echo "no step: see $log"; return; }
  local roofline=($(grep -oP '^roofline +[0-9.]+ MB per step / \K[0-9.]+ GB/s = [0-9.]+' <<<"$output"))
  [[ -z $gbs && -n ${roofline[0]:-} ]] && gbs=${roofline[0]}
  timeout 120 "$floor" "$step" | with_share "${roofline[3]:-}"
}
for run in ${DING_FLOOR_RUNS:-olmoe-b1 llama-int8 gdn-1k mla-op}; do
  case $run in
    olmoe-b1) model olmoe-b1 16 ;;
    llama-int8) model llama-int8 32 ;;
    llama-bf16) model llama-bf16 32 ;;
    gdn-1k) model gdn-1k 12 ;;
    dsv2-32k) model dsv2-32k 27 ;;
    mla-op)
      # mla_decode at DeepSeek-V2-Lite's heads, one sequence of 32768 keys: the absorb (W_uk, 16 ×
      # 128 × 512 bf16), the attend (the latent cache, 32768 × 576 bf16), the merge and projection
      # (W_uv, 16 × 512 × 128 bf16): three launches, or the same bytes in one.
      echo "== mla-op [$((SECONDS - start)) s]: ding-bench ops --backend cuda --op mla_decode --filter bench_B1_S32768"
      output=$(timeout 120 "$bench" ops --backend cuda --op mla_decode --filter bench_B1_S32768 2>&1)
      printf '== mla-op: ding-bench ops --backend cuda --op mla_decode --filter bench_B1_S32768\n%s\n' "$output" >>"$log"
      grep -E "bench_|error" <<<"$output" | head -4
      timeout 120 "$floor" mla-3-launches:0::2.097152,37.748736,2.097152 mla-1-launch:0::41.94304 | with_share "" ;;
    *) echo "step_floor.sh: error: no run '$run' (olmoe-b1 llama-int8 llama-bf16 gdn-1k dsv2-32k mla-op)" >&2; exit 1 ;;
  esac
done
