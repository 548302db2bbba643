// What the matmul cores (gemv.cuh, gemv_mma.cuh, gemm_simt.cuh, gemm_mma.cuh, sm90/gemm_wgmma.cu)
// share: the problem they solve, out[row, n] = epilogue(Σ_k x[row, k] · w[n, k]), the fused
// epilogue itself, and how a swiglu epilogue's pairs of sums are laid out as one product.
//
// Element types of x and w are template parameters of each core (the inner loops depend on
// them); the epilogue's dtypes (bias, residual, out) are read at run time, once per output
// element, a uniform branch that costs nothing next to a K-long dot product.
#pragma once
#include <cstdint>

#include "elements.cuh"
#include "vendor.h"

DING_GPU_BEGIN

// A float of any float dtype at base[i].
__device__ inline float load_as_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16: return to_float(static_cast<const ding::f16*>(base)[i]);
    case DType::bf16: return to_float(static_cast<const ding::bf16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ inline void store_from_float(void* base, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::f16: static_cast<ding::f16*>(base)[i] = from_float<ding::f16>(v); break;
    case DType::bf16: static_cast<ding::bf16*>(base)[i] = from_float<ding::bf16>(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}

// gelu's tanh form for the epilogues, v·σ(t) = v / (1 + e^(−t)), t = kGeluT1·v + kGeluT3·v³
// (ops/activation.h), t in f32. Not the gelu op's two-float t (elements.cuh): inlined into every
// unrolled store of every core's tiles, that made a core's unit compile 10–20 times longer
// (gemm_mma_small_bf16.cu 143 s against 6 s; as a call, 1.8 times longer). An f32 t costs up to
// ~7 bits of the result where |t| is in the tens (v ≪ 0, a result near zero), which weighs
// nothing in the matmul cases' NMSE. For v → −∞, e^(−t) overflows to inf and the result is −0, not NaN.
__device__ inline float epilogue_gelu(float v) {
  const float t = v * (float(ops::kGeluT1) + float(ops::kGeluT3) * v * v);
  return v / (1.0f + expf(-t));
}

// out = act(acc + bias) + residual, rounded to out's dtype; swiglu: out = silu(gate + bias[col]) ·
// (up + bias[N + col]) + residual, from the two sums of the output (ops/matmul.h). Rows index the
// flattened output ([B·M, N] for a batched one: contiguous, so row b·M + m), so the cores need no
// batch offsets here.
struct Epilogue {
  const void* bias = nullptr;  // [N] ([2N] for swiglu), element n at n · bias_stride; null: none
  DType bias_dtype = DType::f32;
  int64_t bias_stride = 1;
  bool gelu = false;
  bool swiglu = false;  // w is [2N, K]: the cores compute the product of swiglu_cols(N) columns below
  const void* residual = nullptr;  // like out (same ld); may be out itself; null: none
  DType residual_dtype = DType::f32;
  void* out = nullptr;
  DType out_dtype = DType::f32;
  int64_t ld = 0;  // elements from one row of out (and of residual) to the next: N
  // The row scales of an 8-bit w that a core multiplies in its 16-bit widening (matmul.cu): each
  // sum times its w row's scale before anything else, w row = col (swiglu's up rows: ld + col, as
  // out is [M, N] with ld = N). Null: the sums are final (the GEMV cores scale their own sums).
  const float* w_scales = nullptr;
  // The row scales of an x rounded to E4M3 for the E4M3 tensor cores (matmul.cu): each sum also
  // times its x row's scale, x row = the flattened output row. Null: x as given.
  const float* x_scales = nullptr;

  // In place (residual == out) is safe: each element's residual is read by the thread that
  // writes that element, before it writes it.
  __device__ float value(int64_t row, int64_t col, float acc) const {
    if (w_scales) acc *= w_scales[col];
    if (x_scales) acc *= x_scales[row];
    if (bias) acc += load_as_float(bias, bias_dtype, col * bias_stride);
    if (gelu) acc = epilogue_gelu(acc);
    return plus_residual(row, col, acc);
  }
  // swiglu's output from its gate and up sums.
  __device__ float value(int64_t row, int64_t col, float gate, float up) const {
    if (w_scales) {
      gate *= w_scales[col];
      up *= w_scales[ld + col];
    }
    if (x_scales) {
      gate *= x_scales[row];
      up *= x_scales[row];
    }
    if (bias) {
      gate += load_as_float(bias, bias_dtype, col * bias_stride);
      up += load_as_float(bias, bias_dtype, (ld + col) * bias_stride);
    }
    return plus_residual(row, col, silu_times(gate, up));
  }
  __device__ float plus_residual(int64_t row, int64_t col, float v) const {
    return residual ? v + load_as_float(residual, residual_dtype, row * ld + col) : v;
  }
  __device__ void store(int64_t row, int64_t col, float acc) const {
    store_from_float(out, out_dtype, row * ld + col, value(row, col, acc));
  }
  __device__ void store(int64_t row, int64_t col, float gate, float up) const {
    store_from_float(out, out_dtype, row * ld + col, value(row, col, gate, up));
  }

  // Columns col … col + 7 of one row, as store() writes them; a 16-bit out whose eight elements
  // start on a 16-byte boundary takes them as one 16-byte store (the per-element stores cost the
  // GEMM cores' epilogues more instructions than a 1600-deep tile's math leaves room for).
  __device__ void store8(int64_t row, int64_t col, const float (&acc)[8]) const {
    float v[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) v[c] = value(row, col + c, acc[c]);
    write8(row, col, v);
  }
  __device__ void store8(int64_t row, int64_t col, const float (&gate)[8], const float (&up)[8]) const {
    float v[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) v[c] = value(row, col + c, gate[c], up[c]);
    write8(row, col, v);
  }

  // Eight finished values into out[row, col … col + 7].
  __device__ void write8(int64_t row, int64_t col, const float (&v)[8]) const {
    const int64_t i = row * ld + col;
    char* const at = static_cast<char*>(out) + i * 2;
    if (out_dtype != DType::f32 && reinterpret_cast<uintptr_t>(at) % 16 == 0) {
      auto bits = [&](float x) {
        return uint32_t(out_dtype == DType::bf16 ? from_float<ding::bf16>(x).bits : from_float<ding::f16>(x).bits);
      };
      uint32_t w[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) w[c] = bits(v[2 * c]) | bits(v[2 * c + 1]) << 16;
      *reinterpret_cast<uint4*>(at) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int c = 0; c < 8; ++c) store_from_float(out, out_dtype, i + c, v[c]);
    }
  }
};

// One launch's worth of product: `batches` independent problems x [M, K] · w [N, K]ᵀ (or w
// [K, N] for the SIMT core's matmul_chain variant) whose operands are `x_batch` and `w_batch`
// elements apart (w_batch 0: w shared), results in the epilogue's rows b·M + m. N counts the
// columns of out: with a swiglu epilogue w is [2N, K].
struct GemmShape {
  const void* x = nullptr;
  const void* w = nullptr;
  int64_t M = 0, N = 0, K = 0;
  int64_t batches = 1;
  int64_t x_batch = 0, w_batch = 0;
  // A quantized w's row scales (ops/matmul.h: every row of every batch of w in order), read by the
  // GEMV cores (the tiled cores take widened w and Epilogue::w_scales); null for a float w.
  const float* w_scales = nullptr;
};

// swiglu as one product. The tiled cores compute out's 2N sums as a product of swiglu_cols(N) =
// 16·⌈N/8⌉ columns in groups of 16: product columns 16i … 16i + 7 are the gate sums (rows 8i …
// 8i + 7 of w) of output columns 8i … 8i + 7, and 16i + 8 … 16i + 15 their up sums (rows N + 8i
// …). So every tile, and every warp's piece of it, whose columns start and end on multiples of 16
// holds both sums of each output it covers, and the epilogue combines them without leaving the
// block. Columns of the last group past the last output read no row of w (zero-filled) and are
// not stored.
__host__ __device__ inline int64_t swiglu_cols(int64_t N) { return 16 * ((N + 7) / 8); }
__host__ __device__ inline int64_t swiglu_out_col(int64_t c) { return c / 16 * 8 + c % 8; }

// The row of w behind product column c, or −1 where the column has none (past the last output).
__device__ inline int64_t product_w_row(int64_t c, int64_t N, bool swiglu) {
  if (!swiglu) return c < N ? c : -1;
  const int64_t j = swiglu_out_col(c);
  return j >= N ? -1 : j + (c % 16 >= 8 ? N : 0);
}

// The product the tiled cores compute for p: p itself, or for swiglu p with N = swiglu_cols(N).
// Tile counts, grids and split partials follow it; the kernels get p, whose N the epilogue needs.
inline GemmShape product_shape(const GemmShape& p, const Epilogue& ep) {
  GemmShape product = p;
  if (ep.swiglu) product.N = swiglu_cols(p.N);
  return product;
}

inline bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

DING_GPU_END
