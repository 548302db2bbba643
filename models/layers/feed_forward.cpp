// The feed-forward layer: x ← x + down(act(up(norm(x)))). The gated form's silu(gate) ⊙ up is the
// up product's epilogue (ops::Activation::swiglu over the stacked [W_gate; W_up]), so the 2F-wide
// product is never written out.
#include <algorithm>

#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

std::vector<std::string_view> feed_forward_ops(const ModelConfig&) { return {"matmul"}; }

std::vector<std::string_view> ops_of(std::initializer_list<std::vector<std::string_view>> layers) {
  std::vector<std::string_view> ops;
  for (const auto& layer : layers)
    for (std::string_view op : layer)
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  return ops;
}

void feed_forward(const Step& s, const FeedForwardWeights& w) {
  const ModelConfig& c = *s.config;
  const Tensor hidden = s.scratch->take(s.x.dtype, {s.n, c.d_ff});
  const ops::Activation act = c.ffn == FfnKind::gated ? ops::Activation::swiglu : c.activation;
  ops::matmul(*s.stream, hidden, s.x, w.up_w,
              {.bias = w.up_b, .activation = act, .norm = {.kind = c.norm, .weight = w.norm_w, .bias = w.norm_b, .eps = c.norm_eps}});
  ops::matmul(*s.stream, s.x, hidden, w.down_w, {.bias = w.down_b, .residual = s.x});
}

}  // namespace ding
