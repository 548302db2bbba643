// The decoder forward pass, assembled from ops. Activations live in the compute dtype; the
// logits are f32. Pre-norm GPT block (Radford et al. 2019):
//   x = x + attn(layer_norm(x))
//   x = x + mlp(layer_norm(x)),   mlp(h) = W2·gelu(W1·h + b1) + b2
#include "session.h"

#include <fmt/format.h>

#include "ding/error.h"
#include "ding/ops/ops.h"

namespace ding {

struct Session::State {
  const Model* model = nullptr;
  Device* device = nullptr;
  Stream* stream = nullptr;
  SessionOptions options;
  int64_t rows = 0;                    // activation rows: max(prefill chunk, max batch)
  static constexpr int64_t kLogitRows = 64;  // LM-head rows per matmul when all logits are asked for
  std::vector<Buffer> buffers;
  std::vector<Tensor> k_cache, v_cache;  // per layer: [B, S, Hkv, D]
  Tensor x;                              // [rows, C]   the residual stream
  Tensor qkv;                            // [rows, (H + 2·Hkv)·D]
  Tensor attn;                           // [rows, H·D]
  Tensor ffn;                            // [rows, F]
  Tensor logits;                         // f32 [max(B, kLogitRows), V]
  Tensor ids, positions;                 // i32 [rows]
  Tensor seq_lens;                       // i32 [B]
  Tensor start;                          // i32 [1]: where a prefill chunk goes in its sequence's cache
  std::vector<int64_t> lengths;          // host copy of each sequence's length
  std::vector<int32_t> step_ids, step_positions, step_lens;  // host staging of a decode step's inputs
  // Recorded decode steps, by batch size n (index n). A step runs eagerly the first time for a
  // given n (so kernels' scratch reaches its size), is recorded the second time, replayed after.
  std::vector<std::unique_ptr<Graph>> decode_graphs;
  std::vector<bool> decode_warmed;
  size_t kv_bytes = 0, activation_bytes = 0;

  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape, size_t* counter) {
    Tensor t = Tensor::view(nullptr, device, dtype, shape);
    buffers.push_back(device->alloc(t.nbytes()));
    t.data = buffers.back().data();
    *counter += t.nbytes();
    return t;
  }

  template <class T>
  void upload_host(const Tensor& dst, const std::vector<T>& v) {
    device->copy_to_device(*stream, dst.data, v.data(), v.size() * sizeof(T));
  }

  // The blocks over `n` rows: the first n rows of x hold the embedded tokens on entry and the
  // final hidden states (before the final norm) on exit. `attend` runs attention for one layer
  // from the qkv rows into the attn rows (prefill and decode differ only there).
  template <class Attend>
  void run_blocks(int64_t n, Attend&& attend) {
    const ModelConfig& c = model->config();
    const Tensor x_n = x.slice(0, 0, n), qkv_n = qkv.slice(0, 0, n);
    const Tensor attn_n = attn.slice(0, 0, n), ffn_n = ffn.slice(0, 0, n);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const BlockWeights& w = model->weights().blocks[size_t(l)];
      // Each norm is the prologue of the product it feeds: decode streams W straight from x.
      ops::matmul(*stream, qkv_n, x_n, w.qkv_w, {.bias = w.qkv_b, .norm = block_norm(w.attn_norm_w, w.attn_norm_b)});
      attend(l, qkv_n, attn_n);
      ops::matmul(*stream, x_n, attn_n, w.out_w, {.bias = w.out_b, .residual = x_n});
      ops::matmul(*stream, ffn_n, x_n, w.up_w,
                  {.bias = w.up_b, .activation = c.activation, .norm = block_norm(w.ffn_norm_w, w.ffn_norm_b)});
      ops::matmul(*stream, x_n, ffn_n, w.down_w, {.bias = w.down_b, .residual = x_n});
    }
  }

  ops::MatmulNorm block_norm(const Tensor& weight, const Tensor& bias) const {
    const ModelConfig& c = model->config();
    return {.kind = c.norm, .weight = weight, .bias = bias, .eps = c.norm_eps};
  }

  // Final norm and LM head for rows [first, first + n) of x into logits rows [0, n).
  Tensor lm_head(int64_t first, int64_t n) {
    const ModelWeights& w = model->weights();
    const Tensor logits_n = logits.slice(0, 0, n);
    ops::matmul(*stream, logits_n, x.slice(0, first, first + n), w.lm_head, {.norm = block_norm(w.final_norm_w, w.final_norm_b)});
    return logits_n;
  }

  // q, k, v of n token rows as [n, heads, D] views into the fused qkv rows.
  struct HeadViews { Tensor q, k, v; };
  HeadViews split_heads(const Tensor& qkv_n) const {
    const ModelConfig& c = model->config();
    const int64_t H = c.n_head, Hkv = c.n_kv_head, D = c.d_head;
    const Tensor heads = qkv_n.reshape({qkv_n.dim(0), H + 2 * Hkv, D});
    return {heads.slice(1, 0, H), heads.slice(1, H, H + Hkv), heads.slice(1, H + Hkv, H + 2 * Hkv)};
  }

  // One decode step over sequences 0..n-1, reading its inputs (ids, positions, seq_lens) from
  // the device buffers, so it can be recorded once and replayed.
  void decode_step(int64_t n) {
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    ops::embedding(*stream, x.slice(0, 0, n).reshape({n, 1, c.d_model}), ids.slice(0, 0, n).reshape({n, 1}),
                   w.token_embedding,
                   {.position_table = w.position_embedding, .positions = positions.slice(0, 0, n).reshape({n, 1})});
    run_blocks(n, [&](int64_t l, const Tensor& qkv_n, const Tensor& attn_n) {
      const HeadViews v = split_heads(qkv_n);
      const Tensor k_n = k_cache[size_t(l)].slice(0, 0, n), v_n = v_cache[size_t(l)].slice(0, 0, n);
      // The token's k and v go into the caches inside the attention op (at seq_lens − 1 = its position).
      ops::attention_decode(*stream, attn_n.reshape({n, c.n_head, c.d_head}), v.q, k_n, v_n, seq_lens.slice(0, 0, n), {},
                            v.k, v.v);
    });
    lm_head(0, n);
  }

  // The step through its recorded graph where the stream can record one (and nothing profiles
  // it: a recorded step has no per-op boundaries to time).
  void run_decode_step(int64_t n) {
    if (!options.graphs || !stream->supports_graphs() || stream->profiler) return decode_step(n);
    std::unique_ptr<Graph>& graph = decode_graphs[size_t(n)];
    if (graph) return graph->replay(*stream);
    if (!decode_warmed[size_t(n)]) {
      decode_warmed[size_t(n)] = true;
      return decode_step(n);
    }
    stream->begin_capture();
    try {
      decode_step(n);
    } catch (...) {
      try {
        stream->end_capture();  // leave the stream usable; the partial recording is dropped
      } catch (...) {
      }
      throw;
    }
    graph = stream->end_capture();
    graph->replay(*stream);
  }

  void check_sequence(int64_t seq, const char* what) const {
    if (seq < 0 || seq >= options.max_batch)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("Session::{}: sequence {} is outside the batch of {}", what, seq, options.max_batch));
  }
};

