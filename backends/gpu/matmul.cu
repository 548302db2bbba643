// matmul on the GPU: choose a core per call and hand it the product. Every core fuses every
// epilogue, swiglu's too (each computes an output's gate and up sums side by side: gemm.cuh).
//   gemv_mma.cuh   M ≤ 8 rows per batch (decode), 16-bit x and w (or 8-bit w), sm_80+: weight
//                  streaming into mma.sync, the norm prologue fused
//   gemv.cuh       M ≤ 8 otherwise: the same on FMAs; the GEMM cores get norm(x) staged by the
//                  norm kernel
//   gemm_tma.h     on an H100 in a -DDING_CUDA_TMA=ON build, when MatmulTuning::tma asks for it
//                  (DING_GEMM_TMA=1): the persistent, warp-specialised TMA + wgmma core (faster on
//                  large square products, not yet on the M = 256 prefill shapes: docs/PERFORMANCE.md)
//   gemm_wgmma.h   the same products on an H100 (cc 9.0, sm_90a build) with enough tiles: wgmma
//   gemm_mma.cuh   x and w both bf16 or both f16, rows 16-byte aligned, sm_80+: tensor cores
//   gemm_simt.cuh  everything else (f32 or mixed operands, odd K, HIP): f32 FMA tiles
// A quantized w (i8 or f8e4m3 with row scales) at M ≤ 8 goes to the tensor-core GEMV with 16-bit
// x (gemv_mma.cuh widens the 8-bit values to f16 in registers), else to the FMA GEMV, which widens
// them to f32. Larger products with 16-bit x: E4M3 w on E4M3 tensor cores with x rounded per row
// (sm_89+, gemm_mma_e4m3.cu), else the 16-bit tensor-core GEMM widening w in registers
// (gemm_mma.cuh), each with the row scales in the epilogue; where K is not whole 16-byte chunks
// of w, or where an H100's wgmma core takes the product, w widened to x's type in scratch
// (widen.cuh: exact) for the 16-bit cores (launch_prefill_narrow says why). With f32 x, w is
// dequantized to f32 in scratch for the f32 cores.
// matmul_chain, built on the same cores, is in matmul_chain.cu. The cores' kernels are compiled
// in units of their own (matmul_cores.h), not here.
#include <algorithm>
#include <type_traits>

#include "check.h"
#include "elements.cuh"
#include "gemm.cuh"
#include "gemm_mma.cuh"
#include "gemm_simt.cuh"
#if defined(DING_GPU_TMA)
#include "gemm_tma.h"
#endif
#if defined(DING_GPU_WGMMA)
#include "gemm_wgmma.h"
#endif
#include "gemv.cuh"
#include "gemv_mma.cuh"
#include "kernels.h"
#include "matmul_cores.h"
#include "stream.h"
#include "widen.cuh"

DING_GPU_BEGIN

namespace {

Epilogue epilogue_of(const ops::MatmulArgs& a) {
  Epilogue ep;
  const ops::MatmulParams& params = a.params;
  if (params.bias.defined()) {
    ep.bias = params.bias.data;
    ep.bias_dtype = params.bias.dtype;
    ep.bias_stride = params.bias.strides[0];
  }
  ep.gelu = params.activation == ops::Activation::gelu_tanh;
  ep.swiglu = params.activation == ops::Activation::swiglu;
  if (params.residual.defined()) {
    ep.residual = params.residual.data;
    ep.residual_dtype = params.residual.dtype;
  }
  ep.out = a.out.data;
  ep.out_dtype = a.out.dtype;
  ep.ld = a.out.dim(-1);
  return ep;
}

// E4M3 (bias 7, no infinities): normals (8 + m)·2^(e − 10), subnormals m·2^-9.
__device__ inline float f8e4m3_value(uint8_t q) {
  const uint32_t e = (q >> 3) & 15u, m = q & 7u;
  const float magnitude = e != 0 ? __uint_as_float((e + 120u) << 23 | m << 20) : float(m) * 0.001953125f;
  return (q & 0x80u) ? -magnitude : magnitude;
}

// out[r, k] = q[r, k] · scales[r], one element per thread-step.
__global__ void dequantize_rows_kernel(float* out, const void* q, bool f8, const float* scales, int64_t rows, int64_t K) {
  const int64_t n = rows * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = f8 ? f8e4m3_value(static_cast<const uint8_t*>(q)[i]) : float(static_cast<const int8_t*>(q)[i]);
    out[i] = v * scales[i / K];
  }
}

// The matmul of a quantized w through an f32 copy of it (intermediate scratch: the cores below
// take the kernel and staged-input slots).
ops::MatmulArgs dequantized(GpuStream& s, const ops::MatmulArgs& a) {
  const int64_t K = a.w.dim(-1), rows = a.w.numel() / K;
  float* const w = static_cast<float*>(s.scratch(size_t(rows * K) * sizeof(float), GpuStream::ScratchSlot::intermediate));
  const unsigned blocks = unsigned(std::min<int64_t>((rows * K + 255) / 256, int64_t(s.props().sm_count) * 8));
  dequantize_rows_kernel<<<blocks, 256, 0, s.handle()>>>(w, a.w.data, a.w.dtype == DType::f8e4m3, a.w.scales, rows, K);
  DING_GPU_CHECK_LAUNCH("dequantize_rows_kernel");
  ops::MatmulArgs b = a;
  b.w = Tensor::view(w, a.w.device, DType::f32, a.w.shape.data(), a.w.rank);
  return b;
}

