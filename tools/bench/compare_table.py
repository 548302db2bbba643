#!/usr/bin/env python3
"""The side-by-side table of tools/bench/compare.sh, from the raw outputs in its results folder.

  tools/bench/compare_table.py RESULTS_DIR

Reads ding_<shape>_b<batch>.txt / torch_<shape>_b<batch>.txt (ding-bench model and peer_torch.py:
the `prefill`, `decode` and `roofline` lines), one table row per shape and batch found,
ding_<shape>_b<batch>_q<int8|fp8>.txt (the same with --quantize, DING_COMPARE_QUANTIZE), and
ops_*.txt (ding-bench ops: one line per case, the ceilings line). A missing file or line shows as
n/a. Targets are issue 5's (H100, bf16).
"""
import os
import re
import sys

NA = "n/a"

SHAPE_ORDER = ["gpt2-xl", "gpt2-large", "gpt2-medium", "gpt2", "llama-3.2-1b", "llama-3.1-8b"]
LEGACY_SHAPES = {"xl": "gpt2-xl", "small": "gpt2"}  # the file names of results folders before Llama
TARGETS = {  # (shape, batch): prefill target (ms), decode target (tok/s)
    ("gpt2-xl", 1): ("<= 2 ms", ">= 830 tok/s (90% roof)"),
    ("gpt2-xl", 8): ("-", ">= 4000 tok/s"),
}
MODEL_FILE = re.compile(r"^(ding|torch)_(.+)_b(\d+)\.txt$")
QUANTIZED_FILE = re.compile(r"^ding_(.+)_b(\d+)_q(int8|fp8)\.txt$")  # DING_COMPARE_QUANTIZE

PREFILL = re.compile(r"^prefill\s+(\d+) tokens x (\d+): ([\d.]+) ms per sequence")
DECODE = re.compile(r"^decode\s+(\d+) steps x batch (\d+): ([\d.]+) ms/step = ([\d.]+) tok/s")
ROOFLINE = re.compile(r"^roofline\s+([\d.]+) MB per step / ([\d.]+) GB/s = ([\d.]+) ms/step = ([\d.]+) tok/s; reached (\d+)%")
BANDWIDTH = re.compile(r"^ceilings .*?bandwidth ([\d.]+) GB/s")
CASE = re.compile(r"^(\S+/\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(mem|flop)\s+(\d+)%\s*(.*)$")


def read(folder, name):
    try:
        with open(os.path.join(folder, name + ".txt"), encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def model_runs(folder):
    """[(shape, batch, ding file, torch file)] of the model outputs in the folder, in table order."""
    runs = {}
    for entry in sorted(os.listdir(folder)):
        if m := MODEL_FILE.match(entry):
            who, shape, batch = m.group(1), m.group(2), int(m.group(3))
            runs.setdefault((LEGACY_SHAPES.get(shape, shape), batch), {})[who] = entry[:-len(".txt")]
    order = {shape: i for i, shape in enumerate(SHAPE_ORDER)}
    keys = sorted(runs, key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))
    return [(shape, batch, runs[(shape, batch)].get("ding", ""), runs[(shape, batch)].get("torch", ""))
            for shape, batch in keys]


def model_numbers(lines):
    r = {}
    for line in lines:
        if m := PREFILL.match(line):
            r["prefill_ms"] = float(m.group(3))
        elif m := DECODE.match(line):
            r["step_ms"], r["tok_s"] = float(m.group(3)), float(m.group(4))
        elif m := ROOFLINE.match(line):
            r["floor_ms"], r["roof_pct"] = float(m.group(3)), float(m.group(5))
    return r


def ops_numbers(lines):
    """{case: (ms, GB/s, GFLOP/s, note)}, and the measured bandwidth (GB/s) or None."""
    cases, bandwidth = {}, None
    for line in lines:
        if m := BANDWIDTH.match(line):
            bandwidth = float(m.group(1))
        elif m := CASE.match(line):
            cases[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(8).strip())
    return cases, bandwidth


def fmt(v, spec, suffix=""):
    return NA if v is None else format(v, spec) + suffix


