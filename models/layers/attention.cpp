// Self-attention as a decoder layer: x ← x + W_o · attn(rope(q), rope(k), v) with q, k, v from one
// fused projection of norm(x). Keys and values go into the layer's KvCache at their positions.
#include <fmt/format.h>

#include "ding/error.h"
#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

KvCache::KvCache(Device& device, DType dtype, int64_t batch, int64_t positions, int64_t kv_heads, int64_t head_dim) {
  const Tensor shape = Tensor::view(nullptr, &device, dtype, {batch, positions, kv_heads, head_dim});
  buffer_ = device.alloc(2 * shape.nbytes());
  k = Tensor::view(buffer_.data(), &device, dtype, {batch, positions, kv_heads, head_dim});
  v = Tensor::view(static_cast<char*>(buffer_.data()) + shape.nbytes(), &device, dtype, {batch, positions, kv_heads, head_dim});
}

namespace {

ops::MatmulNorm prologue(const ModelConfig& c, const Tensor& weight, const Tensor& bias) {
  return {.kind = c.norm, .weight = weight, .bias = bias, .eps = c.norm_eps};
}

// The rotation of the layer's q and k heads; positions are the step's.
ops::RopeParams rotation(const ModelConfig& c, const AttentionWeights& w) {
  return {.layout = ops::RopeLayout::neox, .theta = float(c.rope_theta), .rotary_dim = c.rotary_dim,
          .inv_freq = w.rope_inv_freq, .attention_factor = float(ops::rope_attention_factor(c.rope_scaling))};
}

// Rotates a prefill chunk's heads ([n, heads, D] view of the qkv product) in place at its
// positions (one sequence's consecutive tokens).
void rotate_chunk(const Step& s, const AttentionWeights& w, const Tensor& heads) {
  ops::RopeParams p = rotation(*s.config, w);
  p.positions = s.positions.reshape({1, s.n});
  ops::rope(*s.stream, heads.unsqueeze(0), heads.unsqueeze(0), p);
}

}  // namespace

std::vector<std::string_view> self_attention_ops(const ModelConfig& c) {
  std::vector<std::string_view> ops = {"matmul", "kv_append", "attention_prefill", "attention_decode"};
  if (c.qk_norm != QkNorm::none) ops.push_back("rms_norm");
  if (c.attention_gate) ops.push_back("sigmoid_gate");
  if (c.clip_qkv > 0) ops.push_back("clamp");
  if (c.positions == PositionKind::rope) ops.push_back("rope");  // prefill's rotation; decode's is in attention_decode
  return ops;
}

