// What every block shares: the cache a layer's type needs and the scratch a block takes.
#include <fmt/format.h>

#include <algorithm>

#include "ding/error.h"
#include "ding/models/layers/block.h"

namespace ding {

namespace {

// A sliding window's cache rolls (ops/attention.h): it holds the window and one prefill chunk
// beyond it, since a chunk's keys go in before its first query reads the window behind it.
int64_t kv_slots(const LayerSpec& spec, int64_t max_tokens, int64_t max_chunk) {
  return spec.window > 0 ? std::min(max_tokens, spec.window + max_chunk - 1) : max_tokens;
}

}  // namespace

double layer_cache_bytes(const ModelConfig& c, int64_t layer, DType dtype, int64_t max_batch, int64_t max_tokens,
                         int64_t max_chunk) {
  const LayerSpec& spec = c.layers[size_t(layer)];
  switch (spec.mixer) {
    case MixerKind::attention:
      return 2.0 * double(max_batch) * double(kv_slots(spec, max_tokens, max_chunk)) * double(c.n_kv_head) *
             double(c.d_head) * double(dtype_size(dtype));
    case MixerKind::latent_attention:
      return double(max_batch) * double(max_tokens) * double(c.mla.kv_lora_rank + c.mla.rope_dim) * double(dtype_size(dtype));
    case MixerKind::linear_attention: {  // no term in max_tokens: the same at any context
      const LinearAttentionSpec& la = c.linear;
      return double(max_batch) * (double(la.conv_kernel - 1) * double(la.conv_channels()) * double(dtype_size(dtype)) +
                                  double(la.value_heads) * double(la.key_dim) * double(la.value_dim) * 4.0);
    }
  }
  throw Error(ErrorCode::internal, fmt::format("layer {}: no cache for its mixer kind", layer));
}

std::unique_ptr<LayerCache> make_layer_cache(const ModelConfig& c, int64_t layer, Device& device, DType dtype,
                                             int64_t max_batch, int64_t max_tokens, int64_t max_chunk) {
  const LayerSpec& spec = c.layers[size_t(layer)];
  switch (spec.mixer) {
    case MixerKind::attention:
      return std::make_unique<KvCache>(device, dtype, max_batch, kv_slots(spec, max_tokens, max_chunk), c.n_kv_head,
                                       c.d_head);
    case MixerKind::latent_attention:
      return std::make_unique<LatentCache>(device, dtype, max_batch, max_tokens, c.mla.kv_lora_rank + c.mla.rope_dim);
    case MixerKind::linear_attention:
      return std::make_unique<LinearAttentionCache>(device, dtype, max_batch, c.linear);
  }
  throw Error(ErrorCode::internal, fmt::format("layer {}: no cache for its mixer kind", layer));
}

double model_cache_bytes(const ModelConfig& c, DType dtype, int64_t batch, int64_t tokens) {
  double bytes = 0;
  // A chunk of one: the cache as decoding leaves it, without room for a prefill chunk.
  for (int64_t l = 0; l < c.n_layer; ++l) bytes += layer_cache_bytes(c, l, dtype, batch, tokens, 1);
  return bytes;
}

CacheSize model_cache_size(const ModelConfig& c, DType dtype) {
  const double fixed = model_cache_bytes(c, dtype, 1, 0);
  return {model_cache_bytes(c, dtype, 1, 1) - fixed, fixed};
}

size_t block_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows) {
  // A block takes its mixer's tensors and then its feed-forward's between resets; each take is
  // rounded up to 256 bytes. Attention takes two (qkv, its output), three with q/k norms (the
  // normalised q and k); latent attention five (q, the query bottleneck, the kv_a product, the
  // cache rows, its output); linear attention four (the projection with z, the convolution's
  // output, the recurrence's output, its gated norm).
  const int64_t qk_normed = c.qk_norm != QkNorm::none ? (c.n_head + c.n_kv_head) * c.d_head : 0;
  const int64_t q_rows = (c.attention_gate ? 2 : 1) * c.n_head * c.d_head;
  const size_t attention =
      size_t(rows * (q_rows + 2 * c.n_kv_head * c.d_head + c.n_head * c.d_head + qk_normed)) * dtype_size(dtype) + 3 * 256;
  const LinearAttentionSpec& la = c.linear;
  const int64_t values = la.value_heads * la.value_dim;
  const int64_t linear_elements =
      rows * ((la.conv_channels() + 2 * la.value_heads + values) + la.conv_channels() + 2 * values);
  const size_t linear = size_t(linear_elements) * dtype_size(dtype) + 4 * 256;
  const MlaSpec& m = c.mla;
  const int64_t latent_elements = rows * (c.n_head * (m.nope_dim + m.rope_dim) + m.q_lora_rank +
                                          2 * (m.kv_lora_rank + m.rope_dim) + c.n_head * m.value_dim);
  const size_t latent = size_t(latent_elements) * dtype_size(dtype) + 5 * 256;
  size_t mixer = 0;
  for (const LayerSpec& spec : c.layers)
    mixer = std::max(mixer, spec.mixer == MixerKind::latent_attention   ? latent
                            : spec.mixer == MixerKind::linear_attention ? linear
                                                                        : attention);
  return mixer + std::max(feed_forward_scratch_bytes(c, dtype, rows), mixture_of_experts_scratch_bytes(c, dtype, rows));
}

std::vector<Tensor*> projection_weights(LayerWeights& w) {
  std::vector<Tensor*> out;
  for (Tensor* t : {&w.attention.qkv_w, &w.attention.out_w, &w.latent.in_w, &w.latent.q_b_w, &w.latent.out_w,
                    &w.linear.in_w, &w.linear.out_w, &w.ffn.up_w, &w.ffn.down_w, &w.moe.up_w,
                    &w.moe.down_w, &w.moe.shared_up_w, &w.moe.shared_down_w})
    out.push_back(t);
  return out;
}

}  // namespace ding