Session::Session(const Model& model, const SessionOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  const ModelConfig& c = model.config();
  s.model = &model;
  s.device = &model.device();
  s.stream = &s.device->default_stream();
  s.options = options;
  if (s.options.max_tokens == 0) s.options.max_tokens = c.n_positions;
  if (s.options.max_batch < 1 || s.options.max_tokens < 1 || s.options.prefill_chunk < 1)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Session: max_batch ({}), max_tokens ({}) and prefill_chunk ({}) must be ≥ 1",
                            options.max_batch, options.max_tokens, options.prefill_chunk));
  if (c.positions == PositionKind::learned && s.options.max_tokens > c.n_positions)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Session: max_tokens {} exceeds the {} positions the model has embeddings for",
                            s.options.max_tokens, c.n_positions));
  const int64_t B = s.options.max_batch, S = s.options.max_tokens;
  const int64_t H = c.n_head, Hkv = c.n_kv_head, D = c.d_head, C = c.d_model, F = c.d_ff, V = c.vocab_size;
  const DType dt = model.dtype();
  s.rows = std::max(std::min(s.options.prefill_chunk, S), B);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    s.k_cache.push_back(s.alloc(dt, {B, S, Hkv, D}, &s.kv_bytes));
    s.v_cache.push_back(s.alloc(dt, {B, S, Hkv, D}, &s.kv_bytes));
  }
  size_t& a = s.activation_bytes;
  s.x = s.alloc(dt, {s.rows, C}, &a);
  s.qkv = s.alloc(dt, {s.rows, (H + 2 * Hkv) * D}, &a);
  s.attn = s.alloc(dt, {s.rows, H * D}, &a);
  s.ffn = s.alloc(dt, {s.rows, F}, &a);
  s.logits = s.alloc(DType::f32, {std::max(B, State::kLogitRows), V}, &a);
  s.ids = s.alloc(DType::i32, {s.rows}, &a);
  s.positions = s.alloc(DType::i32, {s.rows}, &a);
  s.seq_lens = s.alloc(DType::i32, {B}, &a);
  s.start = s.alloc(DType::i32, {1}, &a);
  s.lengths.assign(size_t(B), 0);
  s.decode_graphs.resize(size_t(B) + 1);
  s.decode_warmed.assign(size_t(B) + 1, false);
}

Session::Session(Session&&) noexcept = default;
Session::~Session() = default;

