// exp over 8 f32 lanes for the attention kernels' softmax weights (internal to attention).
// Cephes' expf: e^x = 2^n · e^r with n = round(x / ln 2), |r| ≤ ln 2 / 2, e^r by a degree-7
// polynomial; about 2 ulp on the range used here (x ≤ 0, the score minus the running max).
#pragma once
#include "simd.h"

namespace ding::cpu {

#ifdef DING_CPU_AVX2
inline __m256 exp8(__m256 x) {
  // Below -87.3 e^x is under the smallest normal f32; clamping keeps 2^n's exponent field valid
  // (and turns -inf into a harmless ~1e-38 rather than a NaN from inf - inf).
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n·ln 2 with ln 2 split in two so n·ln2_hi is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}
#endif

}  // namespace ding::cpu
