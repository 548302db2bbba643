#include "model_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "../gpu_tuning.h"
#include "ceilings.h"
#include "ding/ding.h"
#include "ding/models/layers/block.h"
#include "ding/models/sampler.h"
#include "ding/models/session.h"
#include "ding/threads.h"

namespace ding::bench {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each named shape is its model's config.json as Hugging Face publishes it, parsed by the same
// code that reads a model folder. The GPT-2 family (Radford et al. 2019) differs only in layers,
// heads and width; its released files also carry dropout and task fields, which inference ignores.
struct NamedShape {
  const char* name;
  std::string config_json;
};

std::string gpt2_config(int layers, int heads, int width) {
  return fmt::format(R"({{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
  "n_layer": {}, "n_head": {}, "n_embd": {}, "n_ctx": 1024, "n_positions": 1024, "vocab_size": 50257,
  "layer_norm_epsilon": 1e-05, "initializer_range": 0.02, "bos_token_id": 50256, "eos_token_id": 50256}})",
                     layers, heads, width);
}

// meta-llama/Llama-3.2-1B: GQA (32 query heads over 8 KV heads), tied embeddings, llama3 rope
// scaling by 32 from an 8192-position original context.
const char* const kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// meta-llama/Llama-3.1-8B: GQA (32 over 8), a separate LM head, llama3 rope scaling by 8.
const char* const kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// allenai/OLMoE-1B-7B-0924: 64 experts of width 1024, top-8 unnormalised, in every one of 16 layers;
// q/k norms over whole projections, MHA.
const char* const kOlmoe1B7B = R"({
  "architectures": ["OlmoeForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "clip_qkv": null,
  "eos_token_id": 50279,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 1024,
  "max_position_embeddings": 4096,
  "model_type": "olmoe",
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts": 64,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 16,
  "num_key_value_heads": 16,
  "pad_token_id": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 50304
})";

// deepseek-ai/DeepSeek-V2-Lite: multi-head latent attention (no query bottleneck, a 512-element
// latent and a 64-dim rope key per token), a dense first layer, then 64 routed experts top-6 and 2
// shared in 26 layers; YaRN by 40 over a 4096-position original context.
const char* const kDeepseekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 100000,
  "eos_token_id": 100001,
  "first_k_dense_replace": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 10944,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408,
  "moe_layer_freq": 1,
  "n_group": 1,
  "n_routed_experts": 64,
  "n_shared_experts": 2,
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts_per_tok": 6,
  "num_hidden_layers": 27,
  "num_key_value_heads": 16,
  "q_lora_rank": null,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000,
  "routed_scaling_factor": 1.0,
  "scoring_func": "softmax",
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "greedy",
  "torch_dtype": "bfloat16",
  "v_head_dim": 128,
  "vocab_size": 102400
})";

// Qwen/Qwen3-Next-80B-A3B-Instruct's shape with 12 of its 48 layers (the same 3:1 pattern of Gated
// DeltaNet and gated attention layers; 160 GB of bf16 weights in all would not fit one GPU, a
// quarter does): 16 key and 32 value heads of 128 × 128 states, 16 query heads of 256 over 2 kv
// heads, a quarter of each head rotated, 512 experts top-10 with a gated shared expert.
const char* const kQwen3Next80B12L = R"({
  "architectures": ["Qwen3NextForCausalLM"],
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "full_attention_interval": 4,
  "head_dim": 256,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 5120,
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_value_head_dim": 128,
  "max_position_embeddings": 262144,
  "mlp_only_layers": [],
  "model_type": "qwen3_next",
  "moe_intermediate_size": 512,
  "norm_topk_prob": true,
  "num_attention_heads": 16,
  "num_experts": 512,
  "num_experts_per_tok": 10,
  "num_hidden_layers": 12,
  "num_key_value_heads": 2,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000000,
  "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 151936
})";

