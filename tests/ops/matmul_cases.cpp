// matmul and matmul_chain cases: decode rows (the gemv core, M ≤ 6) and prefill rows (the gemm
// core), every dtype mix the contract allows, each optional epilogue part (swiglu's on every core),
// batched x with shared or batched w, odd sizes around the SIMD width; the GPU cores' tile, split
// and alignment edges; plus gpt2-xl- and Llama-shaped bench cases.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string_view dtype_tag(DType d) { return dtype_name(d); }

enum class Residual { none, separate, in_place };

struct MatmulCase {
  int64_t B = 0;  // 0: unbatched x [M, K]
  int64_t M = 1, N = 1, K = 1;
  DType x = DType::f32, w = DType::f32, out = DType::f32;
  bool batched_w = false;
  bool bias = false;
  bool gelu = false;
  bool swiglu = false;  // w [2N, K] = [W_gate; W_up], bias [2N]
  Residual residual = Residual::none;
  ops::NormKind norm = ops::NormKind::none;  // the prologue; layer_norm with a bias
  bool in_tests = true;
};

std::string case_name(const MatmulCase& c) {
  std::string name = "matmul/";
  if (c.B) name += fmt::format("B{}_", c.B);
  name += fmt::format("M{}_N{}_K{}_x{}_w{}_out{}", c.M, c.N, c.K, dtype_tag(c.x), dtype_tag(c.w), dtype_tag(c.out));
  if (c.batched_w) name += "_wbatched";
  if (c.bias) name += "_bias";
  if (c.gelu) name += "_gelu";
  if (c.swiglu) name += "_swiglu";
  if (c.residual == Residual::separate) name += "_residual";
  if (c.residual == Residual::in_place) name += "_residual_inplace";
  if (c.norm == ops::NormKind::layer_norm) name += "_layernorm";
  if (c.norm == ops::NormKind::rms_norm) name += "_rmsnorm";
  return name;
}

// A [B?, rows, cols] tensor: rank 3 when B > 0.
Tensor normal3(CaseRun& run, DType dtype, int64_t B, int64_t rows, int64_t cols, double stddev) {
  return B ? run.normal(dtype, {B, rows, cols}, stddev) : run.normal(dtype, {rows, cols}, stddev);
}

OpCase make_case(const MatmulCase& c) {
  OpCase oc;
  oc.op = "matmul";
  oc.name = case_name(c);
  const int64_t elements = std::max<int64_t>(c.B, 1) * c.M * c.N;
  oc.tolerance = matmul_tolerance(c.out, c.K, elements, c.swiglu);
  oc.reason = matmul_reason(c.out, c.K, c.swiglu);
  // The prologue: both sides round norm(x) to x's dtype, from f32 statistics here and f64 ones in
  // the reference; an element differs by one step of x's dtype only where the two straddle a
  // rounding boundary (a few per row), far inside the bounds above.
  if (c.norm != ops::NormKind::none) oc.reason += "; norm(x) rounded to x's dtype on both sides";
  // E4M3 w beside 16-bit x over more rows than decode's: a backend may round x to E4M3 too.
  const int64_t rows = c.batched_w ? c.M : std::max<int64_t>(c.B, 1) * c.M;
  if (c.w == DType::f8e4m3 && (c.x == DType::bf16 || c.x == DType::f16) && rows > ops::kMatmulDecodeRows) {
    oc.tight_tolerance = oc.tolerance;
    oc.tolerance += e4m3_x_nmse(c.swiglu);
    oc.reason += e4m3_x_reason(c.swiglu);
  }
  if (c.w == DType::i8 && (c.x == DType::bf16 || c.x == DType::f16)) {
    oc.tolerance += int16_x_nmse(c.K, c.swiglu);
    oc.reason += int16_x_reason(c.K, c.swiglu);
  }
  oc.in_tests = c.in_tests;
  oc.build = [c](CaseRun& run) {
    const Tensor x = normal3(run, c.x, c.B, c.M, c.K, 1.0);
    // w scaled by 1/√K keeps the sums near unit scale, where GELU is not linear and f16 is accurate.
    const double w_scale = 1.0 / std::sqrt(double(c.K));
    const int64_t w_rows = c.swiglu ? 2 * c.N : c.N;  // swiglu: [W_gate; W_up]
    Tensor w;
    if (ops::quantized_weight(c.w)) {
      w = c.batched_w ? run.quantized(c.w, {c.B, w_rows, c.K}, w_scale) : run.quantized(c.w, {w_rows, c.K}, w_scale);
    } else {
      w = normal3(run, c.w, c.batched_w ? c.B : 0, w_rows, c.K, w_scale);
    }
    ops::MatmulParams params;
    if (c.bias) params.bias = run.normal(c.x, {w_rows}, 0.5);
    params.activation = c.gelu     ? ops::Activation::gelu_tanh
                        : c.swiglu ? ops::Activation::swiglu
                                   : ops::Activation::none;
    if (c.norm != ops::NormKind::none) {
      params.norm = {.kind = c.norm, .weight = run.normal(c.x, {c.K}, 1.0), .eps = 1e-5f};
      if (c.norm == ops::NormKind::layer_norm) params.norm.bias = run.normal(c.x, {c.K}, 0.5);
    }
    Tensor out;
    if (c.residual == Residual::in_place) {
      out = c.B ? run.inout("out", c.out, {c.B, c.M, c.N}) : run.inout("out", c.out, {c.M, c.N});
      params.residual = out;
    } else {
      if (c.residual == Residual::separate) params.residual = normal3(run, c.x, c.B, c.M, c.N, 1.0);
      out = c.B ? run.output("out", c.out, {c.B, c.M, c.N}) : run.output("out", c.out, {c.M, c.N});
    }
    run.cost = ops::cost(ops::MatmulArgs{out, x, w, params});
    run.launch = [=](Stream& s) { ops::matmul(s, out, x, w, params); };
  };
  return oc;
}

