#include "model_bench.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "ceilings.h"
#include "ding/ding.h"
#include "ding/models/sampler.h"
#include "ding/models/session.h"

namespace ding::bench {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The GPT-2 family as released (Radford et al. 2019): layers, heads, width.
ModelConfig named_shape(const std::string& name, int64_t positions) {
  struct Shape { const char* name; int64_t layers, heads, width; };
  static const Shape shapes[] = {{"gpt2", 12, 12, 768}, {"gpt2-medium", 24, 16, 1024}, {"gpt2-large", 36, 20, 1280},
                                 {"gpt2-xl", 48, 25, 1600}};
  for (const Shape& s : shapes)
    if (name == s.name) {
      ModelConfig c;
      c.model_type = "gpt2";
      c.n_layer = s.layers;
      c.n_head = c.n_kv_head = s.heads;
      c.d_model = s.width;
      c.d_head = s.width / s.heads;
      c.d_ff = 4 * s.width;
      c.n_positions = positions;
      c.vocab_size = 50257;
      c.eos_token = 50256;
      return c;
    }
  throw Error(ErrorCode::invalid_argument, fmt::format("--shape '{}': known shapes are gpt2, gpt2-medium, gpt2-large, gpt2-xl", name));
}

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  throw Error(ErrorCode::invalid_argument, fmt::format("--dtype '{}' is not f32, bf16 or f16", s));
}

}  // namespace

int run_model(const ModelBenchOptions& o) {
  Device& device = Device::open(o.backend);
  const LoadOptions load{.dtype = parse_dtype(o.dtype)};
  Model model = o.model_dir.empty() ? Model::random(named_shape(o.shape, o.positions), device, load, 1)
                                    : Model::load(o.model_dir, device, load);
  const ModelConfig& c = model.config();
  if (o.prompt < 1 || o.new_tokens < 1 || o.batch < 1 || o.prompt + o.new_tokens > c.n_positions)
    throw Error(ErrorCode::invalid_argument, fmt::format("--prompt {} + --new {} must fit the {} positions (and be ≥ 1, batch ≥ 1)",
                                                         o.prompt, o.new_tokens, c.n_positions));
  fmt::print("ding-bench model: {} ({} layers, {} heads, width {}, vocab {}), {}, backend {} — {}\n",
             o.model_dir.empty() ? o.shape + " shape, random weights" : o.model_dir, c.n_layer, c.n_head, c.d_model,
             c.vocab_size, o.dtype, device.caps().backend, device.caps().name);
  const Ceilings ceil = measure_ceilings(device);
  fmt::print("ceiling (measured now): bandwidth {:.1f} GB/s ({})\n", ceil.bandwidth_gbs, ceil.bandwidth_how);

  Session session(model, {.max_batch = o.batch, .max_tokens = o.prompt + o.new_tokens, .prefill_chunk = o.prompt,
                          .graphs = o.graphs});
  std::mt19937 rng(7);
  std::uniform_int_distribution<Token> any_token(0, Token(c.vocab_size - 2));
  std::vector<Token> prompt(static_cast<size_t>(o.prompt));
  for (Token& t : prompt) t = any_token(rng);

  // Prefill: one warm-up pass (first-touch of buffers, thread start-up), then the timed one.
  session.prefill(0, prompt);
  session.reset(0);
  double prefill_seconds = 0;
  for (int64_t b = 0; b < o.batch; ++b) {
    const double t0 = now_seconds();
    session.prefill(b, prompt);
    prefill_seconds += now_seconds() - t0;
  }
  Sampler greedy({.temperature = 0});
  std::vector<Token> next(static_cast<size_t>(o.batch), prompt.back());
  const double t0 = now_seconds();
  for (int64_t step = 0; step < o.new_tokens; ++step) {
    const Tensor logits = session.decode(next);
    next = greedy.sample(session.stream(), logits);
  }
  const double decode_seconds = now_seconds() - t0;

  // Decode roofline: every step streams all weights once plus the KV cache read so far (the
  // mean context over the run), for all sequences of the batch.
  const double weight_bytes = double(model.weight_bytes());
  const double kv_per_position = double(session.kv_cache_bytes()) / double(o.batch * (o.prompt + o.new_tokens));
  const double mean_context = double(o.prompt) + double(o.new_tokens) / 2;
  const double bytes_per_step = weight_bytes + double(o.batch) * mean_context * kv_per_position;
  const double floor_seconds = bytes_per_step / (ceil.bandwidth_gbs * 1e9);
  const double step_seconds = decode_seconds / double(o.new_tokens);
  const double tokens_per_second = double(o.batch) / step_seconds;
  fmt::print("weights {:.1f} MB; KV cache {:.1f} MB ({} sequences x {} positions)\n", weight_bytes * 1e-6,
             double(session.kv_cache_bytes()) * 1e-6, o.batch, o.prompt + o.new_tokens);
  fmt::print("prefill   {} tokens x {}: {:.2f} ms per sequence = {:.1f} tok/s\n", o.prompt, o.batch,
             prefill_seconds * 1e3 / double(o.batch), double(o.prompt * o.batch) / prefill_seconds);
  fmt::print("decode    {} steps x batch {}: {:.3f} ms/step = {:.1f} tok/s\n", o.new_tokens, o.batch, step_seconds * 1e3,
             tokens_per_second);
  if (o.profile) {  // a second, profiled decode run: per-op synchronisation makes it slower
    Profiler profiler;
    session.reset(0);
    session.prefill(0, prompt);
    session.stream().profiler = &profiler;
    for (int64_t step = 0; step < std::min<int64_t>(o.new_tokens, 32); ++step) {
      const Tensor logits = session.decode(std::span(next).first(1));
      next[0] = greedy.sample(session.stream(), logits)[0];
    }
    session.stream().profiler = nullptr;
    fmt::print("per-op profile of {} decode steps (batch 1):\n{}", std::min<int64_t>(o.new_tokens, 32), profiler.report());
  }
  fmt::print("roofline  {:.1f} MB per step / {:.1f} GB/s = {:.3f} ms/step = {:.1f} tok/s; reached {:.0f}%\n",
             bytes_per_step * 1e-6, ceil.bandwidth_gbs, floor_seconds * 1e3, double(o.batch) / floor_seconds,
             floor_seconds / step_seconds * 100);
  return 0;
}

}  // namespace ding::bench
