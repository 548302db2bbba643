// Vectorised exponential, logistic, gelu and silu shared by the CPU kernels (softmax, silu,
// swiglu, gelu and the GEMM's gelu and swiglu epilogues), accurate to a few f32 ulp relative to
// the result so f32 parity tolerances can stay tight. Each has a scalar twin for the tails of
// rows and for builds without AVX2. Also the row helpers several kernels share: add_row (norm,
// embedding), dot and axpy (attention, latent attention).
#pragma once
#include <array>
#include <cmath>

#include "ding/ops/activation.h"
#include "simd.h"

namespace ding::cpu {

inline float exp_scalar(float x) { return std::exp(x); }
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// gelu, tanh form: x·σ(t) with t = kGeluT1·x + kGeluT3·x³ (ops/activation.h). An f32 t (error
// ~|t|·2⁻²³) would cost up to ~7 bits of the result, so t is formed in double (the scalar twin
// does everything in double).
inline float gelu_scalar(float x) {
  const double xd = x, t = xd * (ops::kGeluT1 + ops::kGeluT3 * xd * xd);
  return float(xd / (1.0 + std::exp(-t)));
}

// silu(x) = x·σ(x). The scalar twin is formed in double (e^−x neither overflows nor rounds
// before the division), so it is correctly rounded in practice, like gelu_scalar.
inline float silu_scalar(float x) {
  const double xd = x;
  return float(xd / (1.0 + std::exp(-xd)));
}

#ifdef DING_CPU_AVX2
// e^x = 2^n · e^r with n = round(x / ln 2) and r = x − n·ln 2 ∈ [−ln2/2, ln2/2].
// ln 2 is split into its f32 value and the remainder (Cody–Waite); each FMA forms n·ln2_hi
// exactly before its one rounding, so r keeps full precision. e^r is its Taylor series to r⁷:
// the truncation error |r|⁸/8! ≤ 5·10⁻⁹ is under half an f32 ulp, and Horner's FMAs add about
// one more. 2^n is assembled in the exponent bits, which needs n ∈ [−126, 127]: inputs are
// clamped to [ln(FLT_MIN), 88]; below ln(FLT_MIN) the result is 0 (the true value is subnormal),
// above 88 it saturates at e^88 ≈ 1.65·10³⁸ (no caller relies on overflow to infinity).
inline __m256 exp8(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.3365448f);  // ln(FLT_MIN)
  const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lowest), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182464599609375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-1.904654299957768e-09f), r);
  // Σ r^k / k!, k = 0..7, by Horner from the highest term.
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256 two_to_n = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, two_to_n));
}

// e^x in double, for sums that must match the reference's std::exp to ~1e-16 (sample's
// softmax denominator): the same Cody–Waite reduction, ln 2 split into a head whose low 21 bits
// are zero (n·ln2_hi is exact for |n| ≤ 1024) and the remainder, and e^r to r¹³ (truncation
// |r|¹⁴/14! ≤ 4·10⁻¹⁸, under an ulp).
// Inputs below ln(DBL_MIN) give 0; above 709 it saturates at e^709.
inline __m256d exp4d(__m256d x) {
  const __m256d lowest = _mm256_set1_pd(-708.3964185322641);  // ln(DBL_MIN)
  const __m256d underflow = _mm256_cmp_pd(x, lowest, _CMP_LT_OQ);
  x = _mm256_min_pd(_mm256_max_pd(x, lowest), _mm256_set1_pd(709.0));
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0x1.62e42fee00000p-1), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0x1.a39ef35793c76p-33), r);
  constexpr auto inverse_factorials = [] {
    std::array<double, 14> f{1.0};
    for (int k = 1; k < 14; ++k) f[k] = f[k - 1] / k;
    return f;
  }();
  __m256d p = _mm256_set1_pd(inverse_factorials[13]);
  for (int k = 12; k >= 0; --k) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(inverse_factorials[k]));
  const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023));
  const __m256d two_to_n = _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
  return _mm256_andnot_pd(underflow, _mm256_mul_pd(p, two_to_n));
}

// σ(x) from e = e^−|x|, which never overflows: 1 / (1 + e) for x ≥ 0, e / (1 + e) for x < 0.
// The second keeps σ's relative accuracy for x ≪ 0 (1 / (1 + e^−x) would saturate with e^−x at
// e^88) down to where e^x leaves the normal range and σ is 0 within 1.2·10⁻³⁸.
inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 minus_abs = _mm256_or_ps(x, _mm256_set1_ps(-0.0f));
  const __m256 e = exp8(minus_abs);
  return _mm256_div_ps(_mm256_blendv_ps(one, e, negative), _mm256_add_ps(one, e));
}

