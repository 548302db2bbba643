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
  }
  throw Error(ErrorCode::internal, fmt::format("layer {}: no cache for its mixer kind", layer));
}

double model_cache_bytes(const ModelConfig& c, DType dtype, int64_t batch, int64_t tokens) {
  double bytes = 0;
  // A chunk of one: the cache as decoding leaves it, without room for a prefill chunk.
  for (int64_t l = 0; l < c.n_layer; ++l) bytes += layer_cache_bytes(c, l, dtype, batch, tokens, 1);
  return bytes;
}

size_t block_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows) {
  const int64_t attention = rows * ((c.n_head + 2 * c.n_kv_head) * c.d_head + c.n_head * c.d_head);
  const int64_t ffn = rows * c.d_ff;
  // A block takes the attention's two (qkv, its output) and then its feed-forward's between
  // resets: the dense FFN's hidden or the mixture of experts' takes; each take is rounded up to
  // 256 bytes.
  const size_t dense = size_t(ffn) * dtype_size(dtype) + 256;
  return size_t(attention) * dtype_size(dtype) + 2 * 256 +
         std::max(dense, mixture_of_experts_scratch_bytes(c, dtype, rows));
}

}  // namespace ding
