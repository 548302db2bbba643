// rope: one work item per (b, t, h, pair i) rotates the pair, and the dims past R are copied by
// the items of i = 0. The angle φ = pos · θ_i is formed in double: at positions in the
// thousands an f32 product is off by more than the rotation's own rounding.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void rope(Stream&, const ops::RopeArgs& a) {
  const ops::RopeParams& p = a.params;
  const int64_t T = a.x.dim(1), H = a.x.dim(2), D = a.x.dim(3);
  const int64_t R = p.rotary_dim == 0 ? D : p.rotary_dim, half = R / 2;
  const Elements out = elements(a.out), x = elements(a.x), positions = elements(p.positions),
                 inv_freq = elements(p.inv_freq);
  const Strides out_s = strides(a.out), x_s = strides(a.x), positions_s = strides(p.positions);
  const int64_t inv_freq_stride = p.inv_freq.defined() ? p.inv_freq.strides[0] : 0;
  const bool neox = p.layout == ops::RopeLayout::neox;
  const double theta = p.theta, factor = p.attention_factor;
  const int64_t offset = p.position_offset;
  const int64_t items = a.x.dim(0) * T * H * half;
  Kokkos::parallel_for("ding::rope", Range(0, items), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t i = item % half, h = item / half % H, t = item / half / H % T, b = item / half / H / T;
    const double pos =
        positions.defined() ? double(positions.load_int(b * positions_s[0] + t * positions_s[1]) + offset) : double(offset + t);
    const double frequency = inv_freq.defined() ? double(inv_freq.load(i * inv_freq_stride)) : pow(theta, -2.0 * double(i) / double(R));
    const double phi = pos * frequency;
    const float c = float(factor * cos(phi)), s = float(factor * sin(phi));
    const int64_t first = neox ? i : 2 * i, second = neox ? i + half : 2 * i + 1;
    const int64_t x_at = b * x_s[0] + t * x_s[1] + h * x_s[2], out_at = b * out_s[0] + t * out_s[1] + h * out_s[2];
    const float x0 = x.load(x_at + first * x_s[3]), x1 = x.load(x_at + second * x_s[3]);
    out.store(out_at + first * out_s[3], x0 * c - x1 * s);
    out.store(out_at + second * out_s[3], x0 * s + x1 * c);
    if (i == 0)
      for (int64_t d = R; d < D; ++d) out.store(out_at + d * out_s[3], x.load(x_at + d * x_s[3]));
  });
}

}  // namespace ding::kokkos
