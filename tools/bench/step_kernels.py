#!/usr/bin/env python3
"""One decode step's kernels from an ncu CSV (`ncu --csv --page raw --metrics gpu__time_duration.sum`
of `ding-bench model ... --new N`): the kernels after the second-to-last step's argmax up to the last
step's (each step ends with one, in one launch or more), summed per kernel name, then the step's
first `--list` kernels in launch order.
ncu serialises kernels, so the times are each kernel alone (no overlap with its neighbours)."""
import argparse
import collections
import csv
import re


def short(name):
    name = re.sub(r"\(.*", "", name).replace("void ", "").replace("(anonymous namespace)::", "")
    return re.sub(r"^.*unnamed>::", "", name)[:72]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv")
    ap.add_argument("--list", type=int, default=0, help="also print the step's first N kernels in order")
    args = ap.parse_args()
    rows = [r for r in csv.reader(open(args.csv)) if len(r) > 10]
    header, rows = rows[0], [r for r in rows[1:] if r[0].isdigit()]
    name, time, grid, block = (header.index(k) for k in ("Kernel Name", "gpu__time_duration.sum", "Grid Size", "Block Size"))
    # A step ends with its argmax, which may be several launches (a row's parts, then their fold).
    is_argmax = ["argmax" in r[name] for r in rows]
    ends = [i for i, a in enumerate(is_argmax) if a and (i + 1 == len(rows) or not is_argmax[i + 1])]
    if len(ends) < 2:
        raise SystemExit("step_kernels: fewer than two steps end in an argmax (run at least 2 decode steps)")
    step = rows[ends[-2] + 1 : ends[-1] + 1]
    us = lambda r: float(r[time].replace(",", "")) / 1000
    totals = collections.OrderedDict()
    for r in step:
        t = totals.setdefault(short(r[name]), [0, 0.0, r[grid], r[block]])
        t[0] += 1
        t[1] += us(r)
    print(f"{len(step)} kernels, {sum(us(r) for r in step):.1f} us (each alone, ncu)")
    print(f"{'total us':>9} {'calls':>5} {'us each':>8}  kernel  grid  block")
    for k, (n, t, g, b) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{t:9.1f} {n:5d} {t / n:8.2f}  {k}  {g}  {b}")
    for r in step[: args.list]:
        print(f"{us(r):7.2f}  {short(r[name])}  {r[grid]}  {r[block]}")


if __name__ == "__main__":
    main()
