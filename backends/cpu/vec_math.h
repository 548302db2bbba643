// Vectorised exponential and logistic functions shared by the CPU kernels (softmax, silu,
// swiglu, gelu), accurate to about 1 ulp in f32 so f32 parity tolerances can stay tight.
// Each has a scalar twin for the tails of rows and for builds without AVX2. Also the one row
// helper the norm and embedding kernels share.
#pragma once
#include <cmath>

#include "simd.h"

namespace ding::cpu {

inline float exp_scalar(float x) { return std::exp(x); }
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }

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

// σ(x) = 1 / (1 + e^−x). For x ≪ 0, e^−x saturates and σ comes out ≈ 6·10⁻³⁹ instead of
// smaller still: an absolute error far below anything f16/bf16/f32 outputs of x·σ(x) resolve.
inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}
#endif

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

}  // namespace ding::cpu
