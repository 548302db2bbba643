// RoPE's rotation (ops/rope.h) as the GPU kernels apply it: the standalone op (rope.cu) and
// attention_decode's tensor-core kernel, which rotates q and the new key as it loads them.
// Angles are formed in double and only f·cos φ and f·sin φ rounded to f32: positions reach
// thousands of radians, where an f32 φ would already be off by ~5·10⁻⁴ (half an ulp of 8192)
// and dominate the op's error.
#pragma once
#include <cmath>
#include <cstdint>

#include "ding/ops/rope.h"
#include "vendor.h"

DING_GPU_BEGIN

struct Rotary {
  int64_t R = 0;                 // rotated dims (pairs i < R/2); 0: no rotation
  bool neox = true;              // pairs (i, i + R/2); else (2i, 2i + 1)
  const float* inv_freq = nullptr;  // θ_i from this [R/2] table, else θ_i = exp2(i · log2_freq_step)
  double log2_freq_step = 0.0;      // log2 θ^(−2/R)
  double factor = 1.0;              // attention_factor f

#if defined(__CUDACC__) || defined(__HIPCC__)
  // (f·cos φ, f·sin φ) of frequency i at position pos.
  __device__ float2 cos_sin(double pos, int64_t i) const {
    const double freq = inv_freq ? double(inv_freq[i]) : exp2(double(i) * log2_freq_step);
    double sin_phi, cos_phi;
    sincos(pos * freq, &sin_phi, &cos_phi);
    return make_float2(float(factor * cos_phi), float(factor * sin_phi));
  }
  __device__ int64_t first(int64_t i) const { return neox ? i : 2 * i; }
  __device__ int64_t second(int64_t i) const { return neox ? i + R / 2 : 2 * i + 1; }
#endif
};

// The rotation `p` describes over heads of D elements (positions and offset are the caller's).
inline Rotary rotary(const ops::RopeParams& p, int64_t D) {
  Rotary r;
  r.R = p.rotary_dim == 0 ? D : p.rotary_dim;
  r.neox = p.layout == ops::RopeLayout::neox;
  r.inv_freq = p.inv_freq.defined() ? static_cast<const float*>(p.inv_freq.data) : nullptr;
  r.log2_freq_step = -2.0 * std::log2(double(p.theta)) / double(r.R);
  r.factor = double(p.attention_factor);
  return r;
}

DING_GPU_END
