// The feed-forward layer: x ← x + down(act(up(norm(x)))). The gated form's silu(gate) ⊙ up is the
// up product's epilogue (ops::Activation::swiglu over the stacked [W_gate; W_up]), so the 2F-wide
// product is never written out; so is GPT-2's tanh GELU. Other functions (ModelConfig::ffn_fn)
// follow the product as ops::activation.
#include <algorithm>

#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

// Whether c's feed-forward function is the epilogue its up product fuses.
bool ffn_fused(const ModelConfig& c) {
  return c.ffn_fn == (c.ffn == FfnKind::gated ? ops::ActivationFn::silu : ops::ActivationFn::gelu_tanh);
}

std::vector<std::string_view> feed_forward_ops(const ModelConfig& c) {
  if (ffn_fused(c)) return {"matmul"};
  return {"matmul", "activation"};
}

size_t feed_forward_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows) {
  const size_t hidden = size_t(rows * c.d_ff) * dtype_size(dtype) + 256;
  if (ffn_fused(c)) return hidden;
  return hidden + size_t(rows * c.d_ff * (c.ffn == FfnKind::gated ? 2 : 1)) * dtype_size(dtype) + 256;
}

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
  const ops::MatmulNorm norm{.kind = c.norm, .weight = w.norm_w, .bias = w.norm_b, .eps = c.norm_eps};
  if (ffn_fused(c)) {
    const ops::Activation act = c.ffn == FfnKind::gated ? ops::Activation::swiglu : c.activation;
    ops::matmul(*s.stream, hidden, s.x, w.up_w, {.bias = w.up_b, .activation = act, .norm = norm});
  } else {
    // The up product as it is ([gate | up] rows for a gated FFN), then f on it.
    const bool gated = c.ffn == FfnKind::gated;
    const Tensor up = s.scratch->take(s.x.dtype, {s.n, (gated ? 2 : 1) * c.d_ff});
    ops::matmul(*s.stream, up, s.x, w.up_w, {.bias = w.up_b, .norm = norm});
    ops::activation(*s.stream, hidden, up, c.ffn_fn, gated);
  }
  ops::matmul(*s.stream, s.x, hidden, w.down_w, {.bias = w.down_b, .residual = s.x});
}

}  // namespace ding