// gelu as above: t in double, split into t_hi + t_lo (both f32), and σ(t_hi + t_lo) to first
// order, σ(t_hi) + σ(t_hi)(1 − σ(t_hi))·t_lo (|t_lo| ≤ 2⁻²⁴|t_hi|, so the dropped term is
// below an ulp).
inline __m256 gelu8(__m256 x) {
  // Beyond |x| = 20, |t| > 600 and σ(t) is 0 or 1 in f32; the clamp keeps t finite for x = ±inf
  // (inf − inf in t_lo would make gelu(inf) NaN).
  const auto t_of = [](__m128 half) {
    const __m256d xd = _mm256_min_pd(_mm256_max_pd(_mm256_cvtps_pd(half), _mm256_set1_pd(-20.0)), _mm256_set1_pd(20.0));
    return _mm256_mul_pd(xd, _mm256_fmadd_pd(_mm256_set1_pd(ops::kGeluT3), _mm256_mul_pd(xd, xd), _mm256_set1_pd(ops::kGeluT1)));
  };
  const __m256d t_lo_half = t_of(_mm256_castps256_ps128(x)), t_hi_half = t_of(_mm256_extractf128_ps(x, 1));
  const __m128 hi_lo = _mm256_cvtpd_ps(t_lo_half), hi_hi = _mm256_cvtpd_ps(t_hi_half);
  const __m128 lo_lo = _mm256_cvtpd_ps(_mm256_sub_pd(t_lo_half, _mm256_cvtps_pd(hi_lo)));
  const __m128 lo_hi = _mm256_cvtpd_ps(_mm256_sub_pd(t_hi_half, _mm256_cvtps_pd(hi_hi)));
  const __m256 t_hi = _mm256_set_m128(hi_hi, hi_lo), t_lo = _mm256_set_m128(lo_hi, lo_lo);
  const __m256 s = sigmoid8(t_hi);
  const __m256 slope = _mm256_mul_ps(s, _mm256_sub_ps(_mm256_set1_ps(1.0f), s));
  return _mm256_mul_ps(x, _mm256_fmadd_ps(slope, t_lo, s));
}

// silu(x) = x·σ(x) with sigmoid8's σ, so it keeps its relative accuracy for x ≪ 0 (x / (1 + e^−x)
// would round to 0 once e^−x saturates at e^88): a few ulp down to x = ln(FLT_MIN).
inline __m256 silu8(__m256 x) { return _mm256_mul_ps(x, sigmoid8(x)); }
#endif

// v[i] ← silu(v[i]) for i < n: silu8 eight at a time, x·σ(x) for the rest.
inline void silu_row(float* v, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, silu8(_mm256_loadu_ps(v + i)));
#endif
  for (; i < n; ++i) v[i] = v[i] * sigmoid_scalar(v[i]);
}

// acc[i] += src[i] for i < n, src in its stored dtype (a residual or position row added to an
// f32 scratch row).
inline void add_row(float* acc, const void* src, DType dtype, int64_t n) {
  with_float_type(dtype, src, [&](auto* p) {
    int64_t i = 0;
#ifdef DING_CPU_AVX2
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), load8(p + i)));
#endif
    for (; i < n; ++i) acc[i] += load_scalar(p, dtype, i);
  });
}

// A stored element as f32.
inline float widen(float x) { return x; }
inline float widen(f16 x) { return f16_to_f32(x); }
inline float widen(bf16 x) { return bf16_to_f32(x); }
inline float widen(int8_t x) { return float(x); }
inline float widen(f8e4m3 x) { return f8e4m3_to_f32(x); }

// Σ_d q[d]·k[d], k in its stored dtype widened in registers.
template <class T>
float dot(const float* q, const T* k, int64_t D) {
  int64_t d = 0;
  float s = 0;
#ifdef DING_CPU_AVX2
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  for (; d + 16 <= D; d += 16) {
    s0 = _mm256_fmadd_ps(load8(q + d), load8(k + d), s0);
    s1 = _mm256_fmadd_ps(load8(q + d + 8), load8(k + d + 8), s1);
  }
  if (d + 8 <= D) {
    s0 = _mm256_fmadd_ps(load8(q + d), load8(k + d), s0);
    d += 8;
  }
  s = hsum(_mm256_add_ps(s0, s1));
#endif
  for (; d < D; ++d) s += q[d] * widen(k[d]);
  return s;
}

// acc += p · v
template <class T>
void axpy(float* acc, float p, const T* v, int64_t D) {
  int64_t d = 0;
#ifdef DING_CPU_AVX2
  const __m256 pv = _mm256_set1_ps(p);
  for (; d + 8 <= D; d += 8) store8(acc + d, _mm256_fmadd_ps(pv, load8(v + d), load8(acc + d)));
#endif
  for (; d < D; ++d) acc[d] += p * widen(v[d]);
}

}  // namespace ding::cpu
