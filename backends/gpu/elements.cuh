// Element access for kernels: the storage types are the runtime's own (float, ding::f16,
// ding::bf16 from dtype.h), widened to float in registers and rounded to nearest even on store.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ding/dtype.h"
#include "ding/error.h"
#include "ding/ops/activation.h"
#include "vendor.h"

DING_GPU_BEGIN

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(ding::f16 x) { return half_bits_to_float(x.bits); }
__device__ inline float to_float(ding::bf16 x) { return bf16_bits_to_float(x.bits); }

template <class T> __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline ding::f16 from_float<ding::f16>(float x) { return ding::f16{float_to_half_bits(x)}; }
template <> __device__ inline ding::bf16 from_float<ding::bf16>(float x) { return ding::bf16{float_to_bf16_bits(x)}; }

// N elements moved as one aligned access (16 bytes: 4 floats, 8 halves or 16 bytes).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
inline constexpr int kPack16 = 16 / int(sizeof(T));

// q stored at dst (aligned as a Pack) as one integer access of its size. Stored as the struct, the
// compiler may split it into its elements' stores, and did: in the delta rule's walk, it merged a
// pair store with the element-at-a-time path beside it, which left two 2-byte stores for most rows.
template <class T, int N>
__device__ inline void store_pack(void* dst, const Pack<T, N>& q) {
  constexpr size_t kBytes = sizeof(Pack<T, N>);
  static_assert(kBytes == 1 || kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "a Pack is 1 to 16 bytes");
  using Word = std::conditional_t<kBytes == 16, uint4,
               std::conditional_t<kBytes == 8, uint2,
               std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 2, uint16_t, uint8_t>>>>;
  Word word;
  memcpy(&word, &q, kBytes);
  *static_cast<Word*>(dst) = word;
}

// The 8-bit weight values (ops/matmul.h: i8, f8e4m3), before their row scale.
__device__ inline float to_float(int8_t q) { return float(q); }
// E4M3 (bias 7, no infinities) as its 7 magnitude bits placed at the bottom of an f32's exponent
// field, which is the value times 2^-120 (E4M3's subnormals land on f32 subnormals, which stay
// exact: kernels are not built to flush them), then scaled back by a power of two: exact.
__device__ inline float to_float(ding::f8e4m3 q) {
  const uint32_t b = q.bits;
  return __uint_as_float((b & 0x80u) << 24 | (b & 0x7Fu) << 20) * 0x1p120f;
}

// v[e] = float(p.v[e]). 8-bit values widen four per 32-bit word with integer instructions, which
// issue at least four times as fast as the conversion unit's I2F: a decode GEMV reading 8-bit
// weights converts one value per byte it streams, so conversions would otherwise bound it.
template <class T, int N>
__device__ inline void widen(const Pack<T, N>& p, float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) v[e] = to_float(p.v[e]);
}
template <int N>
__device__ inline void widen(const Pack<int8_t, N>& p, float (&v)[N]) {
  if constexpr (N % 4 != 0) {
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = float(p.v[e]);
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      // Each byte biased to q + 128 (0 … 255) becomes the low mantissa byte of 2^23: the f32
      // 2^23 + q + 128, exact, from which 2^23 + 128 is taken.
      const uint32_t biased = reinterpret_cast<const uint32_t*>(p.v)[i] ^ 0x80808080u;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        v[4 * i + j] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u + unsigned(j))) - 8388736.0f;
    }
  }
}

// Calls f(T{}) with T the storage type of a float dtype; throws for any other dtype.
template <class F>
decltype(auto) with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: return std::forward<F>(f)(float{});
    case DType::f16: return std::forward<F>(f)(ding::f16{});
    case DType::bf16: return std::forward<F>(f)(ding::bf16{});
    default: break;
  }
  throw Error(ErrorCode::dtype_mismatch, std::string("gpu kernels: no float storage type for ") + std::string(dtype_name(t)));
}