// One row of x times weights below this many bytes takes the FMA GEMV (MatmulTuning::
// gemv_mma_min_bytes overrides): a few hundred KB (a MoE router's) are a matter of latency, and
// its blocks load, add and store in a shorter chain than the tensor-core core's ring, staged x and
// tile sums. On an H200, OLMoE's router: 2.6 µs against 3.2, Mixtral's 2.5 against 4.9; at 8 rows
// the FMA GEMV's per-row FMAs make it the slower one (6.1 µs against 3.5).
[[maybe_unused]] inline constexpr int64_t kGemvMmaMinBytes = int64_t(1) << 20;

// The few-rows product (M ≤ kGemvMaxRows): the tensor-core GEMV where it takes x and w (16-bit x,
// w of x's type or 8-bit) unless one row meets small weights, else the FMA GEMV.
template <class X, class W>
void launch_few_rows(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& prologue) {
#if defined(DING_GPU_NVIDIA)
  if constexpr (!std::is_same_v<X, float> && (std::is_same_v<X, W> || sizeof(W) == 1)) {
    const int64_t min_bytes = s.matmul_tuning().gemv_mma_min_bytes;
    const bool small = p.M == 1 && p.N * p.K * int64_t(sizeof(W)) < (min_bytes >= 0 ? min_bytes : kGemvMmaMinBytes);
    if (!small && gemv_mma_fits<X, W>(s.props(), p, ep, prologue)) {
      launch_gemv_mma<X, W>(s, p, ep, prologue);
      return;
    }
  }
#endif
  launch_gemv<X, W>(s, p, ep, prologue);
}

// The product of more rows (M > kGemvMaxRows): the tensor-core cores where they take x and w,
// else the FMA tiles.
template <class X, class W>
void launch_tiled(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
#if defined(DING_GPU_NVIDIA)
  if constexpr (std::is_same_v<X, W> && !std::is_same_v<X, float>) {
#if defined(DING_GPU_TMA)
    if (s.matmul_tuning().tma && gemm_tma_takes(s.props(), product_shape(p, ep))) {
      launch_gemm_tma<X>(s, p, ep);
      return;
    }
#endif
#if defined(DING_GPU_WGMMA)
    if (s.matmul_tuning().wgmma && gemm_wgmma_takes(s.props(), product_shape(p, ep))) {
      launch_gemm_wgmma<X>(s, p, ep);
      return;
    }
#endif
    if (gemm_mma_fits(s.props(), p)) {
      launch_gemm_mma<X>(s, p, ep);
      return;
    }
  }
#endif
  launch_gemm_simt<X, W, false>(s, p, ep);
}

// The product with 8-bit w (row scales `scales`) on the 16-bit cores: w widened to X a run of
// output columns at a time, as many as widen_budget holds (swiglu: their gate and their up rows),
// each run's product writing its columns of out through an epilogue whose out, bias, residual and
// scales start at the run's first column (their rows stay ld = N apart: the up rows' bias and
// scales at N + column, as for the whole product).
template <class X, class W>
void launch_widened(GpuStream& s, const GemmShape& p, const Epilogue& ep, const W* w, const float* scales) {
  const int64_t K = p.K, halves = ep.swiglu ? 2 : 1;
  const int64_t fit = int64_t(widen_budget(s) / (size_t(halves * K) * sizeof(X)));
  const int64_t run = std::min(p.N, std::max<int64_t>(64, fit / 64 * 64));
  X* const wide = static_cast<X*>(s.scratch(size_t(halves * run * K) * sizeof(X), GpuStream::ScratchSlot::intermediate));
  for (int64_t n0 = 0; n0 < p.N; n0 += run) {
    const int64_t n = std::min(run, p.N - n0);
    widen_segments(s, wide, w + n0 * K, n * K, 1, nullptr);
    if (ep.swiglu) widen_segments(s, wide + n * K, w + (p.N + n0) * K, n * K, 1, nullptr);
    GemmShape part = p;
    part.w = wide;
    part.N = n;
    part.w_scales = nullptr;
    Epilogue at = ep;
    at.out = static_cast<char*>(ep.out) + n0 * int64_t(dtype_size(ep.out_dtype));
    if (ep.bias) at.bias = static_cast<const char*>(ep.bias) + n0 * ep.bias_stride * int64_t(dtype_size(ep.bias_dtype));
    if (ep.residual) at.residual = static_cast<const char*>(ep.residual) + n0 * int64_t(dtype_size(ep.residual_dtype));
    at.w_scales = scales + n0;
    launch_tiled<X, X>(s, part, at);
  }
}