Tensor Session::prefill(int64_t seq, std::span<const Token> tokens, std::vector<float>* all_logits) {
  State& s = *state_;
  s.check_sequence(seq, "prefill");
  const ModelConfig& c = s.model->config();
  const ModelWeights& w = s.model->weights();
  const int64_t start = s.lengths[size_t(seq)], n_total = int64_t(tokens.size());
  if (n_total < 1) throw Error(ErrorCode::invalid_argument, "Session::prefill: no tokens");
  if (start + n_total > s.options.max_tokens)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Session::prefill: {} tokens do not fit: sequence {} holds {} of {} positions", n_total, seq,
                            start, s.options.max_tokens));
  for (int64_t i = 0; i < n_total; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= c.vocab_size)
      throw Error(ErrorCode::invalid_argument, fmt::format("Session::prefill: token {} at position {} is outside the "
                                                           "vocabulary of {}", tokens[size_t(i)], i, c.vocab_size));
  Tensor last;
  const int64_t chunk = std::min(s.options.prefill_chunk, s.rows);
  for (int64_t done = 0; done < n_total; done += chunk) {
    const int64_t n = std::min(chunk, n_total - done), pos = start + done;
    s.upload_host(s.ids.slice(0, 0, n), std::vector<int32_t>(tokens.begin() + done, tokens.begin() + done + n));
    s.upload_host(s.start, std::vector<int32_t>{int32_t(pos)});
    ops::embedding(*s.stream, s.x.slice(0, 0, n).reshape({1, n, c.d_model}), s.ids.slice(0, 0, n).reshape({1, n}),
                   w.token_embedding, {.position_table = w.position_embedding, .position_offset = pos});
    s.run_blocks(n, [&](int64_t l, const Tensor& qkv_n, const Tensor& attn_n) {
      const State::HeadViews v = s.split_heads(qkv_n);
      const Tensor k_seq = s.k_cache[size_t(l)].slice(0, seq, seq + 1), v_seq = s.v_cache[size_t(l)].slice(0, seq, seq + 1);
      ops::kv_append(*s.stream, k_seq, v_seq, v.k.unsqueeze(0), v.v.unsqueeze(0), s.start);
      ops::attention_prefill(*s.stream, attn_n.reshape({1, n, c.n_head, c.d_head}), v.q.unsqueeze(0),
                             k_seq.slice(1, 0, pos + n), v_seq.slice(1, 0, pos + n));
    });
    if (all_logits) {
      for (int64_t r = 0; r < n; r += State::kLogitRows) {
        const int64_t m = std::min(State::kLogitRows, n - r);
        const Tensor logits = s.lm_head(r, m);
        const size_t old = all_logits->size();
        all_logits->resize(old + size_t(m * c.vocab_size));
        s.device->copy_to_host(*s.stream, all_logits->data() + old, logits.data, logits.nbytes());
      }
    }
    if (done + n >= n_total) last = s.lm_head(n - 1, 1);
  }
  s.stream->synchronize();
  s.lengths[size_t(seq)] += n_total;
  return last;
}

Tensor Session::decode(std::span<const Token> tokens) {
  State& s = *state_;
  const ModelConfig& c = s.model->config();
  const int64_t n = int64_t(tokens.size());
  if (n < 1 || n > s.options.max_batch)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Session::decode: {} tokens for a batch of {} sequences", n, s.options.max_batch));
  s.step_ids.resize(size_t(n));
  s.step_positions.resize(size_t(n));
  s.step_lens.resize(size_t(n));
  for (int64_t b = 0; b < n; ++b) {
    const int64_t pos = s.lengths[size_t(b)];
    if (pos >= s.options.max_tokens)
      throw Error(ErrorCode::invalid_argument, fmt::format("Session::decode: sequence {} is full ({} of {} positions)", b,
                                                           pos, s.options.max_tokens));
    if (tokens[size_t(b)] < 0 || tokens[size_t(b)] >= c.vocab_size)
      throw Error(ErrorCode::invalid_argument, fmt::format("Session::decode: token {} for sequence {} is outside the "
                                                           "vocabulary of {}", tokens[size_t(b)], b, c.vocab_size));
    s.step_ids[size_t(b)] = tokens[size_t(b)];
    s.step_positions[size_t(b)] = int32_t(pos);
    s.step_lens[size_t(b)] = int32_t(pos + 1);
  }
  s.upload_host(s.ids.slice(0, 0, n), s.step_ids);
  s.upload_host(s.positions.slice(0, 0, n), s.step_positions);
  s.upload_host(s.seq_lens.slice(0, 0, n), s.step_lens);
  s.run_decode_step(n);
  const Tensor logits = s.logits.slice(0, 0, n);
  s.stream->synchronize();
  for (int64_t b = 0; b < n; ++b) s.lengths[size_t(b)] += 1;
  return logits;
}

int64_t Session::length(int64_t seq) const {
  state_->check_sequence(seq, "length");
  return state_->lengths[size_t(seq)];
}
void Session::reset(int64_t seq) {
  state_->check_sequence(seq, "reset");
  state_->lengths[size_t(seq)] = 0;
}
int64_t Session::max_tokens() const { return state_->options.max_tokens; }
int64_t Session::max_batch() const { return state_->options.max_batch; }
size_t Session::kv_cache_bytes() const { return state_->kv_bytes; }
size_t Session::activation_bytes() const { return state_->activation_bytes; }
const Model& Session::model() const { return *state_->model; }
Stream& Session::stream() const { return *state_->stream; }

}  // namespace ding
