// gated_delta_rule on the CPU (ops/delta_rule.h): OpenMP over the (sequence, value head) pairs,
// each walking its tokens with its state S (f32 [Dk, Dv], rows over the value dim) updated in
// place. Per token two passes over S, both along its contiguous rows:
//   r = Sᵀk (before the decay, which is applied to r instead),   u = β (v − α r)
//   S[d] ← α S[d] + k[d] u   and, on the new row, o += q[d]·S[d]
#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "scratch.h"
#include "simd.h"

namespace ding::cpu {

namespace {

const char* row_at(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  return static_cast<const char*>(t.data) +
         (i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2]) * int64_t(dtype_size(t.dtype));
}

float scalar_at(const Tensor& t, int64_t b, int64_t i, int64_t h) {
  float v;
  load_row(&v, static_cast<const char*>(t.data) + (b * t.strides[0] + i * t.strides[1] + h * t.strides[2]) *
                                                       int64_t(dtype_size(t.dtype)),
           t.dtype, 1);
  return v;
}

}  // namespace

void gated_delta_rule(Stream&, const ops::GatedDeltaRuleArgs& a) {
  const int64_t B = a.q.dim(0), T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const float scale = ops::delta_rule_scale(a);
  Tensor out = a.out;
#pragma omp parallel for schedule(dynamic, 1) if (B * Hv * T * Dk * Dv >= (1 << 16))
  for (int64_t bh = 0; bh < B * Hv; ++bh) {
    const int64_t b = bh / Hv, h = bh % Hv, kh = h / (Hv / Hk);
    float* const S = a.state.ptr<float>() + bh * Dk * Dv;
    float* const q = thread_scratch(ScratchSlot::first, size_t(2 * Dk));
    float* const k = q + Dk;
    float* const u = thread_scratch(ScratchSlot::second, size_t(3 * Dv));
    float* const r = u + Dv;
    float* const o = r + Dv;
    for (int64_t t = 0; t < T; ++t) {
      load_row(q, row_at(a.q, b, t, kh), a.q.dtype, Dk);
      load_row(k, row_at(a.k, b, t, kh), a.k.dtype, Dk);
      load_row(u, row_at(a.v, b, t, h), a.v.dtype, Dv);
      for (int64_t d = 0; d < Dk; ++d) q[d] *= scale;
      const float alpha = std::exp(scalar_at(a.g, b, t, h)), beta = scalar_at(a.beta, b, t, h);
      std::fill(r, r + Dv, 0.0f);
      for (int64_t d = 0; d < Dk; ++d) {
        const float kd = k[d];
        const float* const row = S + d * Dv;
        for (int64_t e = 0; e < Dv; ++e) r[e] += kd * row[e];
      }
      for (int64_t e = 0; e < Dv; ++e) u[e] = beta * (u[e] - alpha * r[e]);
      std::fill(o, o + Dv, 0.0f);
      for (int64_t d = 0; d < Dk; ++d) {
        const float kd = k[d], qd = q[d];
        float* const row = S + d * Dv;
        for (int64_t e = 0; e < Dv; ++e) {
          row[e] = alpha * row[e] + kd * u[e];
          o[e] += qd * row[e];
        }
      }
      store_row(const_cast<char*>(row_at(out, b, t, h)), out.dtype, o, Dv);
    }
  }
}

}  // namespace ding::cpu