struct ChainCase {
  std::vector<int64_t> dims;  // R, D0, D1, …, Dn: factor i is [dims[i], dims[i+1]]
  DType factors = DType::f32, out = DType::f32;
  int64_t chunk_rows = 0;  // 0: automatic
  bool in_tests = true;
};

OpCase make_chain_case(const ChainCase& c) {
  OpCase oc;
  oc.op = "matmul_chain";
  oc.name = "matmul_chain/" + fmt::format("{}", fmt::join(c.dims, "x")) +
            fmt::format("_{}_out{}_chunk", dtype_tag(c.factors), dtype_tag(c.out)) +
            (c.chunk_rows ? std::to_string(c.chunk_rows) : std::string("auto"));
  int64_t inner = 0;
  for (size_t i = 1; i + 1 < c.dims.size(); ++i) inner += c.dims[i];
  // The op rounds the intermediates to the factors' dtype when all are 16-bit (ops/matmul.h,
  // matmul_chain_intermediate_dtype; the case's factors share one dtype); the reference keeps them
  // exact.
  const bool rounded = c.factors == DType::bf16 || c.factors == DType::f16;
  const int64_t intermediates = int64_t(c.dims.size()) - 3;
  if (rounded) {
    // Each rounding adds relative noise ≈ ulp²/12 (rounding_nmse), which the following random
    // factors (scaled by 1/√rows, norm-preserving on average) carry to out at the same relative
    // size: n roundings add up to ≈ n·rounding_nmse. A 16-bit out is rounded on both sides, which
    // at most doubles its own rounding noise. ×4 for the spread of small outputs; measured ≤ 0.19 ×
    // the bound (CPU backend, the in-test 16-bit chains, 20 seeds).
    oc.tolerance = 4.0 * (double(intermediates) * rounding_nmse(c.factors) + 2.0 * rounding_nmse(c.out));
    oc.reason = fmt::format("{} intermediates rounded to {} (op contract) vs the exact reference, out rounded to {}: "
                            "bound 4·(n·rounding_nmse({}) + 2·rounding_nmse(out))",
                            intermediates, dtype_name(c.factors), dtype_name(c.out), dtype_name(c.factors));
  } else {
    // Each intermediate is an f32 sum (rounded once per product) where the reference keeps f64.
    oc.tolerance = matmul_tolerance(c.out, inner, c.dims.front() * c.dims.back());
    oc.reason = c.out == DType::f32 ? fmt::format("f32 products through the chain, {} summed terms in all: "
                                                  "bound 10·(Σinner + 8)·rounding_nmse(f32)", inner)
                                    : matmul_reason(c.out, inner);
  }
  oc.in_tests = c.in_tests;
  oc.build = [c](CaseRun& run) {
    std::vector<Tensor> factors;
    factors.push_back(run.normal(c.factors, {c.dims[0], c.dims[1]}));
    for (size_t i = 1; i + 1 < c.dims.size(); ++i)
      factors.push_back(run.normal(c.factors, {c.dims[i], c.dims[i + 1]}, 1.0 / std::sqrt(double(c.dims[i]))));
    const Tensor out = run.output("out", c.out, {c.dims.front(), c.dims.back()});
    ops::MatmulChainArgs args;
    args.out = out;
    args.count = int(factors.size());
    std::copy(factors.begin(), factors.end(), args.factors.begin());
    args.chunk_rows = c.chunk_rows ? c.chunk_rows : ops::matmul_chain_chunk_rows(run.device.caps().llc_bytes, args);
    run.cost = ops::cost(args);
    run.note = fmt::format("chunk {} of {} rows", args.chunk_rows, c.dims.front());
    // The arena aligns each take to 256 bytes; leave room for that.
    Workspace& workspace = run.workspace(ops::matmul_chain_scratch_bytes(args, args.chunk_rows) + 256);
    const ops::MatmulChainParams params{c.chunk_rows};
    run.launch = [=, &workspace](Stream& s) {
      workspace.reset();
      ops::matmul_chain(s, out, factors.data(), int(factors.size()), workspace, params);
    };
  };
  return oc;
}

}  // namespace

