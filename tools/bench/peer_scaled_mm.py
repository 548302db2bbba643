#!/usr/bin/env python3
"""PyTorch's own 8-bit products at Llama-3.1-8B's decode shapes, beside its bf16 ones: what ding's
8-bit GEMVs (ding-bench ops --op matmul --filter M1_) stand next to.

torch._scaled_mm multiplies fp8 (E4M3) operands with f32 scales on sm_89+ tensor cores: both x and w
in fp8 (W8A8; ding keeps x in bf16), rows of x padded to 16 as it requires. torch._int_mm is int8 × int8
→ int32 (rows of x padded to 32). bf16 is torch.nn.functional.linear. CUDA events around each call after
warm-up, median of the repeats; bytes are w's (the roofline of a decode product).
"""
import argparse
import statistics

import torch


def timed(fn, repeats=200, warmup=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)  # µs
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1, help="rows of x (decode batch)")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; x rows {args.rows}")
    print(f"{'product':<22} {'bf16 us':>9} {'GB/s':>7} {'fp8 us':>9} {'GB/s':>7} {'int8 us':>9} {'GB/s':>7}")
    C, F, QKV = 4096, 14336, 6144
    for name, N, K in [("qkv", QKV, C), ("o", C, C), ("gate+up", 2 * F, C), ("down", C, F)]:
        x = torch.randn(args.rows, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
        bf16_us = timed(lambda: torch.nn.functional.linear(x, w))
        w8 = (w / (w.abs().amax() / 448)).to(torch.float8_e4m3fn)
        x8 = torch.zeros(max(16, args.rows), K, device=dev, dtype=torch.float8_e4m3fn)
        x8[: args.rows] = (x / (x.abs().amax() / 448)).to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev, dtype=torch.float32)
        try:
            fp8_us = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        except RuntimeError as e:  # noqa: PERF203
            print(f"# _scaled_mm: {e}")
            fp8_us = float("nan")
        wi = torch.randint(-127, 128, (N, K), device=dev, dtype=torch.int8)
        xi = torch.zeros(max(32, args.rows), K, device=dev, dtype=torch.int8)
        try:
            int8_us = timed(lambda: torch._int_mm(xi, wi.t()))
        except RuntimeError as e:  # noqa: PERF203
            print(f"# _int_mm: {e}")
            int8_us = float("nan")
        gbs = lambda nbytes, us: nbytes / (us * 1e3)  # noqa: E731
        print(f"{name + f' {N}x{K}':<22} {bf16_us:9.1f} {gbs(2 * N * K, bf16_us):7.0f} {fp8_us:9.1f} "
              f"{gbs(N * K, fp8_us):7.0f} {int8_us:9.1f} {gbs(N * K, int8_us):7.0f}")


if __name__ == "__main__":
    main()
