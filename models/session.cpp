// The decoder forward pass: embeddings, the family's block for every layer, the final norm and
// the LM head, over buffers allocated once. Activations live in the compute dtype; the logits are f32.
#include "session.h"

#include <fmt/format.h>

#include "ding/error.h"
#include "ding/models/families/family.h"
#include "ding/ops/ops.h"
#include "ding/workspace.h"

namespace ding {

struct Session::State {
  const Model* model = nullptr;
  Device* device = nullptr;
  Stream* stream = nullptr;
  SessionOptions options;
  int64_t rows = 0;                    // activation rows: max(prefill chunk, max batch)
  static constexpr int64_t kLogitRows = 64;  // LM-head rows per matmul when all logits are asked for
  std::vector<Buffer> buffers;
  std::vector<std::unique_ptr<LayerCache>> caches;  // one per layer, of the layer's kind
  Workspace scratch;                     // a block's temporaries, reset before each layer
  Tensor x;                              // [rows, C]   the residual stream
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
  size_t cache_bytes = 0, activation_bytes = 0;

  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::view(nullptr, device, dtype, shape);
    buffers.push_back(device->alloc(t.nbytes()));
    t.data = buffers.back().data();
    activation_bytes += t.nbytes();
    return t;
  }

  // Sequence `seq` holds nothing: its length 0 and every layer's cache of it empty.
  void forget(int64_t seq) {
    lengths[size_t(seq)] = 0;
    for (const std::unique_ptr<LayerCache>& cache : caches) cache->clear(*stream, seq);
  }
  void forget_all() {
    for (int64_t b = 0; b < int64_t(lengths.size()); ++b) forget(b);
  }

  template <class T>
  void upload_host(const Tensor& dst, const std::vector<T>& v) {
    device->copy_to_device(*stream, dst.data, v.data(), v.size() * sizeof(T));
  }

  // Every layer over the step's rows: the first n rows of x hold the embedded tokens on entry and
  // the final hidden states (before the final norm) on exit.
  void run_blocks(Step step) {
    const Model& m = *model;
    step.x = x.slice(0, 0, step.n);
    step.scratch = &scratch;
    for (int64_t l = 0; l < m.config().n_layer; ++l) {
      scratch.reset();
      step.layer = l;
      m.family().block(step, m.weights().layers[size_t(l)], *caches[size_t(l)]);
    }
  }

  Step step_of(StepKind kind, int64_t n) const {
    return {.stream = stream, .config = &model->config(), .kind = kind, .n = n, .positions = positions.slice(0, 0, n)};
  }

  // Final norm and LM head for rows [first, first + n) of x into logits rows [0, n).
  Tensor lm_head(int64_t first, int64_t n) {
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    const Tensor logits_n = logits.slice(0, 0, n);
    ops::matmul(*stream, logits_n, x.slice(0, first, first + n), w.lm_head,
                {.norm = {.kind = c.norm, .weight = w.final_norm_w, .bias = w.final_norm_b, .eps = c.norm_eps}});
    return logits_n;
  }