// The same model's Gated DeltaNet layers on their own, for their decode against their byte
// roofline (weights plus the recurrent state read and written): its 12 layers all linear attention,
// each with a dense MLP of 64, and a vocabulary of 2048, so the layers' own projections,
// convolution and state are nearly all a step reads.
std::string qwen3_next_gdn_config() {
  nlohmann::json c = nlohmann::json::parse(kQwen3Next80B12L);
  const int layers = c["num_hidden_layers"];
  c["layer_types"] = std::vector<std::string>(size_t(layers), "linear_attention");
  std::vector<int> all(static_cast<size_t>(layers));
  for (int i = 0; i < layers; ++i) all[size_t(i)] = i;
  c["mlp_only_layers"] = all;
  c["intermediate_size"] = 64;
  c["vocab_size"] = 2048;
  c["eos_token_id"] = 1;
  c.erase("full_attention_interval");
  return c.dump();
}

const std::vector<NamedShape>& named_shapes() {
  static const std::vector<NamedShape> shapes = {
      {"gpt2", gpt2_config(12, 12, 768)},          {"gpt2-medium", gpt2_config(24, 16, 1024)},
      {"gpt2-large", gpt2_config(36, 20, 1280)},   {"gpt2-xl", gpt2_config(48, 25, 1600)},
      {"llama-3.2-1b", kLlama32_1B},               {"llama-3.1-8b", kLlama31_8B},
      {"olmoe-1b-7b", kOlmoe1B7B},                 {"deepseek-v2-lite", kDeepseekV2Lite},
      {"qwen3-next-80b-a3b-12l", kQwen3Next80B12L},    {"qwen3-next-80b-a3b-gdn-12l", qwen3_next_gdn_config()},
  };
  return shapes;
}

ModelConfig named_shape(const std::string& name, int64_t positions) {
  for (const NamedShape& s : named_shapes())
    if (name == s.name) {
      ModelConfig c = ModelConfig::from_json_text(s.config_json, fmt::format("--shape {}", name));
      if (positions > 0) c.n_positions = positions;  // learned positions: the table's rows
      return c;
    }
  throw Error(ErrorCode::invalid_argument, fmt::format("--shape '{}': known shapes are {}", name, model_shape_names()));
}

// Weight bytes one decode step of `batch` sequences reads: every matrix once, but of the token
// embedding (when the LM head does not reuse it) and of a learned position table only one row
// per sequence, and of each mixture-of-experts layer only the experts chosen. The router's choices
// stay on the device; with random weights they are close to uniform, so the experts read are
// counted as the expected union of `batch` uniform draws of k of E: E·(1 − (1 − k/E)^batch)
// (k at batch 1, exactly).
struct StepWeights {
  double bytes;
  double experts_per_layer;  // read per mixture layer (0 without one)
};

StepWeights weight_bytes_per_step(const Model& model, int64_t batch) {
  const ModelConfig& c = model.config();
  const double element = double(dtype_size(model.dtype()));
  const double row = double(c.d_model) * element;
  double tables = 0;  // rows held in the weights but looked up, not streamed
  // The token embedding is a table unless the LM head is the same tensor (tied, and not quantized apart).
  const bool embedding_is_head = model.weights().lm_head.data == model.weights().token_embedding.data;
  if (!embedding_is_head) tables += double(c.vocab_size);
  if (c.positions == PositionKind::learned) tables += double(c.n_positions);
  const double lookups = double(batch) * ((embedding_is_head ? 0 : 1) + (c.positions == PositionKind::learned ? 1 : 0));
  double bytes = double(model.weight_bytes()) - (tables - lookups) * row;
  const double E = double(c.moe.experts), k = double(c.moe.route.k);
  const double chosen = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, double(batch))) : 0.0;
  // One routed expert's bytes as stored: its gate, up and down rows (8-bit ones with their f32 scales).
  auto expert_bytes = [&](const MoeWeights& m) {
    double b = 0;
    for (const Tensor* t : {&m.up_w, &m.down_w})
      b += double(t->nbytes()) + (ops::quantized_weight(t->dtype) ? 4.0 * double(t->dim(0)) : 0.0);
    return b / E;
  };
  bool any_moe = false;
  for (const LayerWeights& w : model.weights().layers)
    if (w.moe.up_w.defined()) bytes -= (E - chosen) * expert_bytes(w.moe), any_moe = true;
  return {bytes, any_moe ? chosen : 0.0};
}