void self_attention(const Step& s, const AttentionWeights& w, LayerCache& layer_cache) {
  const ModelConfig& c = *s.config;
  auto* cache = dynamic_cast<KvCache*>(&layer_cache);
  if (!cache) throw Error(ErrorCode::internal, fmt::format("layer {}: self_attention needs a KvCache", s.layer));
  const int64_t n = s.n, H = c.n_head, Hkv = c.n_kv_head, D = c.d_head;
  const DType dt = s.x.dtype;
  // With the output gate, q's rows are [q_h ; gate_h] per head: Q = 2·H·D columns, else H·D.
  const int64_t Q = (c.attention_gate ? 2 : 1) * H * D;
  const Tensor qkv = s.scratch->take(dt, {n, Q + 2 * Hkv * D});
  const Tensor attended = s.scratch->take(dt, {n, H * D});
  ops::matmul(*s.stream, qkv, s.x, w.qkv_w, {.bias = w.qkv_b, .norm = prologue(c, w.norm_w, w.norm_b)});

  const Tensor q_heads = c.attention_gate ? qkv.slice(1, 0, Q).unflatten(1, H).slice(2, 0, D) : qkv.slice(1, 0, Q).unflatten(1, H);
  const Tensor k_heads = qkv.slice(1, Q, Q + Hkv * D).unflatten(1, Hkv);
  const Tensor v = qkv.slice(1, Q + Hkv * D, Q + 2 * Hkv * D).unflatten(1, Hkv);
  // q then k heads: adjacent in the product without a gate, else in the normalised copy below.
  Tensor heads = c.attention_gate ? Tensor{} : qkv.slice(1, 0, Q + Hkv * D).unflatten(1, H + Hkv);
  Tensor q = q_heads, k = k_heads;
  // A decode step's q/k norm is part of attention_decode (before its rope), unless q, k and v are
  // clipped between the norm and the attention.
  const bool decode = s.kind == StepKind::decode;
  std::optional<ops::QkNorm> qk_norm;
  if (decode && c.qk_norm != QkNorm::none && c.clip_qkv <= 0) {
    if (c.qk_norm == QkNorm::whole_projection)
      qk_norm = ops::QkNorm{.q_weight = w.qk_norm_w.slice(0, 0, H * D),
                            .k_weight = w.qk_norm_w.slice(0, H * D, (H + Hkv) * D), .eps = c.norm_eps, .whole = true};
    else
      qk_norm = ops::QkNorm{.q_weight = w.q_norm_w, .k_weight = w.k_norm_w, .eps = c.norm_eps};
  } else if (c.qk_norm != QkNorm::none) {
    // q and k normalised into one [n, H + Hkv, D] buffer, so they are adjacent heads (one rope
    // launch below): over their whole projections (OLMoE, then q, k and v clipped) or per head.
    const Tensor qk = s.scratch->take(dt, {n, H + Hkv, D});
    const ops::RmsNormParams eps{.eps = c.norm_eps};
    if (c.qk_norm == QkNorm::whole_projection && H == Hkv) {
      // q and k as two rows of H·D per token, each with its own weight row: one launch.
      ops::rms_norm(*s.stream, qk.reshape({n, 2, H * D}), qkv.slice(1, 0, 2 * H * D).unflatten(1, 2),
                    w.qk_norm_w.reshape({2, H * D}), eps);
    } else if (c.qk_norm == QkNorm::whole_projection) {
      const Tensor flat = qk.reshape({n, (H + Hkv) * D});
      ops::rms_norm(*s.stream, flat.slice(1, 0, H * D), qkv.slice(1, 0, H * D), w.qk_norm_w.slice(0, 0, H * D), eps);
      ops::rms_norm(*s.stream, flat.slice(1, H * D, (H + Hkv) * D), qkv.slice(1, H * D, (H + Hkv) * D),
                    w.qk_norm_w.slice(0, H * D, (H + Hkv) * D), eps);
    } else {
      ops::rms_norm(*s.stream, qk.slice(1, 0, H), q_heads, w.q_norm_w, eps);
      ops::rms_norm(*s.stream, qk.slice(1, H, H + Hkv), k_heads, w.k_norm_w, eps);
    }
    if (c.clip_qkv > 0) {
      ops::clamp(*s.stream, qk, qk, -c.clip_qkv, c.clip_qkv);
      ops::clamp(*s.stream, v, v, -c.clip_qkv, c.clip_qkv);
    }
    heads = qk;
    q = heads.slice(1, 0, H), k = heads.slice(1, H, H + Hkv);
  } else if (c.attention_gate) {
    throw Error(ErrorCode::internal, fmt::format("layer {}: the attention output gate comes with q/k norms", s.layer));
  }
  const bool rope = c.positions == PositionKind::rope;
  const LayerSpec& layer = c.layers[size_t(s.layer)];
  ops::AttentionParams params{.scale = layer.attention_scale, .window = layer.window};
  // A window the cache can hold makes it a rolling cache (position p at slot p mod S): a sliding
  // layer's cache is sized to its window (make_layer_cache), not to the context.
  const int64_t slots = cache->k.dim(1);
  const bool rolling = ops::rolling_cache(params, slots);
  if (decode) {
    // The token's k and v go into the cache inside the attention op, at seq_lens − 1 = its
    // position, and q and k are normalised and rotated there too (no norm or rope launches in a
    // decode step).
    // seq_lens were uploaded before the step and the cache's older rows written by earlier steps.
    ops::attention_decode(*s.stream, {.out = attended.reshape({n, H, D}), .q = q, .k_cache = cache->k.slice(0, 0, n),
                                      .v_cache = cache->v.slice(0, 0, n), .seq_lens = s.seq_lens, .params = params,
                                      .k_new = k, .v_new = v, .rope = rope ? std::optional(rotation(c, w)) : std::nullopt,
                                      .qk_norm = qk_norm, .cache_from_earlier_op = true});
  } else {
    // q and k are adjacent heads of the product and rotate alike: one launch for both.
    if (rope) rotate_chunk(s, w, heads.slice(1, 0, H + Hkv));
    const Tensor k_seq = cache->k.slice(0, s.seq, s.seq + 1), v_seq = cache->v.slice(0, s.seq, s.seq + 1);
    ops::kv_append(*s.stream, k_seq, v_seq, k.unsqueeze(0), v.unsqueeze(0), s.start_dev, rolling);
    // The chunk's queries see every earlier position of the sequence (or the window's). Until
    // the sequence outgrows the slots, position p is still at slot p.
    const int64_t keys = s.start + n;
    if (keys > slots) {
      params.rolling_keys = keys;
      ops::attention_prefill(*s.stream, attended.reshape({1, n, H, D}), q.unsqueeze(0), k_seq, v_seq, params);
    } else {
      ops::attention_prefill(*s.stream, attended.reshape({1, n, H, D}), q.unsqueeze(0), k_seq.slice(1, 0, keys),
                             v_seq.slice(1, 0, keys), params);
    }
  }
  if (c.attention_gate) {
    const Tensor gate = qkv.slice(1, 0, Q).unflatten(1, H).slice(2, D, 2 * D);
    ops::sigmoid_gate(*s.stream, attended.reshape({n, H, D}), attended.reshape({n, H, D}), gate);
  }
  ops::matmul(*s.stream, s.x, attended, w.out_w, {.bias = w.out_b, .residual = s.x});
}

}  // namespace ding
