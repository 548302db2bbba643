#!/usr/bin/env python3
"""Op-parity table from ctest's JUnit report or gtest's XML reports (any number of files): for each op, the parity cases that passed,
failed and were skipped on each backend (test names Ops/Parity.MatchesReference/<backend>_<op>_...)."""
import collections
import re
import sys
import xml.etree.ElementTree as ET

OPS = ["copy", "matmul_chain", "matmul", "softmax", "layer_norm", "rms_norm", "gelu", "silu", "swiglu", "clamp",
       "embedding", "rope", "attention_prefill", "attention_decode", "kv_append", "moe_route", "moe_group", "moe_matmul",
       "moe_combine", "argmax", "top_k", "sample"]


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


if __name__ == "__main__":
    main(sys.argv[1:] or ["ctest-junit.xml"])
