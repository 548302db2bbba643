// causal_conv1d with Kokkos (ops/conv.h): one work item per output element (b, t, c) summing its
// K input rows u[t] … u[t + K − 1] (state rows, then x rows), then, in a second launch after
// them, one per (b, c) rolling the channel's state: its K − 1 new rows gathered before any is
// written, so the roll reads every old row first.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

// Row i of u = [state ; x] of sequence b, element c (state contiguous [B, S, C]).
struct ConvInputs {
  Elements state, x;
  Strides x_s;
  int64_t S, C;
  KOKKOS_INLINE_FUNCTION float operator()(int64_t b, int64_t i, int64_t c) const {
    return i < S ? state.load((b * S + i) * C + c) : x.load(b * x_s[0] + (i - S) * x_s[1] + c * x_s[2]);
  }
};

}  // namespace

void causal_conv1d(Stream&, const ops::CausalConv1dArgs& a) {
  const int64_t B = a.x.dim(0), T = a.x.dim(1), C = a.x.dim(2), K = a.weight.dim(1), S = K - 1;
  const Elements out = elements(a.out), x = elements(a.x), weight = elements(a.weight), state = elements(a.state),
                 bias = elements(a.bias);
  const Strides out_s = strides(a.out), x_s = strides(a.x);
  const bool silu_out = a.activation == ops::ConvActivation::silu;
  const ConvInputs u_at{state, x, x_s, S, C};
  Kokkos::parallel_for("ding::causal_conv1d", Range(0, B * T * C), KOKKOS_LAMBDA(const int64_t e) {
    const int64_t c = e % C, t = e / C % T, b = e / C / T;
    float v = bias.defined() ? bias.load(c) : 0.0f;
    for (int64_t j = 0; j < K; ++j) v += weight.load(c * K + j) * u_at(b, t + j, c);
    out.store(b * out_s[0] + t * out_s[1] + c * out_s[2], silu_out ? kokkos::silu(v) : v);
  });
  Kokkos::parallel_for("ding::causal_conv1d_state", Range(0, B * C), KOKKOS_LAMBDA(const int64_t e) {
    const int64_t c = e % C, b = e / C;
    float rows[ops::kMaxCausalConvKernel - 1];
    for (int64_t s = 0; s < S; ++s) rows[s] = u_at(b, T + s, c);
    for (int64_t s = 0; s < S; ++s) state.store((b * S + s) * C + c, rows[s]);
  });
}

}  // namespace ding::kokkos
