// Multi-head latent attention as a decoder layer (DeepSeek-V2 §2.1; transformers'
// DeepseekV2Attention), with h = rms_norm(x):
//   q = W_q h, or W_qb · rms_norm(W_qa h) with a query bottleneck;  q = [q_nope ; q_rope] per head
//   [c ; k^R] = W_kva h;  c ← rms_norm(c);  q_rope, k^R rotated (interleaved pairs)
//   x = x + W_o · mla(q, cache of [c ; k^R])
// W_q (or W_qa) and W_kva are one stacked weight, so h's products are one weight stream (one
// kernel at decode); the ops downstream read their parts as strided views.
// The cache row of a position is [c ; k^R]; prefill writes its chunk's rows and attends over the
// sequence's (ops::mla_prefill), decode hands the row to ops::mla_decode, which stores it and
// attends in the absorbed form, reading latents only.
#include <fmt/format.h>

#include "ding/error.h"
#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

LatentCache::LatentCache(Device& device, DType dtype, int64_t batch, int64_t positions, int64_t row) {
  const Tensor shape = Tensor::view(nullptr, &device, dtype, {batch, positions, row});
  buffer_ = device.alloc(shape.nbytes());
  latent = Tensor::view(buffer_.data(), &device, dtype, {batch, positions, row});
}

namespace {

// DeepseekV2RMSNorm's default: transformers builds q_a_layernorm and kv_a_layernorm without the
// config's rms_norm_eps.
constexpr float kBottleneckNormEps = 1e-6f;

// The rotation of q's and k's rope parts ([1, n, heads, Dr] views) at the step's positions:
// DeepSeek's interleaved pairs, the config's (YaRN) frequencies and attention factor.
void rotate(const Step& s, const LatentAttentionWeights& w, const Tensor& out, const Tensor& x) {
  const ModelConfig& c = *s.config;
  const ops::RopeParams p{.layout = ops::RopeLayout::interleaved,
                          .rotary_dim = c.mla.rope_dim,
                          .positions = s.positions.reshape({1, s.n}),
                          .inv_freq = w.rope_inv_freq,
                          .attention_factor = float(ops::rope_attention_factor(c.rope_scaling))};
  ops::rope(*s.stream, out, x, p);
}

}  // namespace

std::vector<std::string_view> latent_attention_ops(const ModelConfig&) {
  return {"matmul", "rms_norm", "rope", "copy", "mla_prefill", "mla_decode"};
}

void latent_attention(const Step& s, const LatentAttentionWeights& w, LayerCache& layer_cache) {
  const ModelConfig& c = *s.config;
  auto* cache = dynamic_cast<LatentCache*>(&layer_cache);
  if (!cache) throw Error(ErrorCode::internal, fmt::format("layer {}: latent_attention needs a LatentCache", s.layer));
  const MlaSpec& m = c.mla;
  const int64_t n = s.n, H = c.n_head, E = m.nope_dim + m.rope_dim, L = m.kv_lora_rank, row = L + m.rope_dim;
  const DType dt = s.x.dtype;
  const ops::MatmulNorm input_norm{.kind = c.norm, .weight = w.norm_w, .eps = c.norm_eps};

  const bool bottleneck = m.q_lora_rank > 0;
  const int64_t Q = bottleneck ? m.q_lora_rank : H * E;  // rows of h's query product
  const Tensor in = s.scratch->take(dt, {n, Q + row});
  ops::matmul(*s.stream, in, s.x, w.in_w, {.norm = input_norm});
  const Tensor kv_a = in.slice(1, Q, Q + row);
  Tensor q = in.slice(1, 0, Q);  // [n, H·E], rows Q + row apart
  if (bottleneck) {
    const Tensor q_a = s.scratch->take(dt, {n, m.q_lora_rank});
    ops::rms_norm(*s.stream, q_a, q, w.q_a_norm_w, {.eps = kBottleneckNormEps});
    q = s.scratch->take(dt, {n, H * E});
    ops::matmul(*s.stream, q, q_a, w.q_b_w);
  }
  // The token's cache row [rms_norm(c) ; rope(k^R)], then q's rope part rotated in place.
  const Tensor latent = s.scratch->take(dt, {n, row});
  ops::rms_norm(*s.stream, latent.slice(1, 0, L), kv_a.slice(1, 0, L), w.kv_a_norm_w, {.eps = kBottleneckNormEps});
  rotate(s, w, latent.slice(1, L, row).unsqueeze(1).unsqueeze(0), kv_a.slice(1, L, row).unsqueeze(1).unsqueeze(0));
  const Tensor q_heads = q.unflatten(1, H).unsqueeze(0);  // [1, n, H, E]
  rotate(s, w, q_heads.slice(3, m.nope_dim, E), q_heads.slice(3, m.nope_dim, E));

  const Tensor attended = s.scratch->take(dt, {n, H * m.value_dim});
  const Tensor w_kv = w.kv_b_w.reshape({H, m.nope_dim + m.value_dim, L});
  const ops::MlaParams params{.scale = m.softmax_scale};
  if (s.kind == StepKind::decode) {
    ops::mla_decode(*s.stream, attended.reshape({n, H, m.value_dim}), q_heads.select(0, 0),
                    cache->latent.slice(0, 0, n), s.seq_lens, w_kv, params, latent);
  } else {
    const Tensor sequence = cache->latent.slice(0, s.seq, s.seq + 1);
    ops::copy(*s.stream, sequence.slice(1, s.start, s.start + n), latent.unsqueeze(0));
    ops::mla_prefill(*s.stream, attended.reshape({1, n, H, m.value_dim}), q_heads, sequence.slice(1, 0, s.start + n),
                     w_kv, params);
  }
  ops::matmul(*s.stream, s.x, attended, w.out_w, {.residual = s.x});
}

}  // namespace ding