// The product of 16-bit x and 8-bit w (row scales p.w_scales) over more rows than a GEMV takes:
// on E4M3 tensor cores where w is E4M3 and the GPU has them (x rounded per row), else on the
// 16-bit tensor cores widening w in registers, else (K not whole 16-byte chunks of w, or no
// tensor cores) on the 16-bit cores over a widened copy of w. Where an H100's wgmma core takes the
// product, the widened copy goes there instead: wgmma outruns mma.sync by more than the copy costs,
// and mma.sync with E4M3 operands runs no faster than with 16-bit ones on that chip
// (docs/PERFORMANCE.md). An RTX 4090 has no wgmma, and E4M3 mma at twice the 16-bit rate.
static_assert(kGemvMaxRows >= ops::kMatmulDecodeRows, "x is rounded to E4M3 only where ops/matmul.h allows it");
template <class X, class W>
void launch_prefill_narrow(GpuStream& s, const GemmShape& p, Epilogue ep) {
  ep.w_scales = p.w_scales;
  GemmShape narrow = p;
  narrow.w_scales = nullptr;
#if defined(DING_GPU_WGMMA)
  if (s.matmul_tuning().wgmma && gemm_wgmma_takes(s.props(), product_shape(p, ep)))
    return launch_widened<X>(s, p, ep, static_cast<const W*>(p.w), p.w_scales);
#endif
#if defined(DING_GPU_NVIDIA)
  if (gemm_mma_fits(s.props(), p, true)) {
    if (std::is_same_v<W, ding::f8e4m3> && gemm_mma_e4m3_available(s))
      launch_gemm_mma_e4m3<X>(s, narrow, ep);
    else
      launch_gemm_mma<X, W>(s, narrow, ep);
    return;
  }
#endif
  launch_widened<X>(s, p, ep, static_cast<const W*>(p.w), p.w_scales);
}

}  // namespace

void matmul(Stream& stream, const ops::MatmulArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const bool quantized = ops::quantized_weight(a.w.dtype);
  if (!quantized && s.vendor_blas_matmul(a)) return;  // a comparison path, off unless asked for
  // A shared w with batched x is one product over all B·M rows (x and out are contiguous);
  // a batched w makes B products of M rows.
  const bool per_batch_w = a.w.rank == 3;
  GemmShape p;
  p.x = a.x.data;
  p.w = a.w.data;
  p.K = a.x.dim(-1);
  p.N = a.out.dim(-1);  // w has 2N rows for swiglu
  p.batches = per_batch_w ? a.x.dim(0) : 1;
  p.M = per_batch_w || a.x.rank == 2 ? a.x.dim(-2) : a.x.dim(0) * a.x.dim(1);
  p.x_batch = p.M * p.K;
  p.w_batch = per_batch_w ? a.w.dim(-2) * p.K : 0;
  if (p.M == 0 || p.N == 0 || p.batches == 0) return;
  // Many rows of a quantized w: widened to 16-bit x's type (below) where w is one matrix, else
  // dequantized to f32.
  const bool widened = quantized && p.M > kGemvMaxRows && a.x.dtype != DType::f32 && !per_batch_w;
  if (quantized && p.M > kGemvMaxRows && !widened) return matmul(stream, dequantized(s, a));
  p.w_scales = quantized ? a.w.scales : nullptr;
  Epilogue ep = epilogue_of(a);
  const ops::MatmulNorm& norm = a.params.norm;
  const bool fused = p.M <= kGemvMaxRows && gemv_fuses(norm, a.x.dtype, p.M, p.K);
  if (norm.kind != ops::NormKind::none && !fused) {
    // The prologue unfused: this backend's norm kernel stages norm(x), then the plain product.
    const Tensor h = Tensor::view(s.scratch(a.x.nbytes(), GpuStream::ScratchSlot::staged_input), a.x.device,
                                  a.x.dtype, a.x.shape.data(), a.x.rank);
    if (norm.kind == ops::NormKind::layer_norm)
      layer_norm(stream, ops::prologue_layer_norm(a, h));
    else
      rms_norm(stream, ops::prologue_rms_norm(a, h));
    p.x = h.data;
  }

  const ops::MatmulNorm& prologue = fused ? norm : ops::MatmulNorm{};
  if (widened) {
    with_float_type(a.x.dtype, [&](auto x_tag) {
      using X = decltype(x_tag);
      if constexpr (!std::is_same_v<X, float>)
        with_quantized_type(a.w.dtype, [&](auto w_tag) { launch_prefill_narrow<X, decltype(w_tag)>(s, p, ep); });
    });
    return;
  }
  if (quantized) {
    with_float_type(a.x.dtype, [&](auto x_tag) {
      with_quantized_type(a.w.dtype, [&](auto w_tag) { launch_few_rows<decltype(x_tag), decltype(w_tag)>(s, p, ep, prologue); });
    });
    return;
  }
  with_float_type(a.x.dtype, [&](auto x_tag) {
    with_float_type(a.w.dtype, [&](auto w_tag) {
      using X = decltype(x_tag);
      using W = decltype(w_tag);
      if (p.M <= kGemvMaxRows)
        launch_few_rows<X, W>(s, p, ep, prologue);
      else
        launch_tiled<X, W>(s, p, ep);
    });
  });
}

DING_GPU_END
