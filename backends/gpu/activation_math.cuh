// The activation functions as device code, one definition each, for the activation kernels
// (activation.cu) and the GEMM cores' fused epilogue (gemm.cuh): x·σ(t) accurate to a few ulp
// relative to the result for any t, and gelu (tanh form) on it with t formed in two floats.
#pragma once
#include "vendor.h"

namespace ding::gpu {

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

// gelu(x) = ½x(1 + tanh u) = x·σ(2u), u = √(2/π)(x + 0.044715x³): the σ form has no
// cancellation in 1 + tanh u for u ≪ 0. σ(t) turns an absolute error δ of t into a relative
// error δ of the result, and |t| reaches ~100 before the result underflows, so t = c1·x +
// c3·x³ (c1 = 2√(2/π), c3 = 0.044715·c1) is evaluated in two floats: x² and x³ with their
// exact rounding errors (fma), the constants split into hi + lo, the two terms summed exactly
// (two-sum, exact only if a and b are the rounded products: mul_rn keeps the compiler from
// fusing them into the sum) and the small parts added after.
__device__ inline float gelu(float x) {
  constexpr float c1_hi = 0x1.988454p+0f, c1_lo = -0x1.857936p-25f;
  constexpr float c3_hi = 0x1.2444f2p-4f, c3_lo = 0x1.49b16ap-29f;
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

}  // namespace ding::gpu
