#!/usr/bin/env bash
# Why an op's GPU kernel takes the time it does, on a GPU machine with Nsight Compute: for each case,
# the op bench (ding-bench ops) of the benches whose names hold all its filters, then ncu's
# speed-of-light, warp-state, scheduler, memory and occupancy sections for one launch of the kernel.
# Builds ding-bench first (tools/gpu_build.sh; DING_GPU_BUILD, default build-speed).
#   DING_CUDA_ARCH=90 tools/bench/op_ncu.sh OP FILTER[,FILTER...]:KERNEL_REGEX ...
#   e.g. tools/bench/op_ncu.sh matmul M1_N4096_K4096_xbf16_wi8:gemv_mma_kernel
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
op=${1:?op}
shift
DING_GPU_BUILD=${DING_GPU_BUILD:-build-speed}
source tools/gpu_build.sh
gpu_out results/op-ncu
gpu_build op_ncu "$out/build.txt" ding-bench
bench="$build/tools/ding-bench"
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy)
for case in "$@"; do
  filters=${case%%:*} kernel=${case##*:} args=()
  IFS=, read -ra parts <<<"$filters"
  for f in "${parts[@]}"; do args+=(--filter "$f"); done
  echo "== $filters ($kernel)"
  timeout 60 "$bench" ops --backend cuda --op "$op" "${args[@]}" 2>&1 | grep -v "^#" | tail -3
  log="$out/ncu_${filters//[^A-Za-z0-9]/_}.txt"
  timeout 200 ncu --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 "${sections[@]}" \
    "$bench" ops --backend cuda --op "$op" "${args[@]}" >"$log" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slot|No Eligible|Bank|Block Limit" \
    "$log" | head -30
done
