#!/usr/bin/env bash
# Why the delta rule's GPU kernels take the time they do, on a GPU machine with Nsight Compute:
# the op benches of the recurrent and chunk-wise forms at Qwen3-Next-80B's heads, then ncu's
# speed-of-light, warp-state and memory sections for one launch of each kernel (decode, a 4k
# recurrent prefill, a 4k chunk-wise prefill's two passes); the op benches in both of the walk's product
# forms (DING_DELTA_PAIRS=0 and 1). Builds ding-bench first (tools/gpu_build.sh; DING_GPU_BUILD,
# default build-speed) unless DING_BENCH names one built already (tools/device_pack.sh).
#   DING_CUDA_ARCH=90 tools/bench/delta_rule_kernels.sh     (DING_NCU=0: the benches only; DING_BENCH_FILTERS: which)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
DING_GPU_BUILD=${DING_GPU_BUILD:-build-speed}
source tools/gpu_build.sh
gpu_out results/delta-rule-kernels
if [[ -n ${DING_BENCH:-} ]]; then
  bench=$DING_BENCH
else
  gpu_build delta_rule_kernels "$out/build.txt" ding-bench
  bench="$build/tools/ding-bench"
fi
# The walk's two product forms (OpTuning::delta_rule_bf16_pairs) side by side: tf32, then bf16 pairs.
for filter in ${DING_BENCH_FILTERS:-bench_B1_T1_ bench_B8_T1_ bench_B1_T1024_ bench_B1_T4096_}; do
  for pairs in 0 1; do
    DING_DELTA_PAIRS=$pairs timeout 120 "$bench" ops --backend cuda --op gated_delta_rule --filter "$filter" 2>&1 |
      grep "bench_" | sed "s/^/pairs=$pairs /"
  done
done | tee "$out/delta_rule_ops.txt"
# ncu on the pairs unless DING_DELTA_PAIRS says otherwise.
export DING_DELTA_PAIRS=${DING_DELTA_PAIRS:-1}
((${DING_NCU:-1})) || exit 0
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy)
# Each case: the filters a bench name must hold (all of them), then the kernel to profile.
for case in "bench_B1_T1_:gated_delta_rule_kernel" "bench_B1_T4096_,chunk1_:gated_delta_rule_kernel" \
  "bench_B1_T4096_,chunk64_:gated_delta_rule_prepare_kernel" "bench_B1_T4096_,chunk64_:gated_delta_rule_(register|tiled)_walk_kernel"; do
  filters=${case%%:*} kernel=${case##*:} args=()
  IFS=, read -ra parts <<<"$filters"
  for f in "${parts[@]}"; do args+=(--filter "$f"); done
  log="$out/ncu_${kernel}_${filters//[^A-Za-z0-9]/_}.txt"
  timeout 200 ncu --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 "${sections[@]}" \
    "$bench" ops --backend cuda --op gated_delta_rule "${args[@]}" >"$log" 2>&1
  echo "== $filters ($kernel)"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slot|No Eligible|Bank" \
    "$log" | head -24
done
