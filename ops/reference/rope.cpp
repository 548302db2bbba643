// Reference rotary position embedding: Su et al., "RoFormer: Enhanced Transformer with Rotary
// Position Embedding" (2021), eq. 34, with φ = pos · θ_i computed in double, θ_i = θ^(−2i/R) or
// the f32 inv_freq table widened (HF transformers: the rotary embedding's inv_freq, cos and sin
// times attention_scaling). Pair layouts as in ops/rope.h: neox pairs (i, i + R/2) (HF:
// rotate_half in modeling_llama.apply_rotary_pos_emb), interleaved pairs (2i, 2i+1) (HF: GPT-J's
// rotate_every_two). Dims ≥ R are copied. Each pair is read before it is written, so out == x is safe.
#include <cmath>

#include "reference.h"

namespace ding::reference {

void rope(Stream&, const ops::RopeArgs& a) {
  const ops::RopeParams& p = a.params;
  const int64_t B = a.x.dim(0), T = a.x.dim(1), H = a.x.dim(2), D = a.x.dim(3);
  const int64_t R = p.rotary_dim == 0 ? D : p.rotary_dim;
  const double f = p.attention_factor;
  auto frequency = [&](int64_t i) {
    return p.inv_freq.defined() ? load(p.inv_freq, offset(p.inv_freq, {i}))
                                : std::pow(double(p.theta), -2.0 * double(i) / double(R));
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const double pos = p.positions.defined() ? load(p.positions, offset(p.positions, {b, t})) + double(p.position_offset)
                                               : double(p.position_offset + t);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < R / 2; ++i) {
          const double phi = pos * frequency(i);
          const double c = f * std::cos(phi), s = f * std::sin(phi);
          const int64_t first = p.layout == ops::RopeLayout::neox ? i : 2 * i;
          const int64_t second = p.layout == ops::RopeLayout::neox ? i + R / 2 : 2 * i + 1;
          const double x0 = load(a.x, offset(a.x, {b, t, h, first}));
          const double x1 = load(a.x, offset(a.x, {b, t, h, second}));
          store(a.out, offset(a.out, {b, t, h, first}), x0 * c - x1 * s);
          store(a.out, offset(a.out, {b, t, h, second}), x0 * s + x1 * c);
        }
        for (int64_t d = R; d < D; ++d) store(a.out, offset(a.out, {b, t, h, d}), load(a.x, offset(a.x, {b, t, h, d})));
      }
    }
}

}  // namespace ding::reference
