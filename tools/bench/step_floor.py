#!/usr/bin/env python3
"""A decode step's reads, kernel by kernel, from ding-bench's per-op profile.

Reads the output of `ding-bench model ... --profile --profile-by-bytes` on stdin and prints the
step as chain_floor.cu takes it: NAME:LAYERS:L1,L2,...:T1,T2,... (MB each kernel of a layer reads,
then the step's tail). An op call is taken as one kernel. Calls that occur a multiple of LAYERS
times a step go into the layer (as many times as the multiple), the rest into the tail. An op
whose calls move different bytes from step to step (decode attention over a growing cache, the
union of experts at batch > 1: sizes within 5 % of each other, or all of the op's where those
groups are not whole calls a step) is one entry at its mean bytes a call.

    ding-bench model ... --profile --profile-by-bytes | step_floor.py NAME LAYERS
"""
import re
import sys
from collections import defaultdict


def fail(message):
    print(f"step_floor.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        fail("usage: step_floor.py NAME LAYERS < ding-bench-output")
    name, layers = sys.argv[1], int(sys.argv[2])
    lines = sys.stdin.read().splitlines()
    header = next((i for i, l in enumerate(lines) if re.match(r"per-op profile of (\d+) decode steps", l)), None)
    if header is None:
        fail("no 'per-op profile of N decode steps' in the input (run ding-bench model with --profile --profile-by-bytes)")
    steps = int(re.match(r"per-op profile of (\d+) decode steps", lines[header]).group(1))
    rows = []  # (op, MB a call, calls a step)
    for line in lines[header + 2:]:
        m = re.match(r"(\S+) \(([0-9.e+-]+) MB\)\s+(\d+)\s", line)
        if not m:
            break
        rows.append((m.group(1), float(m.group(2)), int(m.group(3)) / steps))
    if not rows:
        fail("the decode profile has no 'op (N MB)' rows (run with --profile-by-bytes)")

    by_op = defaultdict(list)
    for op, mb, calls in rows:
        by_op[op].append((mb, calls))
    entries = []  # (op, MB a call, calls a step)
    for op, keys in by_op.items():
        # Sizes within 5 % of the next smaller one are the same call at another context length.
        keys.sort()
        clusters = [[keys[0]]]
        for mb, c in keys[1:]:
            if mb <= clusters[-1][-1][0] * 1.05:
                clusters[-1].append((mb, c))
            else:
                clusters.append([(mb, c)])
        if any(abs(sum(c for _, c in k) - round(sum(c for _, c in k))) > 1e-6 for k in clusters):
            clusters = [keys]
        for k in clusters:
            calls = sum(c for _, c in k)
            if abs(calls - round(calls)) > 1e-6:
                fail(f"{op}: {calls} calls a step is not a whole number")
            entries.append((op, sum(mb * c for mb, c in k) / calls, round(calls)))

    layer, tail = [], []
    for op, mb, calls in entries:
        per_layer = calls // layers if layers > 0 else 0
        layer += [mb] * per_layer
        tail += [mb] * (calls - per_layer * layers)
        print(f"  {op:<24} {mb:10.4f} MB a call, {calls} a step: {per_layer} a layer, {calls - per_layer * layers} in the tail",
              file=sys.stderr)
    fmt = lambda xs: ",".join(f"{x:.6g}" for x in xs)
    print(f"{name}:{layers if layer else 0}:{fmt(layer)}:{fmt(tail)}")


if __name__ == "__main__":
    main()
