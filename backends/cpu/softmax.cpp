// Softmax over rows on the CPU: OpenMP over rows; within a row one pass from memory widens
// the kept logits (times the scale) into an f32 scratch row while finding their max, a second
// pass over the scratch (in L1/L2) exponentiates and sums, and the third narrows e·(1/Σ) into
// out. Reading the whole row before writing any of it makes out == x safe.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels.h"
#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

// v[j] ← s·v[j] for j < n; returns the max of the scaled values.
float scale_and_max(float* v, int64_t n, float s) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
#ifdef DING_CPU_AVX2
  __m256 m8 = _mm256_set1_ps(m);
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(v + j), _mm256_set1_ps(s));
    _mm256_storeu_ps(v + j, x);
    m8 = _mm256_max_ps(m8, x);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m8);
  for (float l : lanes) m = std::max(m, l);
#endif
  for (; j < n; ++j) {
    v[j] *= s;
    m = std::max(m, v[j]);
  }
  return m;
}

// v[j] ← exp(v[j] − m) for j < n; returns Σ v[j]. The sum is kept in double: every output is
// divided by it, so its relative error is every output's, and an f32 sum over a vocabulary row
// (6,000 adds per lane) drifts by ~10⁻⁶ (NMSE 1.2·10⁻¹² measured at Tk = 50257).
float exp_and_sum(float* v, int64_t n, float m) {
  double sum = 0;
  int64_t j = 0;
#ifdef DING_CPU_AVX2
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(v + j), _mm256_set1_ps(m)));
    _mm256_storeu_ps(v + j, e);
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum_lo, sum_hi));
  sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; j < n; ++j) sum += v[j] = exp_scalar(v[j] - m);
  return float(sum);
}

void scale_row(float* v, int64_t n, float c) {
  int64_t j = 0;
#ifdef DING_CPU_AVX2
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(v + j, _mm256_mul_ps(_mm256_loadu_ps(v + j), _mm256_set1_ps(c)));
#endif
  for (; j < n; ++j) v[j] *= c;
}

}  // namespace

void softmax(Stream&, const ops::SoftmaxArgs& a) {
  const int64_t Tk = a.x.dim(-1), rows = a.x.numel() / Tk;
  const int64_t Tq = a.params.causal ? a.x.dim(-2) : 1;
  const size_t in_size = dtype_size(a.x.dtype), out_size = dtype_size(a.out.dtype);
  const char* x = static_cast<const char*>(a.x.data);
  char* out = static_cast<char*>(a.out.data);
#pragma omp parallel if (rows * Tk >= (1 << 14))
  {
    std::vector<float> row(size_t(Tk) + 8, 0.0f);  // one scratch row per thread, not per row
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t kept = a.params.causal ? r % Tq + (Tk - Tq) + 1 : Tk;  // columns [0, kept)
      load_row(row.data(), x + r * Tk * in_size, a.x.dtype, kept);
      const float m = scale_and_max(row.data(), kept, a.params.scale);
      const float sum = exp_and_sum(row.data(), kept, m);
      scale_row(row.data(), kept, 1.0f / sum);
      std::fill(row.begin() + kept, row.begin() + Tk, 0.0f);
      store_row(out + r * Tk * out_size, a.out.dtype, row.data(), Tk);
    }
  }
}

}  // namespace ding::cpu
