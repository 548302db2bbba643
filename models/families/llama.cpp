// Llama (Touvron et al. 2023) and the families that share its block: Mistral (sliding-window
// attention) and Qwen2 (q/k/v biases, per-layer windows). RMSNorm, rotary positions with
// grouped KV heads (GQA/MQA by num_key_value_heads), SwiGLU feed-forward:
//   x = x + W_o · attn(rope(W_q h), rope(W_k h), W_v h),   h = rms_norm(x)
//   x = x + W_down · (silu(W_gate h) ⊙ W_up h),             h = rms_norm(x)
// Configs as transformers 4 writes them (rope_theta, rope_scaling) and as transformers 5 does
// (rope_parameters) both load.
#include <fmt/format.h>

#include <string_view>

#include "ding/models/families/llama_parts.h"

namespace ding {

ConfigDefaults config_defaults(const std::string& model_type) {
  if (model_type == "mistral") return {.max_position_embeddings = 4096 * 32};
  if (model_type == "qwen2") return {.max_position_embeddings = 32768};
  if (model_type == "mixtral") return {.rope_theta = 1e6, .rms_norm_eps = 1e-5f, .max_position_embeddings = 4096 * 32};
  if (model_type == "olmoe") return {.rms_norm_eps = 1e-5f, .max_position_embeddings = 4096};
  return {};
}

const char* rope_parameters_key(const ConfigFields& f) {
  // An empty rope_scaling object is falsy to transformers 5's `or`, as null is.
  if (f.has("rope_scaling") && !(f.at("rope_scaling").is_object() && f.at("rope_scaling").empty())) return "rope_scaling";
  return f.has("rope_parameters") ? "rope_parameters" : nullptr;
}

// The rotary base and its scaling: transformers 5's rope_parameters, or transformers 4's
// rope_theta beside rope_scaling. Scalings ding does not implement are refused by name.
void parse_rope(const ConfigFields& f, ModelConfig& c) {
  const char* key = rope_parameters_key(f);
  const bool v5 = key && std::string_view(key) == "rope_parameters";
  if (v5 && f.at("rope_parameters").is_object() && !f.at("rope_parameters").contains("rope_type") &&
      !f.at("rope_parameters").contains("rope_theta"))
    f.fail("rope_parameters names neither rope_type nor rope_theta (per-layer-type parameters are not supported)");
  const double theta = f.positive_number_or("rope_theta", config_defaults(c.model_type).rope_theta);
  c.rope_theta = v5 ? f.object("rope_parameters").positive_number_or("rope_theta", theta) : theta;
  if (!key) return;
  const ConfigFields s = f.object(key);
  const std::string type = s.string_or("rope_type", s.string_or("type", "default"));
  ops::RopeScaling& r = c.rope_scaling;
  // The context the model was trained for, where a scaling needs it: in the scaling's own
  // parameters, else beside them at the top (as transformers' standardisation moves it), else the
  // model's whole context.
  auto original_max_position = [&] {
    return s.positive_int_or("original_max_position_embeddings",
                             f.positive_int_or("original_max_position_embeddings", c.n_positions));
  };
  if (type == "default") {
    r.kind = ops::RopeScalingKind::none;
  } else if (type == "dynamic") {
    // Dynamic NTK: base·(factor·T/max − (factor − 1))^(R/(R−2)) at T = max(sequence length,
    // max_position_embeddings), which is the default base while T ≤ max_position_embeddings: ding
    // runs such a model that far and refuses longer contexts (Session).
    s.positive_number("factor");
    r.kind = ops::RopeScalingKind::none;
    c.context_bounded = true;
  } else if (type == "linear") {
    r.kind = ops::RopeScalingKind::linear;
    r.factor = s.positive_number("factor");
  } else if (type == "llama3") {
    r.kind = ops::RopeScalingKind::llama3;
    r.factor = s.positive_number("factor");
    r.low_freq_factor = s.positive_number("low_freq_factor");
    r.high_freq_factor = s.positive_number("high_freq_factor");
    r.original_max_position = original_max_position();
    if (!(r.high_freq_factor > r.low_freq_factor))
      s.fail(fmt::format("high_freq_factor ({}) must exceed low_freq_factor ({})", r.high_freq_factor, r.low_freq_factor));
  } else if (type == "yarn") {
    r.kind = ops::RopeScalingKind::yarn;
    r.original_max_position = original_max_position();
    // No factor: the context's growth over the original (transformers' DeepSeek-V3 note).
    r.factor = s.has("factor") ? s.positive_number("factor") : double(c.n_positions) / double(r.original_max_position);
    r.beta_fast = s.positive_number_or("beta_fast", 32.0);
    r.beta_slow = s.positive_number_or("beta_slow", 1.0);
    r.mscale = s.optional_number("mscale").value_or(0.0);
    r.mscale_all_dim = s.optional_number("mscale_all_dim").value_or(0.0);
    r.attention_factor = s.has("attention_factor") ? s.positive_number("attention_factor") : 0.0;
    r.truncate = s.boolean_or("truncate", true);
    if (!(r.beta_fast > r.beta_slow))
      s.fail(fmt::format("beta_fast ({}) must exceed beta_slow ({})", r.beta_fast, r.beta_slow));
  } else {
    s.fail(fmt::format("rope type \"{}\" is not supported (ding has default, dynamic, linear, llama3 and yarn)", type));
  }
}

void parse_windows(const ConfigFields& f, ModelConfig& c) {
  const std::string& type = c.model_type;
  // Mistral's window applies to every layer (its config class defaults it to 4096; null turns it
  // off); Mixtral's likewise, with no window by default. Qwen2's needs use_sliding_window and
  // covers layers from max_window_layers on. layer_types, where given, picks the windowed layers of
  // Mistral and Qwen2: transformers' AutoConfig loads a mistral config that has them as ministral,
  // whose layers alternate by them, and Qwen2Config has them. MixtralConfig and OlmoeConfig have
  // no layer_types, and their models window every layer alike whatever the key says.
  int64_t window = 0;
  if (type == "mistral") window = f.is_null("sliding_window") ? 0 : f.positive_int_or("sliding_window", 4096);
  if (type == "mixtral" && f.has("sliding_window") && !f.is_null("sliding_window"))
    window = f.positive_int("sliding_window");
  if (type == "qwen2" && f.boolean_or("use_sliding_window", false))
    window = f.is_null("sliding_window") ? 0 : f.positive_int_or("sliding_window", 4096);
  c.layers.assign(size_t(c.n_layer), LayerSpec{});
  const bool typed_layers = type == "mistral" || type == "qwen2";
  const std::vector<std::string> layer_types = typed_layers ? f.string_list("layer_types") : std::vector<std::string>{};
  if (!layer_types.empty()) {
    if (int64_t(layer_types.size()) != c.n_layer)
      f.fail(fmt::format("layer_types lists {} layers, num_hidden_layers is {}", layer_types.size(), c.n_layer));
    for (size_t l = 0; l < layer_types.size(); ++l) {
      if (layer_types[l] == "sliding_attention") c.layers[l].window = window;
      else if (layer_types[l] != "full_attention")
        f.fail(fmt::format("layer_types[{}] = \"{}\" is not supported for {} (full_attention, sliding_attention)", l,
                           layer_types[l], type));
    }
    return;
  }
  const int64_t first_windowed = type == "qwen2" ? f.non_negative_int_or("max_window_layers", 28) : 0;
  for (int64_t l = first_windowed; l < c.n_layer; ++l) c.layers[size_t(l)].window = window;
}

void parse_llama_attention(const ConfigFields& f, ModelConfig& c) {
  const bool qwen2 = c.model_type == "qwen2";
  c.d_model = f.positive_int("hidden_size");
  c.n_layer = f.layer_count("num_hidden_layers");
  c.n_head = f.positive_int("num_attention_heads");
  c.n_kv_head = f.positive_int_or("num_key_value_heads", c.n_head);
  if (c.n_head % c.n_kv_head != 0)
    f.fail(fmt::format("num_attention_heads = {} is not a multiple of num_key_value_heads = {}", c.n_head, c.n_kv_head));
  if (f.has("head_dim") && !f.is_null("head_dim")) {
    c.d_head = f.positive_int("head_dim");
  } else {
    if (c.d_model % c.n_head != 0)
      f.fail(fmt::format("hidden_size = {} is not divisible by num_attention_heads = {} (and no head_dim)", c.d_model, c.n_head));
    c.d_head = c.d_model / c.n_head;
  }
  if (c.d_head % 2 != 0) f.fail(fmt::format("head_dim = {} is odd; rotary positions rotate pairs", c.d_head));
  c.n_positions = f.positive_int_or("max_position_embeddings", config_defaults(c.model_type).max_position_embeddings);
  c.vocab_size = f.positive_int("vocab_size");
  c.norm = NormKind::rms_norm;
  c.norm_eps = f.positive_float_or("rms_norm_eps", config_defaults(c.model_type).rms_norm_eps);
  c.ffn_fn = parse_activation(f, "hidden_act", "silu");
  c.positions = PositionKind::rope;
  parse_rope(f, c);
  // Biases as transformers builds each family: Llama's (and OLMoE's) by attention_bias, Qwen2's
  // q/k/v always, Mistral's and Mixtral's never (their layers ignore the key).
  const bool attention_bias = (c.model_type == "llama" || c.model_type == "olmoe") && f.boolean_or("attention_bias", false);
  c.qkv_bias = qwen2 || attention_bias;
  c.out_bias = attention_bias;
  c.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  parse_windows(f, c);
  const std::vector<int32_t> bos = f.token_list("bos_token_id");
  c.bos_token = bos.empty() ? -1 : bos[0];
  c.eos_tokens = f.token_list("eos_token_id");
}

int64_t expert_count(const ConfigFields& f, int64_t fallback) {
  const int64_t local = f.positive_int_or("num_local_experts", 0), experts = f.positive_int_or("num_experts", 0);
  if (local > 0 && experts > 0 && local != experts)
    f.fail(fmt::format("num_local_experts = {} and num_experts = {} disagree (transformers reads each as the other's alias)",
                       local, experts));
  return local > 0 ? local : experts > 0 ? experts : fallback;
}

void require_silu_experts(const ConfigFields& f, const ModelConfig& c) {
  if (c.ffn_fn != ops::ActivationFn::silu)
    f.fail(fmt::format("hidden_act \"{}\" is not supported ({}'s experts run silu)", f.string_or("hidden_act", ""),
                       c.model_type));
}

void llama_attention_weights(WeightMap& map, const ModelConfig& c, int64_t layer, AttentionWeights& a) {
  const int64_t C = c.d_model, q = c.n_head * c.d_head, kv = c.n_kv_head * c.d_head;
  const std::string p = fmt::format("layers.{}.", layer), at = p + "self_attn.";
  map.vector(&a.norm_w, p + "input_layernorm.weight", C, WeightInit::ones);
  const std::string qkv[] = {at + "q_proj.weight", at + "k_proj.weight", at + "v_proj.weight"};
  const int64_t qkv_rows[] = {q, kv, kv};
  map.stacked(&a.qkv_w, at + "qkv_proj.weight", qkv, qkv_rows, C);
  if (c.qkv_bias) {
    const std::string biases[] = {at + "q_proj.bias", at + "k_proj.bias", at + "v_proj.bias"};
    map.stacked_vector(&a.qkv_b, at + "qkv_proj.bias", biases, qkv_rows);
  }
  map.matrix(&a.out_w, at + "o_proj.weight", C, q);
  if (c.out_bias) map.vector(&a.out_b, at + "o_proj.bias", C, WeightInit::zeros);
}

void gated_ffn_weights(WeightMap& map, const ModelConfig& c, const std::string& prefix, int64_t F, Tensor* up, Tensor* down) {
  const std::string gate_up[] = {prefix + "gate_proj.weight", prefix + "up_proj.weight"};
  const int64_t rows[] = {F, F};
  map.stacked(up, prefix + "gate_up_proj.weight", gate_up, rows, c.d_model);
  map.matrix(down, prefix + "down_proj.weight", c.d_model, F);
}

void moe_layer_weights(WeightMap& map, const ModelConfig& c, int64_t layer, const char* moe, const char* gate,
                       const char* up, const char* down, MoeWeights& m, float norm_offset) {
  const int64_t C = c.d_model, F = c.moe.d_ff, E = c.moe.experts;
  const std::string p = fmt::format("layers.{}.", layer), prefix = p + moe;
  map.vector(&m.norm_w, p + "post_attention_layernorm.weight", C, WeightInit::ones, norm_offset);
  map.matrix(&m.router_w, prefix + "gate.weight", E, C);
  std::vector<std::string> up_names, down_names;
  for (int64_t e = 0; e < E; ++e) {
    const std::string expert = fmt::format("{}experts.{}.", prefix, e);
    up_names.push_back(expert + gate);
    up_names.push_back(expert + up);
    down_names.push_back(expert + down);
  }
  const std::vector<int64_t> up_rows(size_t(2 * E), F), down_rows(size_t(E), C);
  map.stacked(&m.up_w, prefix + "experts.gate_up_proj", up_names, up_rows, C);
  map.stacked(&m.down_w, prefix + "experts.down_proj", down_names, down_rows, F);
}

WeightMap llama_weight_map(const WeightFiles* files) {
  return WeightMap(files, files && files->has("model.embed_tokens.weight") ? "model." : "");
}

namespace {

class Llama final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"llama", "mistral", "qwen2"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    parse_llama_attention(f, c);
    c.d_ff = f.positive_int("intermediate_size");
    c.ffn = FfnKind::gated;
    c.activation = ops::Activation::swiglu;
    c.ffn_bias = c.model_type == "llama" && f.boolean_or("mlp_bias", false);  // Mistral's and Qwen2's MLPs have none
  }

  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size;
    WeightMap map = llama_weight_map(files);
    map.matrix(&w.token_embedding, "embed_tokens.weight", V, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      llama_attention_weights(map, c, l, w.layers[size_t(l)].attention);
      FeedForwardWeights& m = w.layers[size_t(l)].ffn;
      const std::string p = fmt::format("layers.{}.", l), mlp = p + "mlp.";
      map.vector(&m.norm_w, p + "post_attention_layernorm.weight", C, WeightInit::ones);
      gated_ffn_weights(map, c, mlp, F, &m.up_w, &m.down_w);
      if (c.ffn_bias) {
        const int64_t gate_up_rows[] = {F, F};
        const std::string biases[] = {mlp + "gate_proj.bias", mlp + "up_proj.bias"};
        map.stacked_vector(&m.up_b, mlp + "gate_up_proj.bias", biases, gate_up_rows);
        map.vector(&m.down_b, mlp + "down_proj.bias", C, WeightInit::zeros);
      }
    }
    map.vector(&w.final_norm_w, "norm.weight", C, WeightInit::ones);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    self_attention(step, w.attention, cache);  // x = x + attn(rms_norm(x)), rotary q and k
    feed_forward(step, w.ffn);                 // x = x + down(silu(gate(h)) ⊙ up(h)), h = rms_norm(x)
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    return ops_of({self_attention_ops(c), feed_forward_ops(c)});
  }
};

}  // namespace

const Family& llama_family() {
  static const Llama family;
  return family;
}

}  // namespace ding
