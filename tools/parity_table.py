#!/usr/bin/env python3
"""Op-parity table from ctest's JUnit report or gtest's XML reports (any number of files): for each op, the parity cases that passed,
failed and were skipped on each backend (test names Ops/Parity.MatchesReference/<backend>_<op>_...), then, where the reports
hold them (gtest's XML: the parity test records each output's NMSE over its bound), the largest NMSE/bound per op and backend
and the case that reached it."""
import collections
import re
import sys
import xml.etree.ElementTree as ET

OPS = ["copy", "matmul_chain", "matmul", "softmax", "layer_norm", "rms_norm", "gelu", "silu", "swiglu", "clamp",
       "embedding", "rope", "attention_prefill", "attention_decode", "kv_append", "causal_conv1d", "gated_delta_rule", "mla_prefill", "mla_decode", "moe_route",
       "moe_group", "moe_matmul", "moe_combine", "argmax", "top_k", "sample", "count_nonfinite"]


def cases(paths):
    """(full test name, testcase element): ctest names the case whole, gtest splits it in two."""
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            name, suite = case.get("name", ""), case.get("classname", "")
            if suite and not name.startswith(suite + "."):
                name = suite + "." + name
            yield name, case


def main(paths):
    counts = collections.defaultdict(lambda: collections.Counter())
    worst = {}  # (op, backend) -> (largest NMSE / bound, case)
    backends = []
    for name, case in cases(paths):
        m = re.match(r"Ops/Parity\.MatchesReference/([a-z0-9]+)_(.*)", name)
        if not m:
            continue
        backend, rest = m.groups()
        op = next((o for o in OPS if rest.startswith(o + "_")), "?")
        status = case.get("status", "run")
        if case.find("failure") is not None or case.find("error") is not None or status == "fail":
            result = "failed"
        elif case.find("skipped") is not None or status in ("notrun", "disabled", "skipped"):
            result = "skipped"
        else:
            result = "passed"
        counts[(op, backend)][result] += 1
        for ratio in nmse_ratios(case):
            if ratio > worst.get((op, backend), (-1.0, ""))[0]:
                worst[(op, backend)] = (ratio, rest)
        if backend not in backends:
            backends.append(backend)
    print("op parity (passed/failed/skipped)")
    print(f"{'op':<18}" + "".join(f"{b:>16}" for b in backends))
    for op in OPS + ["?"]:
        if not any((op, b) in counts for b in backends):
            continue
        row = f"{op:<18}"
        for b in backends:
            c = counts.get((op, b), collections.Counter())
            row += f"{c['passed']:>8}/{c['failed']}/{c['skipped']:<5}"
        print(row)
    if worst:
        print("largest NMSE / bound (1 = at the bound)")
        for (op, backend), (ratio, case) in sorted(worst.items(), key=lambda kv: (OPS + ["?"]).index(kv[0][0])):
            print(f"{op:<18}{backend:>8}{ratio:>10.3g}  {case}")


def nmse_ratios(case):
    """The NMSE/bound values a testcase recorded: gtest writes them as <property> elements or as attributes."""
    values = [p.get("value") for p in case.iter("property") if p.get("name", "").endswith("_nmse_over_bound")]
    values += [v for k, v in case.attrib.items() if k.endswith("_nmse_over_bound")]
    return [float(v) for v in values if v]


if __name__ == "__main__":
    main(sys.argv[1:] or ["ctest-junit.xml"])