// Calls f(W{}) with W the storage type of a quantized weight's values (i8, f8e4m3).
template <class F>
decltype(auto) with_quantized_type(DType t, F&& f) {
  if (t == DType::i8) return std::forward<F>(f)(int8_t{});
  if (t == DType::f8e4m3) return std::forward<F>(f)(ding::f8e4m3{});
  throw Error(ErrorCode::dtype_mismatch, std::string("gpu kernels: ") + std::string(dtype_name(t)) + " is not an 8-bit weight");
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid dimensions y and z stop at 65535: kernels loop over what lies beyond (block-uniform
// loops, so barriers inside them stay safe).
inline constexpr int64_t kMaxGridYZ = 65535;

// silu(g)·u = g·u·σ(g), with σ from e = e^(−|g|), which never overflows: 1/(1 + e) for g ≥ 0,
// e/(1 + e) for g < 0. The second keeps the result's relative accuracy for g ≪ 0, where
// g / (1 + e^(−g)) would lose it once e^(−g) overflows (the formula of activation.cu's swiglu,
// down to where e^g leaves the normal range).
__device__ inline float silu_times(float g, float u) {
  const float e = expf(-fabsf(g)), gu = g * u;
  return g >= 0.0f ? gu / (1.0f + e) : gu * e / (1.0f + e);
}

// x·scale·σ(t), t = t_hi + t_lo with |t_lo| ≤ ulp(t_hi)/2. With e = e^(−|t|) (to first order
// in t_lo), σ(t) = 1/(1 + e) for t ≥ 0 and e/(1 + e) for t < 0, which never overflows. Below
// t = −80 the result may be subnormal and e^t would be too: it is formed as (x·scale·h)·h with
// h = e^(t/2), normal down to t ≈ −174, so it is rounded once, as the reference's is.
__device__ inline float x_sigmoid(float x, float scale, float t_hi, float t_lo) {
  if (t_hi < -80.0f) {  // 1 + e^t = 1 in f32
    const float half = expf(0.5f * t_hi), h = fmaf(half, 0.5f * t_lo, half);
    return x * scale * h * h;
  }
  const float m_hi = -fabsf(t_hi), m_lo = t_hi >= 0.0f ? -t_lo : t_lo;
  const float e_hi = expf(m_hi), e = fmaf(e_hi, m_lo, e_hi);
  const float xs = x * scale;
  return t_hi >= 0.0f ? xs / (1.0f + e) : xs * e / (1.0f + e);
}

// gelu, tanh form: x·σ(t), t = c1·x + c3·x³ (ops/activation.h's kGeluT1, kGeluT3), for the gelu
// op and the matmul epilogues alike. t is evaluated in two floats, to about double precision:
// x² and x³ with their exact rounding errors (fma), the constants split into hi + lo, the two
// terms summed exactly (two-sum, exact only if a and b are the rounded products: mul_rn keeps the
// compiler from fusing them into the sum) and the small parts added after.
__device__ inline float gelu_tanh(float x) {
  constexpr float c1_hi = float(ops::kGeluT1), c1_lo = float(ops::kGeluT1 - double(c1_hi));
  constexpr float c3_hi = float(ops::kGeluT3), c3_lo = float(ops::kGeluT3 - double(c3_hi));
  // Beyond |x| = 20, |t| > 600 and σ is exactly 0 or 1 in f32; the clamp keeps x³ finite.
  const float xc = fminf(fmaxf(x, -20.0f), 20.0f);
  const float x2 = xc * xc, x2_lo = fmaf(xc, xc, -x2);
  const float x3 = x2 * xc, x3_lo = fmaf(x2, xc, -x3) + x2_lo * xc;
  const float a = mul_rn(c1_hi, xc), a_lo = fmaf(c1_hi, xc, -a) + c1_lo * xc;
  const float b = mul_rn(c3_hi, x3), b_lo = fmaf(c3_hi, x3, -b) + (c3_lo * x3 + c3_hi * x3_lo);
  const float s = a + b, b_part = s - a, s_err = (a - (s - b_part)) + (b - b_part);
  const float lo = s_err + a_lo + b_lo;
  const float t_hi = s + lo, t_lo = lo - (t_hi - s);
  return x_sigmoid(x, 1.0f, t_hi, t_lo);
}

DING_GPU_END