void check_fits(const ModelBenchOptions& o, int64_t positions) {
  // The run decodes one untimed warm-up token besides the --new ones.
  if (o.prompt < 1 || o.new_tokens < 1 || o.batch < 1 || o.prompt + 1 + o.new_tokens > positions)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("--prompt {} + --new {} + 1 warm-up token must fit the {} positions (and be ≥ 1, batch ≥ 1)",
                            o.prompt, o.new_tokens, positions));
}

Model make_model(const ModelBenchOptions& o, Device& device) {
  LoadOptions load;
  load.dtype = parse_dtype(o.dtype);
  load.quantize = parse_quantize(o.quantize);
  load.quantize_lm_head = o.quantize_lm_head;
  if (!o.model_dir.empty()) return Model::load(o.model_dir, device, load);
  const ModelConfig config = named_shape(o.shape, o.positions);
  check_fits(o, config.n_positions);  // before drawing billions of random weights
  return Model::random(config, device, load, 1);
}

// "f16" or "f16 with i8 projections": what a model's weights are.
std::string weights_name(const Model& model) {
  return model.quantized() ? fmt::format("{} with {} projections", dtype_name(model.dtype()), dtype_name(*model.quantized()))
                           : std::string(dtype_name(model.dtype()));
}

// Every sequence of `session` reset and prefilled with the prompt, then the untimed warm-up decode
// step (on a GPU it records the step's graph, which every later step replays); returns the tokens
// the next step decodes.
std::vector<Token> start_decoding(Session& session, const std::vector<Token>& prompt, int64_t batch, Sampler& greedy) {
  for (int64_t b = 0; b < batch; ++b) {
    session.reset(b);
    session.prefill(b, prompt);
  }
  const std::vector<Token> last(static_cast<size_t>(batch), prompt.back());
  return greedy.sample(session.stream(), session.decode(last));
}

// The model's decode beside its unquantized twin's, one step of each in turn. A machine whose
// memory bandwidth wanders between runs (a shared host's can double from one run to the next:
// docs/PERFORMANCE.md) slows both alike within one run, so this ratio holds where the ratio of two
// separate runs does not.
void paired_decode(const ModelBenchOptions& o, Device& device, const Model& quantized, Session& session,
                   const SessionOptions& session_options, const std::vector<Token>& prompt) {
  ModelBenchOptions plain = o;
  plain.quantize.clear();
  plain.quantize_lm_head = false;
  const Model twin = make_model(plain, device);
  Session twin_session(twin, session_options);
  Sampler greedy({.temperature = 0});
  std::vector<Token> next = start_decoding(session, prompt, o.batch, greedy);
  std::vector<Token> twin_next = start_decoding(twin_session, prompt, o.batch, greedy);
  double seconds = 0, twin_seconds = 0;
  for (int64_t step = 0; step < o.new_tokens; ++step) {
    const double t0 = now_seconds();
    next = greedy.sample(session.stream(), session.decode(next));
    const double t1 = now_seconds();
    twin_next = greedy.sample(twin_session.stream(), twin_session.decode(twin_next));
    seconds += t1 - t0;
    twin_seconds += now_seconds() - t1;
  }
  const double steps = double(o.new_tokens);
  fmt::print("paired    {} steps of each, alternated: {} {:.3f} ms/step, {} {:.3f} ms/step: {:.2f}x\n", o.new_tokens,
             weights_name(twin), twin_seconds * 1e3 / steps, weights_name(quantized), seconds * 1e3 / steps,
             twin_seconds / seconds);
}

}  // namespace

DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  throw Error(ErrorCode::invalid_argument, fmt::format("--dtype '{}' is not f32, bf16 or f16", s));
}

std::optional<DType> parse_quantize(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s == "int8") return DType::i8;
  if (s == "fp8") return DType::f8e4m3;
  throw Error(ErrorCode::invalid_argument, fmt::format("--quantize '{}' is not int8 or fp8", s));
}

std::string model_shape_names() {
  std::string names;
  for (const NamedShape& s : named_shapes()) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

int run_model(const ModelBenchOptions& o) {
  if (o.paired && o.quantize.empty())
    throw Error(ErrorCode::invalid_argument, "--paired times a --quantize model beside the unquantized one: give --quantize int8 or fp8");
  Device& device = Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);
  Model model = make_model(o, device);
  const ModelConfig& c = model.config();
  check_fits(o, c.n_positions);
  fmt::print("ding-bench model: {} ({} layers, {} heads over {} kv heads, width {}, vocab {}), {}, backend {} — {}, "
             "{} CPU threads\n",
             o.model_dir.empty() ? o.shape + " shape, random weights" : o.model_dir, c.n_layer, c.n_head, c.n_kv_head,
             c.d_model, c.vocab_size, weights_name(model), device.caps().backend, device.caps().name, cpu_threads());
  const Ceilings ceil = measure_ceilings(device);
  fmt::print("ceiling (measured now): bandwidth {:.1f} GB/s ({})\n", ceil.bandwidth_gbs, ceil.bandwidth_how);

  // The cache holds the prompt, the warm-up step and the new tokens only, never the model's whole
  // context (131072 positions for Llama 3).
  const SessionOptions session_options{.max_batch = o.batch, .max_tokens = o.prompt + 1 + o.new_tokens,
                                       .prefill_chunk = o.prefill_chunk > 0 ? o.prefill_chunk : o.prompt, .graphs = o.graphs};
  // Skipped ops are left out of the session's recorded steps too (it records when it is made).
  for (const std::string& op : o.skip_ops)
    if (std::find(std::begin(ops::kOpNames), std::end(ops::kOpNames), op) == std::end(ops::kOpNames))
      throw Error(ErrorCode::invalid_argument, fmt::format("--skip-op {}: not an op of ops/op_list.h", op));
  struct SkipScope {  // the stream outlives this run: it skips nothing after it
    Stream& stream;
    ~SkipScope() { stream.skipped_ops = nullptr; }
  } skip_scope{device.default_stream()};
  if (!o.skip_ops.empty()) {
    device.default_stream().skipped_ops = &o.skip_ops;
    fmt::print("skipped ops (their outputs left as they were, results meaningless): {}\n", fmt::join(o.skip_ops, ", "));
  }
  Session session(model, session_options);
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
  // Decode: one warm-up step, untimed (on a GPU it records the step's graph, which every later
  // step replays), then the timed ones.
  next = greedy.sample(session.stream(), session.decode(next));
  const double t0 = now_seconds();
  for (int64_t step = 0; step < o.new_tokens; ++step) {
    const Tensor logits = session.decode(next);
    next = greedy.sample(session.stream(), logits);
  }
  const double decode_seconds = now_seconds() - t0;

  // Decode roofline: every step streams the weights once (weight_bytes_per_step) plus, for each
  // sequence, the K and V of the positions cached so far, their mean over the run (a position's K
  // and V are 2 × layers × kv heads × head dim values: GQA's few KV heads make them small), and
  // the linear layers' states, read and written once each.
  const StepWeights step_weights = weight_bytes_per_step(model, o.batch);
  const double weights_per_step = step_weights.bytes;
  const CacheSize cache = model_cache_size(c, model.dtype());
  const double kv_per_position = cache.per_token;
  const double mean_context = double(o.prompt + 1) + double(o.new_tokens) / 2;
  const double bytes_per_step =
      weights_per_step + double(o.batch) * (mean_context * kv_per_position + 2.0 * cache.per_sequence);
  const double floor_seconds = bytes_per_step / (ceil.bandwidth_gbs * 1e9);
  const double step_seconds = decode_seconds / double(o.new_tokens);
  const double tokens_per_second = double(o.batch) / step_seconds;
  fmt::print("weights {:.1f} MB ({:.1f} MB read per step{}); cache {:.1f} MB ({} sequences x ({} positions x {:.1f} KB{}))\n",
             double(model.weight_bytes()) * 1e-6, weights_per_step * 1e-6,
             step_weights.experts_per_layer > 0
                 ? fmt::format(", {:.1f} of {} experts per layer", step_weights.experts_per_layer, c.moe.experts)
                 : "",
             double(session.kv_cache_bytes()) * 1e-6, o.batch, session.max_tokens(), kv_per_position * 1e-3,
             cache.per_sequence > 0 ? fmt::format(" + {:.1f} KB of states", cache.per_sequence * 1e-3) : "");
  fmt::print("prefill   {} tokens x {}: {:.2f} ms per sequence = {:.1f} tok/s{}\n", o.prompt, o.batch,
             prefill_seconds * 1e3 / double(o.batch), double(o.prompt * o.batch) / prefill_seconds,
             o.prefill_chunk > 0 && o.prefill_chunk < o.prompt ? fmt::format(" (chunks of {})", o.prefill_chunk) : "");
  fmt::print("decode    {} steps x batch {}: {:.3f} ms/step = {:.1f} tok/s\n", o.new_tokens, o.batch, step_seconds * 1e3,
             tokens_per_second);
  if (o.paired) paired_decode(o, device, model, session, session_options, prompt);
  if (o.profile) {  // a second, profiled run: per-op synchronisation makes it slower
    Profiler profiler(o.profile_by_bytes ? Profiler::Grouping::op_and_bytes : Profiler::Grouping::op);
    session.stream().profiler = &profiler;
    for (int64_t b = 0; b < o.batch; ++b) {
      session.reset(b);
      session.prefill(b, prompt);
    }
    fmt::print("per-op profile of the prefill ({} tokens x {}):\n{}", o.prompt, o.batch, profiler.report());
    profiler.clear();
    next.assign(next.size(), prompt.back());
    const int64_t profiled_steps = std::min<int64_t>(o.new_tokens, 32);
    const double profile_t0 = now_seconds();
    for (int64_t step = 0; step < profiled_steps; ++step) {
      const Tensor logits = session.decode(next);
      next = greedy.sample(session.stream(), logits);
    }
    const double profiled_seconds = now_seconds() - profile_t0;
    session.stream().profiler = nullptr;
    double op_seconds = 0;
    for (const auto& [op, stats] : profiler.stats()) op_seconds += stats.seconds;
    // What the ops do not account for: the host's work between them (argument checks, the step's
    // bookkeeping, host-side sampling).
    fmt::print("per-op profile of {} decode steps (batch {}): {:.3f} ms/step, {:.3f} in ops, {:.3f} between them\n{}",
               profiled_steps, o.batch, profiled_seconds * 1e3 / double(profiled_steps),
               op_seconds * 1e3 / double(profiled_steps), (profiled_seconds - op_seconds) * 1e3 / double(profiled_steps),
               profiler.report());
  }
  fmt::print("roofline  {:.1f} MB per step / {:.1f} GB/s = {:.3f} ms/step = {:.1f} tok/s; reached {:.0f}%\n",
             bytes_per_step * 1e-6, ceil.bandwidth_gbs, floor_seconds * 1e3, double(o.batch) / floor_seconds,
             floor_seconds / step_seconds * 100);
  return 0;
}

}  // namespace ding::bench
