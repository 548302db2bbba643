// Session: the per-request state of a model — each layer's cache (a KV cache for attention
// layers) for a batch of sequences and the activation buffers, all allocated once here, so
// prefill and decode never allocate. What runs is the model's family's block, layer by layer;
// the session owns buffers, input checks and the recording of decode steps.
//
//   prefill(b, tokens) appends a prompt (or a chunk of one) to sequence b;
//   decode(tokens)     appends one token to each of sequences 0..n-1 in one batched step;
// both return the logits of the positions they were asked for, f32 [rows, V] on the device.
#pragma once
#include <span>
#include <vector>

#include "ding/models/model.h"
#include "ding/models/tokenizer.h"

namespace ding {

struct SessionOptions {
  int64_t max_batch = 1;          // sequences decoded together
  // Cache positions per sequence; 0 = the model's n_positions, at most kDefaultContext (a
  // 128k-position model would otherwise take its whole cache up front: ask for more explicitly).
  int64_t max_tokens = 0;
  static constexpr int64_t kDefaultContext = 4096;
  // Prompt tokens processed per step (bounds activation memory); 0 = by the device: 2048 on one
  // with memory of its own (a GPU: a chunk's products and attention fill it only with many rows,
  // and a long prompt pays every per-chunk cost, such as re-reading the experts' weights, once per
  // chunk), 256 on a host device.
  int64_t prefill_chunk = 0;
  static constexpr int64_t kDevicePrefillChunk = 2048, kHostPrefillChunk = 256;
  // Record each decode step once per batch size and replay it (a CUDA graph: one launch instead
  // of hundreds). Off runs every op eagerly, for debugging; streams that cannot record ignore it.
  bool graphs = true;
};

class Session {
 public:
  Session(const Model& model, const SessionOptions& options = {});
  Session(Session&&) noexcept;
  ~Session();

  // Appends `tokens` to sequence `seq`. Returns the logits of the last position, f32 [1, V];
  // when `all_logits` is given, the logits of every position are appended to it (host, row-major).
  // Throws Error(invalid_argument) when the tokens do not fit in the context that is left.
  Tensor prefill(int64_t seq, std::span<const Token> tokens, std::vector<float>* all_logits = nullptr);
  // One token for each of sequences 0..tokens.size()-1; returns their logits, f32 [n, V].
  Tensor decode(std::span<const Token> tokens);

  // Runs a prefill chunk and two decode steps in sequence 0, then forgets every sequence, so that
  // the first real request pays no first-call costs (kernel loading, scratch growth, recording).
  void warm_up();

  int64_t length(int64_t seq) const;     // positions held for the sequence
  void reset(int64_t seq);                // forget a sequence (its cache is reused)
  int64_t max_tokens() const;
  int64_t max_batch() const;
  size_t kv_cache_bytes() const;          // every layer's cache (K and V for attention), all sequences
  size_t activation_bytes() const;
  const Model& model() const;
  Stream& stream() const;

  struct State;  // opaque: buffers and views, defined in session.cpp

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ding