std::vector<OpCase> matmul_cases() {
  constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16, i8 = DType::i8, f8 = DType::f8e4m3;
  constexpr auto sep = Residual::separate, inplace = Residual::in_place;
  std::vector<MatmulCase> list = {
      // gemv core (M ≤ 6): channel tails (N = 1, 33, 4097), K tails (1, 7, 259).
      {.M = 1, .N = 1, .K = 1},
      {.M = 1, .N = 33, .K = 7},
      {.M = 1, .N = 4097, .K = 64},
      {.M = 1, .N = 33, .K = 259, .w = bf16},
      {.M = 1, .N = 4097, .K = 259, .x = bf16, .w = bf16, .out = bf16},
      {.M = 1, .N = 33, .K = 64, .x = f16, .w = f16, .out = f16},
      {.M = 1, .N = 33, .K = 64, .out = bf16, .bias = true, .gelu = true},
      {.M = 1, .N = 4097, .K = 259, .w = f16, .bias = true, .gelu = true},
      {.M = 2, .N = 33, .K = 259, .w = bf16, .bias = true},
      {.M = 2, .N = 17, .K = 259},
      {.M = 3, .N = 33, .K = 7, .bias = true, .gelu = true},
      {.M = 3, .N = 4097, .K = 64, .w = bf16, .bias = true, .gelu = true, .residual = sep},
      {.M = 3, .N = 33, .K = 259, .x = f16, .w = f16, .out = f16, .residual = inplace},
      {.M = 3, .N = 33, .K = 64, .x = bf16, .out = f16},
      {.M = 4, .N = 33, .K = 64, .x = bf16, .w = bf16, .out = bf16, .bias = true},
      {.M = 5, .N = 33, .K = 64, .w = bf16},
      {.M = 6, .N = 33, .K = 7, .residual = inplace},
      // gemm core (M > 6).
      {.M = 7, .N = 33, .K = 259},
      {.M = 9, .N = 33, .K = 64},
      {.M = 17, .N = 33, .K = 259},
      {.M = 17, .N = 1, .K = 7},
      {.M = 17, .N = 33, .K = 1},
      {.M = 17, .N = 4097, .K = 7, .w = bf16, .out = bf16, .bias = true},
      {.M = 17, .N = 33, .K = 64, .w = f16, .out = f16, .residual = sep},
      {.M = 17, .N = 33, .K = 259, .x = f16, .w = bf16},
      {.M = 64, .N = 1, .K = 1},
      {.M = 64, .N = 33, .K = 7, .out = bf16, .bias = true},
      {.M = 64, .N = 33, .K = 259, .bias = true, .gelu = true, .residual = sep},
      {.M = 64, .N = 4097, .K = 64, .w = bf16},
      {.M = 64, .N = 33, .K = 64, .x = f16, .w = f16, .gelu = true},
      {.M = 64, .N = 33, .K = 259, .x = bf16, .w = bf16, .out = bf16, .bias = true, .gelu = true, .residual = inplace},
      // batched x, shared w (one product over B·M rows) and batched w (one product per batch).
      {.B = 2, .M = 3, .N = 33, .K = 64},
      {.B = 4, .M = 2, .N = 17, .K = 64, .x = bf16, .w = bf16, .residual = inplace},
      {.B = 2, .M = 17, .N = 33, .K = 64, .w = bf16},
      {.B = 3, .M = 1, .N = 33, .K = 64, .batched_w = true},
      {.B = 2, .M = 3, .N = 4097, .K = 7, .w = f16, .batched_w = true, .residual = sep},
      {.B = 2, .M = 17, .N = 33, .K = 259, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .bias = true,
       .gelu = true, .residual = inplace},
      // GPU cores' edges (backends/gpu/matmul.cu). GEMV (M ≤ 8): K split over blocks when N is
      // small, with rows too odd for 16-byte loads (K = 4097) and with whole vectors (K = 2048,
      // batched w: partial sums per batch); every row bound M ≤ 8.
      {.M = 1, .N = 64, .K = 4097, .x = bf16, .w = bf16, .out = bf16},
      {.M = 3, .N = 64, .K = 4097, .x = bf16, .w = bf16, .out = bf16, .bias = true, .residual = inplace},
      {.M = 2, .N = 64, .K = 2048, .x = bf16, .w = bf16, .bias = true, .gelu = true, .residual = inplace},
      {.B = 2, .M = 1, .N = 40, .K = 1024, .x = bf16, .w = bf16, .out = bf16, .batched_w = true},
      {.M = 8, .N = 40, .K = 64, .x = bf16, .w = bf16, .out = f16, .residual = sep},
      // The tensor-core GEMV (16-bit x and w, K a multiple of 8): a K tail inside a 32-wide chunk,
      // fewer than 16 rows of w (the upper half of the mma tile empty), every row bound of x.
      // Its blocks take equal runs of rows (gemv_mma.cuh), cut into tiles of 16 that need not
      // be full: one row per block (N = 16 and 40 on a large GPU, the warps' units spread over
      // K = 4096 and 8192), a run per batch of batched w, and the gpt2-xl decode shapes (QKV
      // with the norm prologue: runs of 18 or 19 rows on 132 SMs, a full and a short tile;
      // MLP-down in place: runs of 6 or 7 rows).
      {.M = 1, .N = 16, .K = 4096, .x = bf16, .w = bf16, .out = bf16, .bias = true},
      {.M = 8, .N = 40, .K = 8192, .x = f16, .w = f16, .out = f32, .bias = true, .residual = sep},
      {.B = 3, .M = 2, .N = 40, .K = 2048, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .residual = sep},
      {.M = 1, .N = 4800, .K = 1600, .x = bf16, .w = bf16, .out = bf16, .bias = true, .norm = ops::NormKind::layer_norm},
      {.M = 2, .N = 1600, .K = 6400, .x = bf16, .w = bf16, .out = bf16, .bias = true, .residual = inplace},
      {.M = 5, .N = 1000, .K = 2056, .x = bf16, .w = bf16, .out = bf16, .bias = true, .gelu = true, .residual = inplace},
      {.M = 7, .N = 17, .K = 96, .x = f16, .w = f16, .out = f32, .residual = sep},
      {.M = 8, .N = 257, .K = 4104, .x = bf16, .w = bf16, .out = bf16},
      // The norm prologue: fused into the GEMV (16-byte and scalar rows, several rows of x, a
      // K split over blocks, every epilogue) and run before the GEMM cores.
      {.M = 1, .N = 300, .K = 1600, .x = bf16, .w = bf16, .out = bf16, .bias = true, .norm = ops::NormKind::layer_norm},
      {.M = 1, .N = 64, .K = 4096, .x = bf16, .w = bf16, .out = bf16, .residual = inplace, .norm = ops::NormKind::rms_norm},
      {.M = 3, .N = 33, .K = 259, .x = f16, .w = f16, .out = f16, .bias = true, .gelu = true, .norm = ops::NormKind::layer_norm},
      {.M = 8, .N = 72, .K = 640, .x = bf16, .w = bf16, .out = bf16, .bias = true, .gelu = true, .norm = ops::NormKind::layer_norm},
      {.M = 2, .N = 33, .K = 64, .norm = ops::NormKind::rms_norm},
      {.B = 2, .M = 3, .N = 40, .K = 1024, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .norm = ops::NormKind::layer_norm},
      {.M = 17, .N = 33, .K = 259, .bias = true, .norm = ops::NormKind::layer_norm},
      {.M = 130, .N = 72, .K = 72, .x = bf16, .w = bf16, .out = bf16, .residual = sep, .norm = ops::NormKind::rms_norm},
      // Tensor cores (bf16/f16 x and w, K a multiple of 8): M, N and K off the 64/128-row and
      // 32-deep tiles; K = 520 runs 17 slices through the 4-stage ring; the batched case has
      // enough 128 × 128 tiles (33 · 2 · 2 ≥ the SM count) to take the large-tile kernel.
      {.M = 130, .N = 72, .K = 72, .x = bf16, .w = bf16, .out = bf16},
      {.M = 130, .N = 72, .K = 72, .x = bf16, .w = bf16, .bias = true, .gelu = true, .residual = inplace},
      {.M = 33, .N = 257, .K = 520, .x = f16, .w = f16, .out = f16, .bias = true},
      {.B = 33, .M = 129, .N = 129, .K = 136, .x = bf16, .w = bf16, .out = bf16, .batched_w = true},
      {.B = 2, .M = 40, .N = 72, .K = 72, .x = f16, .w = f16, .out = bf16, .batched_w = true, .bias = true,
       .gelu = true, .residual = inplace},
      // Quantized weights (i8, f8e4m3 with row scales): decode rows through the GEMV (K tails, a
      // swiglu pair of scaled rows, the norm prologue, batched w), prefill rows through the GEMM
      // (the panel dequantized as it is widened), 16-bit and f32 activations.
      // One row of 16-bit x against i8 rows of 32 to 768 elements, which the CPU holds in
      // registers where it has AVX-512 VNNI: 1, 16, 23 and 24 blocks of 32, a channel tail, the
      // swiglu halves, batched w, and K = 800 just past it.
      {.M = 1, .N = 33, .K = 768, .x = f16, .w = i8, .out = f16, .residual = inplace},
      {.M = 1, .N = 17, .K = 736, .x = bf16, .w = i8, .out = bf16, .swiglu = true},
      {.M = 1, .N = 40, .K = 32, .x = f16, .w = i8, .out = f32, .bias = true, .gelu = true},
      {.B = 2, .M = 1, .N = 40, .K = 512, .x = bf16, .w = i8, .out = bf16, .batched_w = true},
      {.M = 1, .N = 24, .K = 800, .x = bf16, .w = i8, .out = bf16},
      {.M = 1, .N = 33, .K = 259, .w = i8},
      {.M = 1, .N = 4097, .K = 64, .x = bf16, .w = i8, .out = bf16, .bias = true},
      {.M = 3, .N = 40, .K = 1600, .x = bf16, .w = f8, .out = bf16, .residual = inplace},
      {.M = 2, .N = 17, .K = 259, .x = f16, .w = f8, .out = f32, .swiglu = true},
      {.M = 1, .N = 64, .K = 1024, .x = bf16, .w = i8, .out = bf16, .residual = inplace, .norm = ops::NormKind::rms_norm},
      {.B = 3, .M = 2, .N = 40, .K = 136, .x = bf16, .w = f8, .out = bf16, .batched_w = true},
      {.M = 40, .N = 72, .K = 259, .w = i8, .bias = true, .gelu = true},
      {.M = 33, .N = 257, .K = 520, .x = bf16, .w = f8, .out = bf16, .swiglu = true, .residual = sep},
      {.B = 2, .M = 12, .N = 40, .K = 72, .x = f16, .w = i8, .out = f16, .batched_w = true, .bias = true},
      // Prefill rows on the GPU's tensor-core GEMM reading 8-bit w (16-bit x, K a multiple of 16):
      // i8 and E4M3 widened in registers, or E4M3 × E4M3 with x rounded per row (sm_89+): tiles of
      // 128 and 64 rows with M, N off them, swiglu, a K split whose reduce applies both row scales
      // (few tiles over K = 4096), batched x over a shared w.
      {.M = 40, .N = 264, .K = 512, .x = bf16, .w = i8, .out = bf16, .bias = true, .residual = inplace},
      {.M = 130, .N = 200, .K = 1040, .x = f16, .w = i8, .out = f16, .swiglu = true},
      {.M = 300, .N = 520, .K = 1024, .x = bf16, .w = f8, .out = bf16, .bias = true, .gelu = true},
      {.M = 65, .N = 136, .K = 4096, .x = f16, .w = f8, .out = f32, .residual = sep},
      {.M = 200, .N = 72, .K = 256, .x = bf16, .w = i8, .out = f32, .swiglu = true, .residual = sep},
      {.B = 2, .M = 40, .N = 72, .K = 256, .x = bf16, .w = f8, .out = bf16, .swiglu = true},
      // The tensor-core GEMV's 8-bit path (16-bit x, K a multiple of 16): a swiglu pair of scaled
      // rows, batched w, the layer_norm prologue, 8 rows of x staged as scaled f16; rows of x
      // staged with a zero tail past K (K off the 64-element unit), normed and copied.
      {.M = 4, .N = 72, .K = 256, .x = bf16, .w = i8, .out = bf16, .swiglu = true},
      {.B = 2, .M = 3, .N = 40, .K = 128, .x = f16, .w = f8, .out = f16, .batched_w = true, .bias = true},
      {.M = 8, .N = 136, .K = 512, .x = bf16, .w = f8, .out = bf16, .bias = true, .norm = ops::NormKind::layer_norm},
      {.M = 5, .N = 40, .K = 208, .x = bf16, .w = i8, .out = bf16, .norm = ops::NormKind::rms_norm},
      {.M = 7, .N = 33, .K = 80, .x = f16, .w = f8, .out = f32, .residual = sep},
      // The GEMV's prologue over long rows: many vectors a thread (the norm weight's first from a
      // register, the rest from L1 or L2), rounds that end partway through a warp (an i8 pair's
      // shuffle included), warps past the rows (M = 3), f16 rows taken unscaled by E4M3 w (two
      // rows: one row of weights under 1 MB would take the FMA GEMV instead).
      {.M = 2, .N = 40, .K = 8448, .x = bf16, .w = bf16, .out = bf16, .norm = ops::NormKind::rms_norm},
      {.M = 3, .N = 24, .K = 9232, .x = bf16, .w = i8, .out = bf16, .bias = true, .norm = ops::NormKind::layer_norm},
      {.M = 2, .N = 40, .K = 8320, .x = f16, .w = f8, .out = f16, .residual = inplace, .norm = ops::NormKind::rms_norm},
      // The 16-bit GEMV with K off its 32-element unit over several rows of x, normed.
      {.M = 6, .N = 24, .K = 40, .x = f16, .w = f16, .out = f16, .norm = ops::NormKind::layer_norm},
      // Plans of the tensor-core cores as an H100 (132 SMs) picks them; other GPUs pick others,
      // and tools/gemm-check.sh runs the matmul cases again with each plan forced
      // (DING_GEMM_WGMMA=0, DING_GEMM_TILE, DING_GEMM_SPLIT). K split into f32 partials and an
      // ordered reduce that applies the epilogue (gemm_split.cuh): with wgmma off, 128 × 64 tiles
      // in 7 splits (in place), 64 × 128 in 7, 64 × 64 in 4; with wgmma, 128 × 128 in 4, 4, 2.
      {.M = 65, .N = 904, .K = 1032, .x = bf16, .w = bf16, .out = bf16, .bias = true, .gelu = true, .residual = inplace},
      {.M = 40, .N = 1696, .K = 1032, .x = f16, .w = f16, .bias = true},
      {.M = 40, .N = 40, .K = 520, .x = bf16, .w = bf16, .out = bf16, .residual = sep},
      // Split (4 and 3 ways on wgmma) with rows the reduce cannot take in whole 8-column vectors:
      // a ragged last vector (N % 8 = 4) and rows that are not 16-byte aligned (N odd).
      {.M = 40, .N = 1004, .K = 1032, .x = bf16, .w = bf16, .out = bf16, .bias = true, .residual = sep},
      {.M = 33, .N = 1001, .K = 776, .x = f16, .w = f16, .out = f16, .bias = true},
      // Unsplit 128 × 64 tiles on mma.sync (46 large tiles would leave SMs idle; too few K slices
      // to split), wgmma or not.
      {.M = 130, .N = 2846, .K = 72, .x = bf16, .w = bf16, .out = bf16, .bias = true},
      // wgmma (cc 9.0): 69 tiles of 128 × 128, M, N and K ragged (K = 72: a 64-deep slice and a
      // partial one); batched w with 72 tiles and 12 slices, twice round the 5-stage ring; 140
      // tiles of 128 × 128 = 70 of 128 × 256, with the whole epilogue in place.
      {.M = 264, .N = 2846, .K = 72, .x = f16, .w = f16, .out = f16, .bias = true, .gelu = true},
      {.B = 72, .M = 65, .N = 40, .K = 712, .x = bf16, .w = bf16, .out = bf16, .batched_w = true},
      {.B = 70, .M = 65, .N = 200, .K = 136, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .bias = true,
       .gelu = true, .residual = inplace},
      // 16-bit operands that 16-byte copies cannot load (K not a multiple of 8): the SIMT core.
      {.M = 40, .N = 72, .K = 100, .x = bf16, .w = bf16, .out = bf16},
      {.M = 33, .N = 40, .K = 7, .x = f16, .w = f16, .out = f16, .residual = sep},
      // swiglu (w = [W_gate; W_up], 2N rows; out N wide) on every core. Decode rows: the CPU gemv
      // (M ≤ 6); on the GPU the FMA GEMV (f32 or mixed operands, K not a multiple of 8: its scalar
      // instance; few outputs: K split over a block's warps) with the norm prologue fused, and the
      // tensor-core GEMV (16-bit, K % 8 == 0), whose tiles are 8 outputs' gate and up rows: one
      // output per block (N = 16), a short last tile (N % 8 ≠ 0), the norm prologue fused.
      {.M = 1, .N = 1, .K = 1, .swiglu = true},
      {.M = 1, .N = 33, .K = 7, .swiglu = true},
      {.M = 1, .N = 37, .K = 259, .w = bf16, .bias = true, .swiglu = true},
      {.M = 2, .N = 20, .K = 4096, .w = bf16, .swiglu = true, .residual = sep},
      {.M = 4, .N = 64, .K = 4097, .x = bf16, .w = bf16, .out = bf16, .bias = true, .swiglu = true},
      {.M = 5, .N = 17, .K = 72, .bias = true, .swiglu = true, .norm = ops::NormKind::rms_norm},
      {.M = 6, .N = 61, .K = 259, .x = f16, .w = f16, .swiglu = true},
      {.M = 1, .N = 300, .K = 2048, .x = bf16, .w = bf16, .out = bf16, .swiglu = true, .norm = ops::NormKind::rms_norm},
      {.M = 1, .N = 16, .K = 8192, .x = f16, .w = f16, .out = f16, .swiglu = true},
      {.M = 2, .N = 33, .K = 64, .x = f16, .w = f16, .out = f16, .bias = true, .swiglu = true, .residual = sep},
      {.M = 3, .N = 100, .K = 520, .x = bf16, .w = bf16, .out = bf16, .swiglu = true, .residual = inplace},
      {.M = 3, .N = 45, .K = 640, .x = bf16, .w = bf16, .out = bf16, .bias = true, .swiglu = true,
       .norm = ops::NormKind::layer_norm},
      {.M = 7, .N = 40, .K = 96, .x = bf16, .w = bf16, .out = f32, .bias = true, .swiglu = true},
      {.M = 8, .N = 300, .K = 4104, .x = bf16, .w = bf16, .out = bf16, .swiglu = true, .residual = inplace,
       .norm = ops::NormKind::rms_norm},
      // Decode rows whose x does not fit a block's shared memory (8 × 14336 bf16 = 229 KB, Llama-8B's
      // down projection at batch 8): the GPU's tensor-core GEMV reads x from L2 instead.
      {.M = 8, .N = 100, .K = 14336, .x = bf16, .w = bf16, .out = bf16, .residual = inplace},
      {.M = 5, .N = 72, .K = 24000, .x = f16, .w = f16, .out = f32, .bias = true, .swiglu = true},
      // Batched x over a shared w (one product of B·M rows) and batched w, decode and prefill rows.
      {.B = 2, .M = 3, .N = 33, .K = 64, .swiglu = true, .residual = sep},
      {.B = 3, .M = 2, .N = 40, .K = 2048, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .bias = true,
       .swiglu = true},
      {.B = 2, .M = 17, .N = 33, .K = 259, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .bias = true,
       .swiglu = true, .residual = inplace},
      // Prefill rows: the CPU gemm (panels of 128 outputs' gate and up rows: N = 300 is three); on
      // the GPU the SIMT core (f32 or mixed operands, K % 8 ≠ 0; threads pair their sums by shuffle)
      // and mma.sync, with N off the 8-output groups (129, 45, 77).
      {.M = 17, .N = 33, .K = 259, .swiglu = true},
      {.M = 64, .N = 300, .K = 64, .w = bf16, .bias = true, .swiglu = true, .norm = ops::NormKind::rms_norm},
      {.M = 300, .N = 45, .K = 100, .x = bf16, .w = bf16, .out = bf16, .swiglu = true, .residual = inplace},
      {.M = 256, .N = 129, .K = 136, .x = bf16, .w = bf16, .out = bf16, .bias = true, .swiglu = true,
       .residual = sep, .norm = ops::NormKind::rms_norm},
      {.M = 257, .N = 77, .K = 72, .x = f16, .w = f16, .out = f16, .swiglu = true},
      {.M = 130, .N = 72, .K = 72, .x = bf16, .w = bf16, .out = f32, .bias = true, .swiglu = true, .residual = inplace},
      // Split K on the tensor-core cores: the product's 16·⌈N/8⌉ columns give the tile counts of the
      // plain split cases above (N = 500 and 502 as N = 1004, 452 as 904), so the same plans; the
      // reduce then adds both sums of an output before the epilogue, a ragged end at N % 8 = 4 and 5.
      {.M = 40, .N = 500, .K = 1032, .x = bf16, .w = bf16, .out = bf16, .bias = true, .swiglu = true, .residual = sep},
      {.M = 65, .N = 452, .K = 1032, .x = f16, .w = f16, .swiglu = true, .residual = inplace},
      {.M = 33, .N = 501, .K = 776, .x = f16, .w = f16, .out = f16, .bias = true, .swiglu = true},
      // wgmma (cc 9.0): 3 × 23 tiles of 128 product columns (as M = 264, N = 2846 above), and batched
      // w with 70 × 2 tiles.
      {.M = 264, .N = 1423, .K = 72, .x = bf16, .w = bf16, .out = bf16, .bias = true, .swiglu = true},
      {.B = 70, .M = 20, .N = 100, .K = 136, .x = bf16, .w = bf16, .out = bf16, .batched_w = true, .swiglu = true,
       .residual = inplace},
  };
  // gpt2-xl (C = 1600, 4C = 6400, V = 50257): decode rows and prefill rows of every linear layer.
  const std::pair<int64_t, int64_t> gpt2_xl[] = {{4800, 1600}, {1600, 1600}, {6400, 1600}, {1600, 6400}, {50257, 1600}};
  for (DType dtype : {bf16, f32})
    for (int64_t M : {1, 256, 1024})
      for (auto [N, K] : gpt2_xl)
        list.push_back({.M = M, .N = N, .K = K, .x = dtype, .w = dtype, .out = dtype, .in_tests = false});
  // The 2048-token prefill, in the model's dtype only (f32 at this size is minutes on a CPU).
  for (auto [N, K] : gpt2_xl) list.push_back({.M = 2048, .N = N, .K = K, .x = bf16, .w = bf16, .out = bf16, .in_tests = false});
  // The Llama layer's products in bf16, at decode rows (batch 1 and 8) and prefill rows (256 and
  // 512): the fused q/k/v with the block's rms_norm, the output projection and the FFN's down
  // projection with the residual in place, gate and up in one product with the swiglu epilogue and
  // rms_norm (w [2F, C]). Llama-3.2-1B (C = 2048, F = 8192, q/k/v 3072) and Llama-3.1-8B
  // (C = 4096, F = 14336, q/k/v 6144).
  struct LlamaShape {
    int64_t C, F, qkv;
  };
  const LlamaShape llama[] = {{2048, 8192, 3072}, {4096, 14336, 6144}};
  for (const LlamaShape& l : llama)
    for (int64_t M : {1, 8, 256, 512, 2048}) {
      list.push_back({.M = M, .N = l.qkv, .K = l.C, .x = bf16, .w = bf16, .out = bf16, .norm = ops::NormKind::rms_norm,
                      .in_tests = false});
      list.push_back({.M = M, .N = l.C, .K = l.C, .x = bf16, .w = bf16, .out = bf16, .residual = inplace, .in_tests = false});
      list.push_back({.M = M, .N = l.F, .K = l.C, .x = bf16, .w = bf16, .out = bf16, .swiglu = true,
                      .norm = ops::NormKind::rms_norm, .in_tests = false});
      list.push_back({.M = M, .N = l.C, .K = l.F, .x = bf16, .w = bf16, .out = bf16, .residual = inplace, .in_tests = false});
    }
  // Llama-3.1-8B's decode products with 8-bit weights (i8, E4M3 with row scales): half the bytes
  // of the bf16 ones above, so half their time at the same share of bandwidth.
  // And its prefill products (M = 256, 2048) with them: on an H100 a widened copy for wgmma, on
  // other GPUs the tensor-core GEMM reading the 8-bit rows (E4M3 × E4M3 on sm_89+).
  for (DType w : {i8, f8})
    for (int64_t M : {1, 8, 256, 2048}) {
      const LlamaShape& l = llama[1];
      list.push_back({.M = M, .N = l.qkv, .K = l.C, .x = bf16, .w = w, .out = bf16, .norm = ops::NormKind::rms_norm,
                      .in_tests = false});
      list.push_back({.M = M, .N = l.C, .K = l.C, .x = bf16, .w = w, .out = bf16, .residual = inplace, .in_tests = false});
      list.push_back({.M = M, .N = l.F, .K = l.C, .x = bf16, .w = w, .out = bf16, .swiglu = true,
                      .norm = ops::NormKind::rms_norm, .in_tests = false});
      list.push_back({.M = M, .N = l.C, .K = l.F, .x = bf16, .w = w, .out = bf16, .residual = inplace, .in_tests = false});
    }
  // gpt2's decode products (C = 768, 4C = 3072, V = 50257) in f16 and with i8 weights: the shape of
  // issue 22's CPU target (int8 decode against f16 at batch 1): layer products of 0.6–4.7 MB, and
  // the LM head.
  const std::pair<int64_t, int64_t> gpt2[] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {50257, 768}};
  for (DType w : {f16, i8})
    for (auto [N, K] : gpt2) list.push_back({.M = 1, .N = N, .K = K, .x = f16, .w = w, .out = f16, .in_tests = false});
  // Mixture-of-experts routers at decode rows, logits in f32 as the MoE layer asks: OLMoE's and
  // DeepSeek-V2-Lite's (64 experts over C = 2048), Mixtral's (8 over 4096), Qwen3-Next's (512 over
  // 2048). A few hundred KB of weights: what bounds them is a launch's latency, not bandwidth.
  for (auto [E, C] : {std::pair<int64_t, int64_t>{64, 2048}, {8, 4096}, {512, 2048}})
    for (int64_t M : {1, 8})
      list.push_back({.M = M, .N = E, .K = C, .x = bf16, .w = bf16, .out = f32, .in_tests = false});
  // The same prefill products without their fused prologue and epilogues: what `--matmul cublas`
  // can run too (it falls back to ding's kernels for a fused one), so the two compare like for like.
  for (const LlamaShape& l : llama)
    for (auto [N, K] : {std::pair{l.qkv, l.C}, {l.C, l.C}, {2 * l.F, l.C}, {l.C, l.F}})
      list.push_back({.M = 256, .N = N, .K = K, .x = bf16, .w = bf16, .out = bf16, .in_tests = false});

  std::vector<OpCase> cases;
  for (const MatmulCase& c : list) cases.push_back(make_case(c));

  const std::vector<ChainCase> chains = {
      {.dims = {37, 19, 23}},
      {.dims = {37, 19, 23}, .chunk_rows = 1},
      {.dims = {37, 19, 23, 11}, .chunk_rows = 7},
      {.dims = {37, 19, 23, 11}, .chunk_rows = 37},
      {.dims = {50, 13, 29, 7, 31}},
      {.dims = {50, 13, 29, 7, 31}, .chunk_rows = 7},
      {.dims = {50, 13, 29, 7, 31}, .factors = bf16, .chunk_rows = 16},
      {.dims = {33, 64, 9, 65}, .factors = f16, .out = f16, .chunk_rows = 5},
      {.dims = {300, 40, 8, 40, 70}, .out = bf16},
      // 16-bit chains whose every inner size is a multiple of 8: the GPU's tensor-core core takes
      // each product (factors transposed once per call); chunks off the 64/128-row tiles, a tail
      // chunk (300 = 2 · 128 + 44), an f32 out, and a chain that leaves the tensor cores halfway
      // (K = 13 goes to the SIMT core, reading a 16-bit intermediate).
      {.dims = {300, 64, 72, 136, 40}, .factors = bf16, .out = bf16, .chunk_rows = 128},
      {.dims = {200, 40, 16, 64}, .factors = f16},
      {.dims = {70, 24, 13, 32}, .factors = bf16, .out = bf16, .chunk_rows = 32},
      {.dims = {129, 8, 8}, .factors = f16, .out = f16, .chunk_rows = 129},
      // The GPU runs the first product over as many chunks as slot 1 holds when its output is
      // narrow (chains of ≤ 3 products): all 200 rows at once, then 48-row chunks with a tail of 8;
      // and groups of 3 chunks of 20 rows (5 groups).
      {.dims = {200, 64, 8, 72, 40}, .factors = bf16, .out = bf16, .chunk_rows = 48},
      {.dims = {300, 16, 8, 24, 16}, .factors = f16, .chunk_rows = 20},
      // Chunks the GPU backend shortens to whole waves of 128-row tiles (matmul_chain.cu): 17000
      // rows are 133 tiles, two waves on 132 SMs, so it runs 16896-row chunks and a 1000-row rest.
      {.dims = {34792, 64, 8, 64, 8}, .factors = bf16, .out = bf16, .chunk_rows = 17000},
      // W_E·W_V·W_O·W_U on 8192 rows of the vocabulary (d_model 768, d_head 64), 8192 output
      // columns: cache-chunked against the whole product in one go.
      {.dims = {8192, 768, 64, 768, 8192}, .in_tests = false},
      {.dims = {8192, 768, 64, 768, 8192}, .chunk_rows = 8192, .in_tests = false},
  };
  for (const ChainCase& c : chains) cases.push_back(make_chain_case(c));
  // The seed's example (issue 5) in bf16: W_E [V, C] · W_V [C, 64] · W_O [64, C] · W_U[:, :1024]
  // over the whole padded vocabulary V = 50304, for C = 768 (gpt2) and 1600 (gpt2-xl), chunked
  // by the cache against computed whole. The widest intermediate of the whole product, V × C in
  // bf16, is 77 MB (C = 768) or 161 MB (C = 1600): above a 50 MB L2 whatever the output width.
  // The width, 1024 columns of W_U, sets the last product's cost: 2·V·C·1024 = 79 or 165 GFLOP,
  // a fraction of a millisecond on an H100's tensor cores, well under a second even on the SIMT
  // core; and small enough that the intermediates' round trips to memory, which chunking saves
  // (≈ 2 × 77 or 161 MB), are a visible share of the time rather than lost under a full
  // 50304-wide output (3.9 TFLOP and 5 GB written at C = 768).
  for (int64_t C : {768, 1600})
    for (int64_t chunk : {int64_t(0), int64_t(50304)})
      cases.push_back(make_chain_case(
          {.dims = {50304, C, 64, C, 1024}, .factors = bf16, .out = bf16, .chunk_rows = chunk, .in_tests = false}));
  return cases;
}

}  // namespace ding::testing
