// DeepSeek-V2 (DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient
// Mixture-of-Experts Language Model"), as transformers' modeling_deepseek_v2.py defines it:
//   x = x + W_o · mla(h),                                          h = rms_norm(x)   (§2.1)
//   x = x + Σ_{e ∈ top-k} s·p_e · expert_e(h) + shared(h),         h = rms_norm(x)   (§2.2)
// Multi-head latent attention (models/layers/latent_attention.cpp) in every layer; the
// feed-forward is dense SwiGLU in the first first_k_dense_replace layers and a mixture of
// n_routed_experts SwiGLU experts (plus n_shared_experts always-on ones) after. The router takes
// softmax scores, keeps the top-k (greedy) or the top-k of the topk_group best of n_group expert
// groups (group_limited_greedy), never renormalises them (transformers' DeepseekV2TopkRouter
// ignores norm_topk_prob) and scales them by routed_scaling_factor (s).
#include <fmt/format.h>

#include <cmath>

#include "ding/models/families/llama_parts.h"

namespace ding {

namespace {

// transformers' DeepseekV2Config defaults for the keys a config.json may leave out.
constexpr struct {
  int64_t q_lora_rank = 1536, kv_lora_rank = 512, rope_dim = 64, nope_dim = 128, value_dim = 128;
  int64_t routed_experts = 64, shared_experts = 2, moe_d_ff = 1407;
} kDefaults;

void parse_mla(const ConfigFields& f, ModelConfig& c) {
  MlaSpec& m = c.mla;
  // Absent keys take transformers' DeepseekV2Config defaults (kDefaults); q_lora_rank: null is a
  // query without the bottleneck (V2-Lite), absent is the default bottleneck.
  m.q_lora_rank = f.is_null("q_lora_rank") ? 0 : f.positive_int_or("q_lora_rank", kDefaults.q_lora_rank);
  m.kv_lora_rank = f.positive_int_or("kv_lora_rank", kDefaults.kv_lora_rank);
  m.rope_dim = f.positive_int_or("qk_rope_head_dim", kDefaults.rope_dim);
  m.nope_dim = f.positive_int_or("qk_nope_head_dim", kDefaults.nope_dim);
  m.value_dim = f.positive_int_or("v_head_dim", kDefaults.value_dim);
  if (m.rope_dim % 2 != 0) f.fail(fmt::format("qk_rope_head_dim = {} is odd; rotary positions rotate pairs", m.rope_dim));
  // transformers' DeepseekV2Attention: (Dn + Dr)^-½, times mscale(factor, mscale_all_dim)² when
  // the rope's type is not default and its parameters set mscale_all_dim, whatever that type is
  // (dynamic too, whose frequencies ding keeps at the default base).
  double scale = 1.0 / std::sqrt(double(m.nope_dim + m.rope_dim));
  if (const char* key = rope_parameters_key(f)) {
    const ConfigFields s = f.object(key);
    const double mscale_all_dim = s.optional_number("mscale_all_dim").value_or(0.0);
    if (s.string_or("rope_type", s.string_or("type", "default")) != "default" && mscale_all_dim != 0) {
      // YaRN's factor may be left out (parse_rope derives it); the other types require it.
      const ops::RopeScaling& r = c.rope_scaling;
      const double factor = r.kind == ops::RopeScalingKind::yarn ? r.factor : s.positive_number("factor");
      scale *= std::pow(ops::yarn_mscale(factor, mscale_all_dim), 2);
    }
  }
  m.softmax_scale = float(scale);
}

void parse_moe(const ConfigFields& f, ModelConfig& c) {
  c.layers.assign(size_t(c.n_layer), LayerSpec{.mixer = MixerKind::latent_attention});
  // n_routed_experts: null is a dense model (DeepSeek's meaning; transformers cannot build one);
  // absent, transformers' default mixture. Likewise n_shared_experts: null is none.
  if (f.is_null("n_routed_experts")) return;  // every layer dense
  MoeSpec& moe = c.moe;
  moe.experts = f.positive_int_or("n_routed_experts", kDefaults.routed_experts);
  moe.d_ff = f.positive_int_or("moe_intermediate_size", kDefaults.moe_d_ff);
  moe.shared_d_ff = moe.d_ff * (f.is_null("n_shared_experts") ? 0 : f.non_negative_int_or("n_shared_experts", kDefaults.shared_experts));
  const std::string scoring = f.string_or("scoring_func", "softmax");
  if (scoring != "softmax") f.fail(fmt::format("scoring_func \"{}\" is not supported (DeepSeek-V2 scores by softmax)", scoring));
  moe.route = {.k = f.positive_int("num_experts_per_tok"), .scoring = ops::MoeScoring::softmax, .renormalize = false,
               .routed_scaling = float(f.positive_number_or("routed_scaling_factor", 1.0))};
  if (moe.route.k > moe.experts)
    f.fail(fmt::format("num_experts_per_tok = {} exceeds n_routed_experts = {}", moe.route.k, moe.experts));
  const std::string method = f.string_or("topk_method", "greedy");
  if (method == "group_limited_greedy") {
    moe.route.groups = f.positive_int("n_group");
    moe.route.top_groups = f.positive_int("topk_group");
    if (moe.experts % moe.route.groups != 0)
      f.fail(fmt::format("n_routed_experts = {} is not divisible by n_group = {}", moe.experts, moe.route.groups));
    if (moe.route.top_groups > moe.route.groups)
      f.fail(fmt::format("topk_group = {} exceeds n_group = {}", moe.route.top_groups, moe.route.groups));
    if (moe.route.k > moe.route.top_groups * (moe.experts / moe.route.groups))
      f.fail(fmt::format("num_experts_per_tok = {} exceeds the {} experts of the topk_group = {} groups kept", moe.route.k,
                         moe.route.top_groups * (moe.experts / moe.route.groups), moe.route.top_groups));
  } else if (method != "greedy") {
    f.fail(fmt::format("topk_method \"{}\" is not supported (DeepSeek-V2 has greedy and group_limited_greedy)", method));
  }
  // transformers makes layer l a mixture when l ≥ first_k_dense_replace; DeepSeek's own code also
  // asks l % moe_layer_freq = 0. They agree at the published moe_layer_freq = 1 only.
  const int64_t first_moe = f.non_negative_int_or("first_k_dense_replace", 0);
  if (const int64_t freq = f.positive_int_or("moe_layer_freq", 1); freq != 1)
    f.fail(fmt::format("moe_layer_freq = {} is not supported (transformers ignores it; only 1 means the same to both "
                       "definitions)", freq));
  for (int64_t l = first_moe; l < c.n_layer; ++l) c.layers[size_t(l)].moe = true;
}

class DeepseekV2 final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"deepseek_v2"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    c.d_model = f.positive_int("hidden_size");
    c.n_layer = f.layer_count("num_hidden_layers");
    c.n_head = f.positive_int("num_attention_heads");
    c.n_kv_head = c.n_head;  // unused: latent attention has one latent per token, not kv heads
    c.n_positions = f.positive_int_or("max_position_embeddings", 2048);
    c.vocab_size = f.positive_int("vocab_size");
    c.norm = NormKind::rms_norm;
    c.norm_eps = f.positive_float_or("rms_norm_eps", config_defaults(c.model_type).rms_norm_eps);
    const std::string act = f.string_or("hidden_act", "silu");
    if (act != "silu") f.fail(fmt::format("hidden_act \"{}\" is not supported (deepseek_v2 uses silu)", act));
    if (f.boolean_or("attention_bias", false)) f.fail("attention_bias = true is not supported for deepseek_v2");
    if (f.boolean_or("mlp_bias", false)) f.fail("mlp_bias = true is not supported for deepseek_v2");
    c.positions = PositionKind::rope;
    parse_rope(f, c);
    parse_mla(f, c);
    c.d_head = c.mla.nope_dim + c.mla.rope_dim;
    c.rotary_dim = c.mla.rope_dim;
    c.ffn = FfnKind::gated;
    c.activation = ops::Activation::swiglu;
    c.d_ff = f.positive_int("intermediate_size");
    c.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
    parse_moe(f, c);
    const std::vector<int32_t> bos = f.token_list("bos_token_id");
    c.bos_token = bos.empty() ? -1 : bos[0];
    c.eos_tokens = f.token_list("eos_token_id");
  }

  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, V = c.vocab_size, H = c.n_head;
    const MlaSpec& m = c.mla;
    WeightMap map = llama_weight_map(files);
    map.matrix(&w.token_embedding, "embed_tokens.weight", V, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      LayerWeights& layer = w.layers[size_t(l)];
      const std::string p = fmt::format("layers.{}.", l), at = p + "self_attn.";
      LatentAttentionWeights& a = layer.latent;
      map.vector(&a.norm_w, p + "input_layernorm.weight", C, WeightInit::ones);
      const int64_t q_rows = H * (m.nope_dim + m.rope_dim);
      const bool bottleneck = m.q_lora_rank > 0;
      const std::string in_names[] = {at + (bottleneck ? "q_a_proj.weight" : "q_proj.weight"),
                                      at + "kv_a_proj_with_mqa.weight"};
      const int64_t in_rows[] = {bottleneck ? m.q_lora_rank : q_rows, m.kv_lora_rank + m.rope_dim};
      map.stacked(&a.in_w, at + (bottleneck ? "q_a_kv_a_proj.weight" : "q_kv_a_proj.weight"), in_names, in_rows, C);
      if (bottleneck) {
        map.vector(&a.q_a_norm_w, at + "q_a_layernorm.weight", m.q_lora_rank, WeightInit::ones);
        map.matrix(&a.q_b_w, at + "q_b_proj.weight", q_rows, m.q_lora_rank);
      }
      map.vector(&a.kv_a_norm_w, at + "kv_a_layernorm.weight", m.kv_lora_rank, WeightInit::ones);
      map.matrix(&a.kv_b_w, at + "kv_b_proj.weight", H * (m.nope_dim + m.value_dim), m.kv_lora_rank);
      map.matrix(&a.out_w, at + "o_proj.weight", C, H * m.value_dim);
      if (c.layers[size_t(l)].moe) {
        moe_weights(map, c, l, layer.moe);
      } else {
        FeedForwardWeights& f = layer.ffn;
        map.vector(&f.norm_w, p + "post_attention_layernorm.weight", C, WeightInit::ones);
        gated_ffn_weights(map, c, p + "mlp.", c.d_ff, &f.up_w, &f.down_w);
      }
    }
    map.vector(&w.final_norm_w, "norm.weight", C, WeightInit::ones);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    latent_attention(step, w.latent, cache);  // x = x + W_o · mla(rms_norm(x))
    if (step.config->layers[size_t(step.layer)].moe)
      mixture_of_experts(step, w.moe);  // x = x + Σ s·p_e · expert_e(h) + shared(h), h = rms_norm(x)
    else
      feed_forward(step, w.ffn);  // x = x + down(silu(gate(h)) ⊙ up(h)), h = rms_norm(x)
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    bool dense = false, moe = false;
    for (const LayerSpec& l : c.layers) (l.moe ? moe : dense) = true;
    return ops_of({latent_attention_ops(c), dense ? feed_forward_ops(c) : std::vector<std::string_view>{},
                   moe ? mixture_of_experts_ops(c) : std::vector<std::string_view>{}});
  }

 private:
  // The router (mlp.gate), the routed experts' gate/up/down stacked expert after expert, and the
  // shared experts as one SwiGLU FFN of n_shared_experts × moe_intermediate_size.
  static void moe_weights(WeightMap& map, const ModelConfig& c, int64_t layer, MoeWeights& m) {
    moe_layer_weights(map, c, layer, "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight", m);
    if (c.moe.shared_d_ff > 0)
      gated_ffn_weights(map, c, fmt::format("layers.{}.mlp.shared_experts.", layer), c.moe.shared_d_ff, &m.shared_up_w,
                        &m.shared_down_w);
  }
};

}  // namespace

const Family& deepseek_v2_family() {
  static const DeepseekV2 family;
  return family;
}

}  // namespace ding
