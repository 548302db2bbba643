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

size_t block_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows) {
  const int64_t attention = rows * ((c.n_head + 2 * c.n_kv_head) * c.d_head + c.n_head * c.d_head);
  const int64_t ffn = rows * c.d_ff;
  // A block takes all three (qkv, attention output, FFN hidden) between resets; each take is
  // rounded up to 256 bytes.
  return size_t(attention + ffn) * dtype_size(dtype) + 3 * 256;
}

}  // namespace ding