FUSED = re.compile(r"_(rmsnorm|layernorm|residual|swiglu|bias|gelu|silu)")


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(title, header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n{title}")
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = sys.argv[1]
    versions = read(folder, "versions")
    if versions:
        print("versions: " + "; ".join(v.strip() for v in versions if v.strip()))
    tests = read(folder, "tests")  # DING_COMPARE_TESTS: gtest's summary lines
    if tests:
        summary = [line.strip() for line in tests if re.match(r"^\[(==========|  PASSED  |  FAILED  )\]|^exit status", line)]
        print(f"tests ({next((line[2:] for line in tests if line.startswith('$ ')), '?')}):")
        print("  " + "\n  ".join(summary[:14] or [NA]))

    rows = []
    for shape, batch, ding_file, torch_file in model_runs(folder):
        label = f"{shape} batch {batch}"
        prefill_target, decode_target = TARGETS.get((shape, batch), ("-", "-"))
        d, t = model_numbers(read(folder, ding_file)), model_numbers(read(folder, torch_file))
        # PyTorch's share of the same roofline: ding's floor (its measured bandwidth, the same
        # weights and KV bytes) over PyTorch's step time.
        torch_roof = ratio(d.get("floor_ms"), t.get("step_ms"))
        rows.append([label,
                     fmt(d.get("prefill_ms"), ".2f"), fmt(t.get("prefill_ms"), ".2f"),
                     fmt(ratio(t.get("prefill_ms"), d.get("prefill_ms")), ".2f", "x"),
                     fmt(d.get("tok_s"), ".1f"), fmt(t.get("tok_s"), ".1f"),
                     fmt(ratio(d.get("tok_s"), t.get("tok_s")), ".2f", "x"),
                     fmt(d.get("roof_pct"), ".0f", "%"), fmt(None if torch_roof is None else 100 * torch_roof, ".0f", "%"),
                     prefill_target, decode_target])
    table("Model, bf16, 256-token prompt + 256 new (prefill: ms per sequence; speedup = ding over torch)",
          ["model", "ding prefill ms", "torch prefill ms", "prefill speedup", "ding tok/s", "torch tok/s",
           "decode speedup", "ding % roof", "torch % roof", "target prefill", "target decode"], rows or [[NA] * 11])

    quantized = []
    for entry in sorted(os.listdir(folder)):
        if m := QUANTIZED_FILE.match(entry):
            shape, batch, q = m.group(1), int(m.group(2)), m.group(3)
            d = model_numbers(read(folder, f"ding_{shape}_b{batch}"))
            n = model_numbers(read(folder, entry[:-len(".txt")]))
            quantized.append([f"{shape} batch {batch}", q, fmt(d.get("tok_s"), ".1f"), fmt(n.get("tok_s"), ".1f"),
                              fmt(ratio(n.get("tok_s"), d.get("tok_s")), ".2f", "x"), fmt(n.get("roof_pct"), ".0f", "%"),
                              ">= 1.8x, >= 85% (8B shape)"])
    if quantized:
        table("8-bit projections (ding-bench model --quantize), decode; % roof: of the run's own bytes",
              ["model", "weights", "ding bf16 tok/s", "ding 8-bit tok/s", "vs bf16", "% roof", "target (issue 22)"], quantized)

    ding_mm, bandwidth = ops_numbers(read(folder, "ops_matmul_ding"))
    blas_mm, _ = ops_numbers(read(folder, "ops_matmul_cublas"))
    gemm = []
    for name in sorted(set(ding_mm) | set(blas_mm), key=case_order):
        if re.search(r"/M1_", name):
            continue
        d, b = ding_mm.get(name), blas_mm.get(name)
        # cuBLAS cannot fuse a norm prologue, a bias, an activation or a residual: the comparison
        # path runs ding's kernels for those (cublas_matmul.cpp), so only plain products compare.
        if FUSED.search(name):
            b = None
        dm, bm = d[0] if d else None, b[0] if b else None
        gemm.append([short(name), fmt(dm, ".4f"), fmt(bm, ".4f"), fmt(d[2] / 1e3 if d else None, ".1f"),
                     fmt(b[2] / 1e3 if b else None, ".1f"), fmt(ratio(bm, dm), ".2f"), ">= 0.90"])
    table("GEMM (prefill rows, bf16): ding vs cuBLAS; ratio = ding throughput / cuBLAS throughput",
          ["case", "ding ms", "cuBLAS ms", "ding TFLOP/s", "cuBLAS TFLOP/s", "ratio", "target"], gemm or [[NA] * 7])

    gemv = []
    for name in sorted(ding_mm, key=case_order):
        if not re.search(r"/M1_", name):
            continue
        ms, gbs, _, _ = ding_mm[name]
        gemv.append([short(name), fmt(ms, ".4f"), fmt(gbs, ".1f"),
                     fmt(None if bandwidth is None else 100 * gbs / bandwidth, ".0f", "%"), ">= 90%"])
    table(f"GEMV (decode rows, M = 1, bf16): % of the copy bandwidth measured in the same run ({fmt(bandwidth, '.1f')} GB/s)",
          ["case", "ding ms", "GB/s", "% bandwidth", "target"], gemv or [[NA] * 5])

    att, att_bw = ops_numbers(read(folder, "ops_attention"))
    table(f"attention_decode at 4096 cached tokens, bf16: % of the copy bandwidth ({fmt(att_bw, '.1f')} GB/s)",
          ["case", "ms", "GB/s", "% bandwidth", "target"],
          [[short(n), fmt(v[0], ".4f"), fmt(v[1], ".1f"), fmt(None if att_bw is None else 100 * v[1] / att_bw, ".0f", "%"),
            ">= 80%"] for n, v in sorted(att.items())] or [[NA] * 5])

    chain, _ = ops_numbers(read(folder, "ops_chain"))
    groups = {}
    for name, v in chain.items():
        m = re.match(r"matmul_chain/(\S+)_chunk(\w+)$", name)
        if m:
            groups.setdefault(m.group(1), {})["whole" if m.group(2) == m.group(1).split("x")[0] else "chunked"] = v
    rows = []
    for shape, g in sorted(groups.items()):
        c, w = g.get("chunked"), g.get("whole")
        speedup = ratio(w[0] if w else None, c[0] if c else None)
        rows.append([shape, fmt(c[0] if c else None, ".3f"), c[3] if c and c[3] else NA, fmt(w[0] if w else None, ".3f"),
                     fmt(speedup, ".2f", "x"), NA if speedup is None else ("yes" if speedup > 1 else "NO")])
    table("matmul_chain W_E·W_V·W_O·W_U (rows x d_model x d_head x d_model x out), bf16: chunked to L2 vs whole",
          ["shape", "chunked ms", "chunk", "whole ms", "whole / chunked", "chunked wins"], rows or [[NA] * 6])
    return 0


def case_order(name):
    m = re.search(r"/M(\d+)_N(\d+)_K(\d+)", name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)


def short(name):
    return name.split("/", 1)[1] if "/" in name else name


if __name__ == "__main__":
    sys.exit(main())
