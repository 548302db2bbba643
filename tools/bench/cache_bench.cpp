#include "cache_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "../gpu_tuning.h"
#include "ding/ding.h"
#include "ding/models/layers/block.h"
#include "ding/models/session.h"
#include "model_bench.h"

namespace ding::bench {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Variant {
  std::string name, detail;
  ModelConfig config;
};

// The four attention kinds at one width and depth; heads of 128 (width / 16 heads for the default
// width 2048), the FFN 5.34 × width (DeepSeek-V2-Lite's 10944 at 2048), DeepSeek's vocabulary;
// then linear attention (Gated DeltaNet, Qwen3-Next's: value heads of 128, half as many key heads)
// in every layer, and Qwen3-Next's hybrid of three linear layers to one GQA layer.
std::vector<Variant> variants(const CacheBenchOptions& o, int64_t positions) {
  const int64_t heads = std::max<int64_t>(1, o.width / 128), ffn = o.width * 10944 / 2048;
  const auto llama = [&](int64_t kv_heads) {
    return ModelConfig::from_json_text(
        fmt::format(R"({{"model_type": "llama", "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {},
            "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": 128, "vocab_size": 102400,
            "max_position_embeddings": {}, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false}})",
                    o.width, ffn, o.layers, heads, kv_heads, positions),
        "ding-bench cache");
  };
  const ModelConfig mla = ModelConfig::from_json_text(
      fmt::format(R"({{"model_type": "deepseek_v2", "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {},
          "num_attention_heads": {}, "q_lora_rank": null, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
          "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": null, "vocab_size": 102400, "max_position_embeddings": {},
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false}})",
                  o.width, ffn, o.layers, heads, positions),
      "ding-bench cache");
  const auto qwen3_next = [&](int64_t full_every) {
    return ModelConfig::from_json_text(
        fmt::format(R"({{"model_type": "qwen3_next", "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {},
            "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": 128, "full_attention_interval": {},
            "linear_num_key_heads": {}, "linear_num_value_heads": {}, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "num_experts": 0, "vocab_size": 102400, "max_position_embeddings": {},
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false}})",
                    o.width, ffn, o.layers, heads, std::max<int64_t>(1, heads / 4), full_every,
                    std::max<int64_t>(1, heads / 2), heads, positions),
        "ding-bench cache");
  };
  return {{"MHA", fmt::format("{} kv heads x 128", heads), llama(heads)},
          {"GQA", fmt::format("{} kv heads x 128", std::max<int64_t>(1, heads / 4)), llama(std::max<int64_t>(1, heads / 4))},
          {"MQA", "1 kv head x 128", llama(1)},
          {"MLA", "latent 512 + rope 64", mla},
          {"GDN", fmt::format("{} states 128 x 128", heads), qwen3_next(o.layers + 1)},
          {"3:1", "GDN x3, GQA x1", qwen3_next(4)}};
}

// Batch-1 decode tok/s after a prefill of `context` random tokens: `steps` greedy steps timed.
double decode_tokens_per_second(const Model& model, int64_t context, int64_t steps) {
  Session session(model, {.max_batch = 1, .max_tokens = context + steps + 1, .prefill_chunk = std::min<int64_t>(context, 4096)});
  std::mt19937 rng(11);
  std::uniform_int_distribution<Token> any_token(0, Token(model.config().vocab_size - 2));
  std::vector<Token> prompt(static_cast<size_t>(context));
  for (Token& t : prompt) t = any_token(rng);
  session.prefill(0, prompt);
  std::vector<Token> next = {prompt.back()};
  session.decode(next);  // records the step (a graph) before the timing
  session.stream().synchronize();
  const double t0 = now_seconds();
  for (int64_t i = 0; i < steps; ++i) session.decode(next);
  session.stream().synchronize();
  return double(steps) / (now_seconds() - t0);
}

}  // namespace

int run_cache(const CacheBenchOptions& o) {
  if (o.contexts.empty()) throw Error(ErrorCode::invalid_argument, "--contexts: give at least one context length");
  Device& device = Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);
  const DType dtype = parse_dtype(o.dtype);
  const int64_t longest = *std::max_element(o.contexts.begin(), o.contexts.end()) + o.steps + 1;
  const std::vector<Variant> all = variants(o, longest);
  fmt::print("ding-bench cache: width {}, {} layers, {} heads, {}, backend {} — {}; decode batch 1, {} steps timed after a "
             "prefill of each context\n",
             o.width, o.layers, all[0].config.n_head, dtype_name(dtype), device.caps().backend, device.caps().name, o.steps);
  std::string header = fmt::format("{:<5} {:<22} {:>12} {:>14}", "kind", "cache of", "bytes/token", "bytes/sequence");
  for (int64_t ctx : o.contexts) header += fmt::format(" {:>14} {:>10}", fmt::format("MB at {}", ctx), "tok/s");
  fmt::print("{}\n", header);
  for (const Variant& v : all) {
    const CacheSize size = model_cache_size(v.config, dtype);
    std::string line = fmt::format("{:<5} {:<22} {:>12.0f} {:>14.0f}", v.name, v.detail, size.per_token, size.per_sequence);
    const Model model = Model::random(v.config, device, {.dtype = dtype}, 3);
    for (int64_t ctx : o.contexts)
      line += fmt::format(" {:>14.1f} {:>10.1f}", (size.per_sequence + size.per_token * double(ctx)) * 1e-6,
                          decode_tokens_per_second(model, ctx, o.steps));
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace ding::bench
