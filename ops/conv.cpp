#include "ding/ops/conv.h"

#include <fmt/format.h>

#include <utility>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void validate(const Device& device, const CausalConv1dArgs& a) {
  Check c("causal_conv1d", device);
  for (auto [name, t] : {std::pair{"x", &a.x}, {"out", &a.out}}) {
    c.tensor(name, *t, 3, 3);
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.same_shape("out", a.out, "x", a.x);
  c.tensor("weight", a.weight, 2, 2);
  c.float_dtype("weight", a.weight);
  c.contiguous("weight", a.weight);
  const int64_t C = a.x.dim(2), K = a.weight.dim(1);
  c.dim("weight", a.weight, 0, C, "C (from x)");
  if (K < 2 || K > kMaxCausalConvKernel)
    c.fail(ErrorCode::invalid_argument, fmt::format("the kernel width K = {} (weight {}) must be in [2, {}]", K,
                                                    shape_of(a.weight), kMaxCausalConvKernel));
  c.tensor("state", a.state, 3, 3);
  c.float_dtype("state", a.state);
  c.contiguous("state", a.state);
  c.dim("state", a.state, 0, a.x.dim(0), "B (from x)");
  c.dim("state", a.state, 1, K - 1, "K − 1 (from weight)");
  c.dim("state", a.state, 2, C, "C (from x)");
  if (a.bias.defined()) {
    c.tensor("bias", a.bias, 1, 1);
    c.float_dtype("bias", a.bias);
    c.contiguous("bias", a.bias);
    c.dim("bias", a.bias, 0, C, "C (from x)");
    c.disjoint("out", a.out, "bias", a.bias);
    c.disjoint("state", a.state, "bias", a.bias);
  }
  c.disjoint("out", a.out, "x", a.x);
  c.disjoint("out", a.out, "weight", a.weight);
  c.disjoint("out", a.out, "state", a.state);
  c.disjoint("state", a.state, "x", a.x);
  c.disjoint("state", a.state, "weight", a.weight);
}

Cost cost(const CausalConv1dArgs& a) {
  const double outputs = double(a.out.numel()), K = double(a.weight.dim(1));
  const double flops = outputs * (2.0 * K + (a.bias.defined() ? 1.0 : 0.0) + (a.activation == ConvActivation::silu ? 4.0 : 0.0));
  return {flops, double(a.x.nbytes() + a.out.nbytes() + a.weight.nbytes() + 2 * a.state.nbytes() +
                        (a.bias.defined() ? a.bias.nbytes() : 0))};
}

void causal_conv1d(Stream& stream, Tensor out, Tensor x, Tensor weight, Tensor state, Tensor bias,
                   ConvActivation activation) {
  dispatch(stream, CausalConv1dArgs{out, x, weight, state, bias, activation});
}

}  // namespace ding::ops