  // One decode step over sequences 0..n-1, reading its inputs (ids, positions, seq_lens) from
  // the device buffers, so it can be recorded once and replayed.
  void decode_step(int64_t n) {
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    ops::embedding(*stream, x.slice(0, 0, n).reshape({n, 1, c.d_model}), ids.slice(0, 0, n).reshape({n, 1}),
                   w.token_embedding,
                   {.position_table = w.position_embedding, .positions = positions.slice(0, 0, n).reshape({n, 1})});
    Step step = step_of(StepKind::decode, n);
    step.seq_lens = seq_lens.slice(0, 0, n);
    run_blocks(step);
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
  if (s.options.max_tokens == 0) s.options.max_tokens = std::min(c.n_positions, SessionOptions::kDefaultContext);
  if (s.options.prefill_chunk == 0)
    s.options.prefill_chunk = s.device->caps().host_accessible ? SessionOptions::kHostPrefillChunk
                                                               : SessionOptions::kDevicePrefillChunk;
  if (s.options.max_batch < 1 || s.options.max_tokens < 1 || s.options.prefill_chunk < 1)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Session: max_batch ({}), max_tokens ({}) and prefill_chunk ({}, 0: by the device) must be ≥ 1",
                            options.max_batch, options.max_tokens, options.prefill_chunk));
  if (c.context_bounded && s.options.max_tokens > c.n_positions)
    throw Error(ErrorCode::invalid_argument,
                c.positions == PositionKind::learned
                    ? fmt::format("Session: max_tokens {} exceeds the {} positions the model has embeddings for",
                                  s.options.max_tokens, c.n_positions)
                    : fmt::format("Session: max_tokens {} exceeds max_position_embeddings = {}, past which the model's "
                                  "dynamic rope scaling changes its frequencies (ding runs it up to there)",
                                  s.options.max_tokens, c.n_positions));
  const int64_t B = s.options.max_batch, S = s.options.max_tokens;
  const DType dt = model.dtype();
  s.rows = std::max(std::min(s.options.prefill_chunk, S), B);
  const int64_t max_chunk = std::min(s.options.prefill_chunk, s.rows);  // prefill's rows per step
  // Everything below, against what the device has, before any of it is allocated: host memory is
  // committed only when touched, so a cache past the machine's memory would otherwise "succeed".
  double cache_plan = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) cache_plan += layer_cache_bytes(c, l, dt, B, S, max_chunk);
  const double activation_plan = double(block_scratch_bytes(c, dt, s.rows)) +
                                 double(s.rows) * double(c.d_model) * double(dtype_size(dt)) +
                                 double(std::max(B, State::kLogitRows)) * double(c.vocab_size) * sizeof(float);
  const double free = double(s.device->free_bytes());
  if (cache_plan + activation_plan > free)
    throw Error(ErrorCode::out_of_memory,
                fmt::format("Session: the KV cache ({:.2f} GiB for {} sequences of {} positions) and activations ({:.2f} GiB) "
                            "need {:.2f} GiB; {} has {:.2f} GiB free (lower max_tokens / -c or max_batch)",
                            cache_plan / double(1 << 30), B, S, activation_plan / double(1 << 30),
                            (cache_plan + activation_plan) / double(1 << 30), s.device->name(), free / double(1 << 30)));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    s.caches.push_back(make_layer_cache(c, l, *s.device, dt, B, S, max_chunk));
    s.cache_bytes += s.caches.back()->bytes();
  }
  s.scratch = Workspace(*s.device, block_scratch_bytes(c, dt, s.rows));
  s.activation_bytes += s.scratch.capacity();
  s.x = s.alloc(dt, {s.rows, c.d_model});
  s.logits = s.alloc(DType::f32, {std::max(B, State::kLogitRows), c.vocab_size});
  s.ids = s.alloc(DType::i32, {s.rows});
  s.positions = s.alloc(DType::i32, {s.rows});
  s.seq_lens = s.alloc(DType::i32, {B});
  s.start = s.alloc(DType::i32, {1});
  s.lengths.assign(size_t(B), 0);
  s.forget_all();
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
                                                           "vocabulary of {} (the embedding table's rows)", tokens[size_t(i)], i, c.vocab_size));
  Tensor last;
  const int64_t chunk = std::min(s.options.prefill_chunk, s.rows);
  std::vector<int32_t> positions;
  for (int64_t done = 0; done < n_total; done += chunk) {
    const int64_t n = std::min(chunk, n_total - done), pos = start + done;
    positions.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) positions[size_t(i)] = int32_t(pos + i);
    s.upload_host(s.ids.slice(0, 0, n), std::vector<int32_t>(tokens.begin() + done, tokens.begin() + done + n));
    s.upload_host(s.positions.slice(0, 0, n), positions);
    s.upload_host(s.start, std::vector<int32_t>{int32_t(pos)});
    ops::embedding(*s.stream, s.x.slice(0, 0, n).reshape({1, n, c.d_model}), s.ids.slice(0, 0, n).reshape({1, n}),
                   w.token_embedding, {.position_table = w.position_embedding, .position_offset = pos});
    Step step = s.step_of(StepKind::prefill, n);
    step.seq = seq;
    step.start = pos;
    step.start_dev = s.start;
    s.run_blocks(step);
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
                                                           "vocabulary of {} (the embedding table's rows)", tokens[size_t(b)], b, c.vocab_size));
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

void Session::warm_up() {
  State& s = *state_;
  s.forget_all();
  if (s.options.max_tokens >= 3) {  // room for a prefill and two decode steps
    const int64_t n = std::min(s.options.prefill_chunk, s.options.max_tokens - 2);
    prefill(0, std::vector<Token>(size_t(n), 0));
    decode(std::vector<Token>{0});  // eager: kernels' scratch reaches its size
    decode(std::vector<Token>{0});  // recorded where the stream records
  }
  s.forget_all();
}

int64_t Session::length(int64_t seq) const {
  state_->check_sequence(seq, "length");
  return state_->lengths[size_t(seq)];
}
void Session::reset(int64_t seq) {
  state_->check_sequence(seq, "reset");
  state_->forget(seq);
}
int64_t Session::max_tokens() const { return state_->options.max_tokens; }
int64_t Session::max_batch() const { return state_->options.max_batch; }
size_t Session::kv_cache_bytes() const { return state_->cache_bytes; }
size_t Session::activation_bytes() const { return state_->activation_bytes; }
const Model& Session::model() const { return *state_->model; }
Stream& Session::stream() const { return *state_->stream; }

}  // namespace ding
