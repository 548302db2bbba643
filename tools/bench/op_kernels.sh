#!/usr/bin/env bash
# How an op's time splits over its kernels, on a GPU machine with Nsight Compute: the op bench
# (ding-bench ops) of the benches whose names hold all the filters, then each kernel of one such
# case alone under ncu (clocks as the run left them, caches flushed), its median over the timed
# launches. Builds ding-bench first (tools/gpu_build.sh; DING_GPU_BUILD, default build-speed), or
# takes the one DING_BENCH names (a program tools/device_pack.sh brought).
#   DING_CUDA_ARCH=90 tools/bench/op_kernels.sh OP FILTER[,FILTER...]
#   e.g. tools/bench/op_kernels.sh mla_decode bench_B1_S32768,Dv128_bf16_full
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
op=${1:?op}
filters=${2:?filter}
DING_GPU_BUILD=${DING_GPU_BUILD:-build-speed}
source tools/gpu_build.sh
gpu_out results/op-kernels
bench=${DING_BENCH:-}
if [[ -z $bench ]]; then
  gpu_build op_kernels "$out/build.txt" ding-bench
  bench="$build/tools/ding-bench"
fi
args=()
IFS=, read -ra parts <<<"$filters"
for f in "${parts[@]}"; do args+=(--filter "$f"); done
timeout 120 "$bench" ops --backend cuda --op "$op" "${args[@]}" 2>&1 | grep -v "^#"
csv="$out/ncu_${op}_${filters//[^A-Za-z0-9]/_}.csv"
# Past the warm-up launches; a graph replay runs every kernel of the op, so 16 launches cover each
# kernel of an op of up to 16 kernels at least once.
timeout 300 ncu --clock-control none --launch-skip 40 --launch-count 16 --metrics gpu__time_duration.sum --csv \
  --page raw "$bench" ops --backend cuda --op "$op" "${args[@]}" --min-time 0.05 >"$csv" 2>"$csv.err" ||
  { echo "op_kernels: ncu failed"; tail -5 "$csv.err"; exit 1; }
python3 - "$csv" <<'PY'
import collections, csv, sys
sys.path.insert(0, "tools/bench")
from step_kernels import short
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
header, rows = rows[0], [r for r in rows[1:] if r[0].isdigit()]
name, time = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
times = collections.OrderedDict()
for r in rows:
    times.setdefault(short(r[name]), []).append(float(r[time].replace(",", "")) / 1000)
print(f"{'median us':>10} {'launches':>8}  kernel (each alone, ncu)")
for kernel, us in times.items():
    us.sort()
    print(f"{us[len(us) // 2]:10.2f} {len(us):8d}  {kernel}")
PY
