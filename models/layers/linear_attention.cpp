// Gated DeltaNet as a decoder layer (Qwen3-Next's linear_attention layers), every step a device op:
//   [q k v | b a | z] = W_in h,  h = norm(x)                 matmul, the norm in its prologue
//   q, k, v = silu(conv(q k v))                             causal_conv1d, state: the last K − 1 inputs
//   o = gated_delta_rule(q/‖q‖, k/‖k‖, v; g(a), β(b))       the L2 norms per head, the gates (from
//                                                           A_log, dt_bias) and the gated norm below
//   x += W_out · (rms_norm(o) ⊙ silu(z))                    formed in the op; matmul with x as residual
// A prefill chunk is one sequence's consecutive tokens (B = 1, T = n); a decode step is one token
// of each of n sequences (B = n, T = 1). The cache holds per sequence what the next token needs,
// whatever the context: the convolution's last inputs and the state.
#include <fmt/format.h>

#include "ding/error.h"
#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

LinearAttentionCache::LinearAttentionCache(Device& device, DType dtype, int64_t batch, const LinearAttentionSpec& spec) {
  const std::initializer_list<int64_t> conv_shape = {batch, spec.conv_kernel - 1, spec.conv_channels()};
  const std::initializer_list<int64_t> state_shape = {batch, spec.value_heads, spec.key_dim, spec.value_dim};
  const size_t conv_bytes = size_t(Tensor::view(nullptr, &device, dtype, conv_shape).nbytes());
  const size_t state_offset = (conv_bytes + 255) / 256 * 256;
  const size_t state_bytes = size_t(Tensor::view(nullptr, &device, DType::f32, state_shape).nbytes());
  buffer_ = device.alloc(state_offset + state_bytes);
  conv = Tensor::view(buffer_.data(), &device, dtype, conv_shape);
  state = Tensor::view(static_cast<char*>(buffer_.data()) + state_offset, &device, DType::f32, state_shape);
}

void LinearAttentionCache::clear(Stream& stream, int64_t seq) {
  for (const Tensor& t : {conv.slice(0, seq, seq + 1), state.slice(0, seq, seq + 1)})
    stream.device().fill_bytes(stream, t.data, 0, t.nbytes());
}

std::vector<std::string_view> linear_attention_ops(const ModelConfig&) {
  // rms_norm: where a backend stages the rule's out_norm.
  return {"matmul", "causal_conv1d", "gated_delta_rule", "rms_norm"};
}

void linear_attention(const Step& s, const LinearAttentionWeights& w, LayerCache& layer_cache) {
  const ModelConfig& c = *s.config;
  auto* cache = dynamic_cast<LinearAttentionCache*>(&layer_cache);
  if (!cache) throw Error(ErrorCode::internal, fmt::format("layer {}: linear_attention needs a LinearAttentionCache", s.layer));
  const LinearAttentionSpec& la = c.linear;
  const int64_t n = s.n, Hk = la.key_heads, Hv = la.value_heads, Dk = la.key_dim, Dv = la.value_dim;
  const int64_t Kd = Hk * Dk, Vd = Hv * Dv, channels = la.conv_channels();
  const DType dt = s.x.dtype;
  Workspace& scratch = *s.scratch;
  Stream& stream = *s.stream;

  const ops::MatmulNorm prologue{.kind = c.norm, .weight = w.norm_w, .eps = c.norm_eps};
  const Tensor proj = scratch.take(dt, {n, channels + 2 * Hv + Vd});
  ops::matmul(stream, proj, s.x, w.in_w, {.norm = prologue});
  const Tensor z = proj.slice(1, channels + 2 * Hv, channels + 2 * Hv + Vd).unflatten(1, Hv);

  // This step's sequences and their states: one sequence's tokens in a row, or one token each.
  const bool prefill = s.kind == StepKind::prefill;
  const auto as_batch = [&](const Tensor& rows) { return prefill ? rows.unsqueeze(0) : rows.unsqueeze(1); };
  const Tensor conv_state = prefill ? cache->conv.slice(0, s.seq, s.seq + 1) : cache->conv.slice(0, 0, n);
  const Tensor state = prefill ? cache->state.slice(0, s.seq, s.seq + 1) : cache->state.slice(0, 0, n);

  const Tensor mixed = scratch.take(dt, {n, channels});
  ops::causal_conv1d(stream, as_batch(mixed), as_batch(proj.slice(1, 0, channels)), w.conv_w.reshape({channels, la.conv_kernel}),
                     conv_state);
  const Tensor qk = mixed.slice(1, 0, 2 * Kd).unflatten(1, 2 * Hk);
  const Tensor v = mixed.slice(1, 2 * Kd, channels).unflatten(1, Hv);
  const Tensor b = proj.slice(1, channels, channels + Hv), a = proj.slice(1, channels + Hv, channels + 2 * Hv);

  // The gated norm inside the rule's op; at decode the state was written by the previous step.
  const Tensor normed = scratch.take(dt, {n, Hv, Dv});
  ops::gated_delta_rule(stream, as_batch(normed), as_batch(qk.slice(1, 0, Hk)), as_batch(qk.slice(1, Hk, 2 * Hk)),
                        as_batch(v), as_batch(a), as_batch(b), state,
                        {.gates = {.a_log = w.a_log, .dt_bias = w.dt_bias},
                         .l2_normalize_qk = true,
                         .out_norm = {.weight = w.out_norm_w, .gate = as_batch(z), .eps = c.norm_eps},
                         .state_from_earlier_op = !prefill});
  ops::matmul(stream, s.x, normed.reshape({n, Vd}), w.out_w, {.residual = s.x});
}

}  // namespace ding
