#!/usr/bin/env bash
# Where one GPU kernel's instructions and stalls go, on a GPU machine with Nsight Compute: ncu's
# source counters for one launch of KERNEL inside an op bench, summed by SASS opcode (share of the
# executed warp instructions, share of the warp-stall samples), the kernel's duration beside them.
# Takes the ding-bench that DING_BENCH names (tools/device_pack.sh brings one). DING_SASS_BY=line
# sums by CUDA source line instead (the build's -lineinfo; the sources at the paths it was built from).
#   DING_BENCH=/tmp/bin/ding-bench tools/bench/kernel_sass.sh OP FILTER[,FILTER...] KERNEL_REGEX [TOP]
#   e.g. tools/bench/kernel_sass.sh gated_delta_rule bench_B1_T4096_,chunk64_ gated_delta_rule_prepare_kernel
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
op=${1:?op} filters=${2:?filters} kernel=${3:?kernel regex} top=${4:-24}
bench=${DING_BENCH:?DING_BENCH: a ding-bench built for this GPU}
args=()
IFS=, read -ra parts <<<"$filters"
for f in "${parts[@]}"; do args+=(--filter "$f"); done
csv=$(mktemp)
timeout 300 ncu --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 --section SourceCounters \
  --page source --print-source "$([[ ${DING_SASS_BY:-opcode} == line ]] && echo cuda || echo sass)" --csv "$bench" ops --backend cuda --op "$op" "${args[@]}" >"$csv" 2>"$csv.err" ||
  { echo "kernel_sass: ncu failed"; tail -5 "$csv.err"; exit 1; }
timeout 300 ncu --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum \
  "$bench" ops --backend cuda --op "$op" "${args[@]}" 2>/dev/null | grep -E "gpu__time_duration" | head -1
python3 - "$csv" "$top" "${DING_SASS_BY:-opcode}" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
start = next(i for i, r in enumerate(rows) if "Source" in r)
header, body = rows[start], rows[start + 1:]
def column(*names):
    for name in names:
        for i, h in enumerate(header):
            if h.strip() == name:
                return i
    for name in names:
        for i, h in enumerate(header):
            if name in h:
                return i
    sys.exit(f"kernel_sass: no column like {names} in {header}")
src = column("Source")
executed = column("Warp Instructions Executed", "Instructions Executed")
stalls = column("Warp Stall Sampling (All Samples)", "Sampling Data (All)")
def number(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
count, stall = collections.Counter(), collections.Counter()
for r in body:
    if len(r) <= max(src, executed, stalls):
        continue
    text = r[src].strip()
    if not text:
        continue
    if sys.argv[3] == "line":
        op = f"{r[0]}: {text[:90]}"
    else:
        op = text.split()[0]
        if op.startswith("@"):
            op = text.split()[1] if len(text.split()) > 1 else op
        op = op.rstrip(";")
    count[op] += number(r[executed])
    stall[op] += number(r[stalls])
total_i, total_s = sum(count.values()) or 1, sum(stall.values()) or 1
print(f"warp instructions {total_i:.0f}, stall samples {total_s:.0f}")
print(f"{'instr %':>8} {'stall %':>8}  {sys.argv[3]}")
for op, _ in sorted(stall.items(), key=lambda kv: -kv[1])[: int(sys.argv[2])]:
    print(f"{100 * count[op] / total_i:8.1f} {100 * stall[op] / total_s:8.1f}  {op}")
PY
[[ -n ${OUT:-} ]] && cp "$csv" "$OUT/sass_${DING_SASS_BY:-opcode}_${kernel//[^A-Za-z0-9_]/_}.csv"
rm -f "$csv" "$csv.err"
