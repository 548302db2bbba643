// layer_norm and rms_norm on the CPU: OpenMP over rows. Each row is read from memory once,
// widened (and summed with the residual) into an f32 scratch row; sum_out is written from it,
// the statistics and the normalised values are computed from it while it sits in L1/L2, and
// out is narrowed from it. Because the row is read whole before anything is written,
// sum_out may be x or residual itself. Weight and bias are widened to f32 once per call. Each
// row tensor finds row r through its own strides (strided.h), so views of fused products work.
// rms_norm's gate is widened into a second scratch row and multiplied in as silu(gate) before
// out is narrowed.
#include <cmath>
#include <vector>

#include "kernels.h"
#include "scratch.h"
#include "simd.h"
#include "strided.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {


// Σ h[c], in eight f32 lanes.
float row_sum(const float* h, int64_t n) {
  float sum = 0;
  int64_t c = 0;
#ifdef DING_CPU_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; c + 8 <= n; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(h + c));
  sum = hsum(acc);
#endif
  for (; c < n; ++c) sum += h[c];
  return sum;
}

// Σ (h[c] − shift)²: shift = mean gives C·variance, shift = 0 the sum of squares.
float row_sum_of_squares(const float* h, int64_t n, float shift) {
  float sum = 0;
  int64_t c = 0;
#ifdef DING_CPU_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; c + 8 <= n; c += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(h + c), _mm256_set1_ps(shift));
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  sum = hsum(acc);
#endif
  for (; c < n; ++c) sum += (h[c] - shift) * (h[c] - shift);
  return sum;
}

// h[c] ← (h[c] − mean)·rstd·w[c] + b[c]   (b may be null: no bias)
void normalize_row(float* h, int64_t n, float mean, float rstd, const float* w, const float* b) {
  int64_t c = 0;
#ifdef DING_CPU_AVX2
  const __m256 mean8 = _mm256_set1_ps(mean), rstd8 = _mm256_set1_ps(rstd);
  for (; c + 8 <= n; c += 8) {
    const __m256 normed = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(h + c), mean8), rstd8);
    const __m256 shift = b ? _mm256_loadu_ps(b + c) : _mm256_setzero_ps();
    _mm256_storeu_ps(h + c, _mm256_fmadd_ps(normed, _mm256_loadu_ps(w + c), shift));
  }
#endif
  for (; c < n; ++c) h[c] = (h[c] - mean) * rstd * w[c] + (b ? b[c] : 0.0f);
}

// The tensor as f32 in this thread's scratch `slot` (norm weights and biases: a row, or a few).
const float* widen(const Tensor& t, ScratchSlot slot) {
  float* v = thread_scratch(slot, size_t(t.numel()));
  load_row(v, t.data, t.dtype, t.numel());
  return v;
}

// The row loop both norms share; `stats(h, C)` returns {mean to subtract, 1/σ}.
template <class Stats>
void norm_rows(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
               const Tensor& sum_out, const Tensor& gate, Stats stats) {
  const int64_t C = x.dim(-1), rows = x.numel() / C;
  const float* w = widen(weight, ScratchSlot::first);
  const float* b = bias.defined() ? widen(bias, ScratchSlot::second) : nullptr;
#pragma omp parallel if (rows * C >= (1 << 14))
  {
    float* const h = thread_scratch(ScratchSlot::third, size_t(C));  // one row per thread; w and b hold first, second
    float* const g = gate.defined() ? thread_scratch(ScratchSlot::fourth, size_t(C)) : nullptr;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row(h, row_bytes(x, r), x.dtype, C);
      if (residual.defined()) add_row(h, row_bytes(residual, r), residual.dtype, C);
      if (sum_out.defined()) store_row(row_bytes_out(sum_out, r), sum_out.dtype, h, C);
      const auto [mean, rstd] = stats(h, C);
      const int64_t w_row = ops::weight_row(weight, r) * C;
      normalize_row(h, C, mean, rstd, w + w_row, b ? b + w_row : nullptr);
      if (g) {
        load_row(g, row_bytes(gate, r), gate.dtype, C);
        silu_row(g, C);
        for (int64_t c = 0; c < C; ++c) h[c] *= g[c];
      }
      store_row(row_bytes_out(out, r), out.dtype, h, C);
    }
  }
}

}  // namespace

void layer_norm(Stream&, const ops::LayerNormArgs& a) {
  const float eps = a.params.eps;
  norm_rows(a.out, a.x, a.weight, a.params.bias, a.params.residual, a.params.sum_out, Tensor{}, [eps](const float* h, int64_t C) {
    // Two passes over the cached row: Σ(h − mean)² does not cancel the way Σh² − C·mean² does.
    const float mean = row_sum(h, C) / float(C);
    const float var = row_sum_of_squares(h, C, mean) / float(C);
    return std::pair{mean, 1.0f / std::sqrt(var + eps)};
  });
}

void rms_norm(Stream&, const ops::RmsNormArgs& a) {
  const float eps = a.params.eps;
  norm_rows(a.out, a.x, a.weight, Tensor{}, a.params.residual, a.params.sum_out, a.params.gate, [eps](const float* h, int64_t C) {
    const float mean_square = row_sum_of_squares(h, C, 0.0f) / float(C);
    return std::pair{0.0f, 1.0f / std::sqrt(mean_square + eps)};
  });
}

}  // namespace ding::cpu
