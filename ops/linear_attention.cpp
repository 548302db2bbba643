#include "ding/ops/linear_attention.h"

#include "ding/ops/dispatch.h"

namespace ding::ops {

GatedDeltaRuleArgs as_gated_delta_rule(const LinearAttentionArgs& a) {
  return {.out = a.out, .q = a.q, .k = a.k, .v = a.v, .g = a.g, .beta = {}, .state = a.state,
          .params = {.scale = a.params.scale, .chunk = a.params.chunk, .delta = false}};
}

void validate(const Device& device, const LinearAttentionArgs& a) {
  validate_recurrence("linear_attention", device, as_gated_delta_rule(a));
}

Cost cost(const LinearAttentionArgs& a) {
  // Per token and value head: the decay and the rank-1 update of S, and Sᵀq: ~6·Dk·Dv FLOPs; the
  // state read and written once per call.
  const double tokens = double(a.v.dim(0) * a.v.dim(1) * a.v.dim(2));
  const double flops = 6.0 * tokens * double(a.q.dim(3)) * double(a.v.dim(3));
  return {flops, double(a.q.nbytes() + a.k.nbytes() + a.v.nbytes() + (a.g.defined() ? a.g.nbytes() : 0) +
                        a.out.nbytes() + 2 * a.state.nbytes())};
}

void linear_attention(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, Tensor g, Tensor state,
                      const LinearAttentionParams& params) {
  dispatch(stream, LinearAttentionArgs{out, q, k, v, g, state, params});
}

}  // namespace ding::ops
