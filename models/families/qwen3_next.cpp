// Qwen3-Next (Qwen team 2025), as transformers' modeling_qwen3_next.py defines it: a hybrid of
// Gated DeltaNet layers (linear attention, models/layers/linear_attention.cpp) and gated full
// attention, as layer_types lists them (by default three linear layers, then one full):
//   x = x + mixer(h),                                                    h = rms_norm(x)
//   x = x + Σ_{e ∈ top-k} p_e · expert_e(h) + σ(w_g·h) · shared(h),       h = rms_norm(x)
// Full attention: q_proj gives each head [q | gate]; q and k are RMS-normalised per head, rotated
// on their first partial_rotary_factor·D dims (neox layout), and the attention's output is
// multiplied by σ(gate) before o_proj. Every RMSNorm of the decoder (the layers' two, q/k's, the
// final one) scales by 1 + w with w stored zero-centred; the gated norm inside a linear layer
// scales by its w. The feed-forward is a mixture of experts (softmax, top-k, renormalised by
// norm_topk_prob) with one gated shared expert, or a dense SwiGLU in mlp_only_layers and in layers
// off decoder_sparse_step.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "ding/models/families/llama_parts.h"
#include "ding/ops/conv.h"
#include "ding/ops/delta_rule.h"

namespace ding {

namespace {

// The zero-centred RMSNorm weights load as their scale 1 + w.
constexpr float kZeroCentred = 1.0f;

void parse_layer_types(const ConfigFields& f, ModelConfig& c) {
  c.layers.assign(size_t(c.n_layer), LayerSpec{});
  std::vector<std::string> types = f.string_list("layer_types");
  if (types.empty()) {
    // transformers' default: every full_attention_interval-th layer is full attention.
    const int64_t interval = f.positive_int_or("full_attention_interval", 4);
    for (int64_t l = 0; l < c.n_layer; ++l) types.push_back((l + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  if (int64_t(types.size()) != c.n_layer)
    f.fail(fmt::format("layer_types lists {} layers, num_hidden_layers is {}", types.size(), c.n_layer));
  for (size_t l = 0; l < types.size(); ++l) {
    // transformers reads the legacy names as the current ones (remap_legacy_layer_types).
    if (types[l] == "attention") types[l] = "full_attention";
    if (types[l] == "mamba") types[l] = "linear_attention";
    if (types[l] == "linear_attention") c.layers[l].mixer = MixerKind::linear_attention;
    else if (types[l] != "full_attention")
      f.fail(fmt::format("layer_types[{}] = \"{}\" is not supported for qwen3_next (linear_attention, full_attention)", l,
                         types[l]));
  }
}

void parse_linear_attention(const ConfigFields& f, ModelConfig& c) {
  LinearAttentionSpec& la = c.linear;
  la.key_heads = f.positive_int_or("linear_num_key_heads", 16);
  la.value_heads = f.positive_int_or("linear_num_value_heads", 32);
  la.key_dim = f.positive_int_or("linear_key_head_dim", 128);
  la.value_dim = f.positive_int_or("linear_value_head_dim", 128);
  la.conv_kernel = f.positive_int_or("linear_conv_kernel_dim", 4);
  if (la.value_heads % la.key_heads != 0)
    f.fail(fmt::format("linear_num_value_heads = {} is not a multiple of linear_num_key_heads = {}", la.value_heads,
                       la.key_heads));
  if (la.key_dim > ops::kMaxDeltaRuleKeyDim)
    f.fail(fmt::format("linear_key_head_dim = {} exceeds the {} ding's delta-rule kernels take", la.key_dim,
                       ops::kMaxDeltaRuleKeyDim));
  if (la.conv_kernel < 2 || la.conv_kernel > ops::kMaxCausalConvKernel)
    f.fail(fmt::format("linear_conv_kernel_dim = {} is outside [2, {}]", la.conv_kernel, ops::kMaxCausalConvKernel));
}

// Which layers' feed-forward is the mixture: not in mlp_only_layers, and (l + 1) a multiple of
// decoder_sparse_step, where the model has experts at all.
void parse_moe(const ConfigFields& f, ModelConfig& c) {
  c.d_ff = f.positive_int_or("intermediate_size", 5632);
  const int64_t experts = f.non_negative_int_or("num_experts", 512);
  if (experts == 0) return;
  MoeSpec& moe = c.moe;
  moe.experts = experts;
  moe.d_ff = f.positive_int_or("moe_intermediate_size", 512);
  moe.shared_d_ff = f.non_negative_int_or("shared_expert_intermediate_size", 512);
  moe.shared_gate = moe.shared_d_ff > 0;
  moe.route = {.k = f.positive_int_or("num_experts_per_tok", 10), .scoring = ops::MoeScoring::softmax,
               .renormalize = f.boolean_or("norm_topk_prob", true)};
  if (moe.route.k > moe.experts)
    f.fail(fmt::format("num_experts_per_tok = {} exceeds num_experts = {}", moe.route.k, moe.experts));
  const int64_t step = f.positive_int_or("decoder_sparse_step", 1);
  std::vector<bool> dense(size_t(c.n_layer), false);
  if (f.has("mlp_only_layers")) {
    const nlohmann::json& list = f.at("mlp_only_layers");
    if (!list.is_array()) f.fail("mlp_only_layers must be a list of layer indices");
    // An index past the layers names none of them: transformers only asks whether a layer's index is listed.
    for (const nlohmann::json& v : list) {
      if (!v.is_number_integer()) f.fail(fmt::format("mlp_only_layers holds {}, not a layer index", v.dump()));
      if (const int64_t l = v.get<int64_t>(); l >= 0 && l < c.n_layer) dense[size_t(l)] = true;
    }
  }
  for (int64_t l = 0; l < c.n_layer; ++l) c.layers[size_t(l)].moe = !dense[size_t(l)] && (l + 1) % step == 0;
}

void parse_attention(const ConfigFields& f, ModelConfig& c) {
  c.n_head = f.positive_int("num_attention_heads");
  c.n_kv_head = f.positive_int_or("num_key_value_heads", 2);  // Qwen3NextConfig's default, not H
  if (c.n_head % c.n_kv_head != 0)
    f.fail(fmt::format("num_attention_heads = {} is not a multiple of num_key_value_heads = {}", c.n_head, c.n_kv_head));
  c.d_head = f.has("head_dim") ? f.positive_int("head_dim") : 256;  // Qwen3NextConfig's default, not C / H
  c.qk_norm = QkNorm::per_head;
  c.attention_gate = true;
  c.positions = PositionKind::rope;
  parse_rope(f, c);
  // partial_rotary_factor sits beside rope_theta (transformers 5's rope_parameters, where they are
  // the rope's parameters) or at the top.
  double factor = f.has("partial_rotary_factor") ? f.positive_number("partial_rotary_factor") : 0.25;
  const char* rope_key = rope_parameters_key(f);
  if (rope_key && std::string_view(rope_key) == "rope_parameters" && f.at("rope_parameters").contains("partial_rotary_factor"))
    factor = f.object("rope_parameters").positive_number("partial_rotary_factor");
  c.rotary_dim = int64_t(double(c.d_head) * factor);
  if (c.rotary_dim < 2 || c.rotary_dim > c.d_head || c.rotary_dim % 2 != 0)
    f.fail(fmt::format("partial_rotary_factor = {} gives {} rotary dims of head_dim = {}; they must be even and in [2, head_dim]",
                       factor, c.rotary_dim, c.d_head));
  const bool bias = f.boolean_or("attention_bias", false);
  c.qkv_bias = c.out_bias = bias;
}

class Qwen3Next final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"qwen3_next"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    c.d_model = f.positive_int("hidden_size");
    c.n_layer = f.layer_count("num_hidden_layers");
    c.vocab_size = f.positive_int("vocab_size");
    c.n_positions = f.positive_int_or("max_position_embeddings", 32768);
    c.norm = NormKind::rms_norm;
    c.norm_eps = f.positive_float_or("rms_norm_eps", config_defaults(c.model_type).rms_norm_eps);
    const std::string act = f.string_or("hidden_act", "silu");
    if (act != "silu") f.fail(fmt::format("hidden_act \"{}\" is not supported (qwen3_next uses silu)", act));
    parse_attention(f, c);
    parse_layer_types(f, c);
    parse_linear_attention(f, c);
    c.ffn = FfnKind::gated;
    c.activation = ops::Activation::swiglu;
    parse_moe(f, c);
    c.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
    const std::vector<int32_t> bos = f.token_list("bos_token_id");
    c.bos_token = bos.empty() ? -1 : bos[0];
    c.eos_tokens = f.token_list("eos_token_id");
  }

  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, V = c.vocab_size;
    WeightMap map = llama_weight_map(files);
    map.matrix(&w.token_embedding, "embed_tokens.weight", V, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      LayerWeights& layer = w.layers[size_t(l)];
      const std::string p = fmt::format("layers.{}.", l);
      if (c.layers[size_t(l)].mixer == MixerKind::linear_attention)
        linear_weights(map, c, p, layer.linear);
      else
        attention_weights(map, c, p, layer.attention);
      if (c.layers[size_t(l)].moe) {
        MoeWeights& m = layer.moe;
        moe_layer_weights(map, c, l, "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight", m, kZeroCentred);
        if (c.moe.shared_d_ff > 0) {
          gated_ffn_weights(map, c, p + "mlp.shared_expert.", c.moe.shared_d_ff, &m.shared_up_w, &m.shared_down_w);
          map.matrix(&m.shared_gate_w, p + "mlp.shared_expert_gate.weight", 1, C);
        }
      } else {
        FeedForwardWeights& f = layer.ffn;
        map.vector(&f.norm_w, p + "post_attention_layernorm.weight", C, WeightInit::ones, kZeroCentred);
        gated_ffn_weights(map, c, p + "mlp.", c.d_ff, &f.up_w, &f.down_w);
      }
    }
    map.vector(&w.final_norm_w, "norm.weight", C, WeightInit::ones, kZeroCentred);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    const LayerSpec& spec = step.config->layers[size_t(step.layer)];
    if (spec.mixer == MixerKind::linear_attention)
      linear_attention(step, w.linear, cache);  // x = x + W_out · (rms_norm(o) ⊙ silu(z))
    else
      self_attention(step, w.attention, cache);  // x = x + W_o · (attn(…) ⊙ σ(gate))
    if (spec.moe)
      mixture_of_experts(step, w.moe);  // x = x + Σ p_e · expert_e(h) + σ(w_g·h) · shared(h)
    else
      feed_forward(step, w.ffn);  // x = x + down(silu(gate(h)) ⊙ up(h))
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    bool linear = false, full = false, moe = false, dense = false;
    for (const LayerSpec& l : c.layers) {
      (l.mixer == MixerKind::linear_attention ? linear : full) = true;
      (l.moe ? moe : dense) = true;
    }
    const std::vector<std::string_view> none;
    return ops_of({linear ? linear_attention_ops(c) : none, full ? self_attention_ops(c) : none,
                   moe ? mixture_of_experts_ops(c) : none, dense ? feed_forward_ops(c) : none});
  }

 private:
  // q_proj ([q_h ; gate_h] per head), k_proj and v_proj stacked, the per-head q/k norms, o_proj.
  static void attention_weights(WeightMap& map, const ModelConfig& c, const std::string& p, AttentionWeights& a) {
    const int64_t C = c.d_model, H = c.n_head, Hkv = c.n_kv_head, D = c.d_head;
    const std::string at = p + "self_attn.";
    map.vector(&a.norm_w, p + "input_layernorm.weight", C, WeightInit::ones, kZeroCentred);
    const std::string names[] = {at + "q_proj.weight", at + "k_proj.weight", at + "v_proj.weight"};
    const int64_t rows[] = {2 * H * D, Hkv * D, Hkv * D};
    map.stacked(&a.qkv_w, at + "qkv_proj.weight", names, rows, C);
    if (c.qkv_bias) {
      const std::string bias_names[] = {at + "q_proj.bias", at + "k_proj.bias", at + "v_proj.bias"};
      map.stacked_vector(&a.qkv_b, at + "qkv_proj.bias", bias_names, rows);
    }
    map.vector(&a.q_norm_w, at + "q_norm.weight", D, WeightInit::ones, kZeroCentred);
    map.vector(&a.k_norm_w, at + "k_norm.weight", D, WeightInit::ones, kZeroCentred);
    map.matrix(&a.out_w, at + "o_proj.weight", C, H * D);
    if (c.out_bias) map.vector(&a.out_b, at + "o_proj.bias", C, WeightInit::zeros);
  }

  // in_proj_qkvz keeps each key head's group [q_g, k_g, v_g, z_g] (v_g and z_g: the r = Hv/Hk value
  // heads of the group) and in_proj_ba each group's [b_g, a_g]; the rows are gathered into q, k,
  // v, b, a, z of all heads in order (in_w).
  static void linear_weights(WeightMap& map, const ModelConfig& c, const std::string& p, LinearAttentionWeights& a) {
    const LinearAttentionSpec& la = c.linear;
    const int64_t C = c.d_model, Hk = la.key_heads, Hv = la.value_heads, Dk = la.key_dim, Dv = la.value_dim;
    const int64_t r = Hv / Hk, group = 2 * Dk + 2 * r * Dv, channels = la.conv_channels();
    const std::string at = p + "linear_attn.", qkvz = at + "in_proj_qkvz.weight", ba = at + "in_proj_ba.weight";
    const int64_t qkvz_rows = Hk * group, ba_rows = 2 * Hv;
    std::vector<WeightMap::RowBlock> in;
    const auto part = [&](std::vector<WeightMap::RowBlock>& to, const std::string& name, int64_t rows, int64_t begin,
                          int64_t size) { to.push_back({name, rows, begin, begin + size}); };
    for (int64_t g = 0; g < Hk; ++g) part(in, qkvz, qkvz_rows, g * group, Dk);                    // q
    for (int64_t g = 0; g < Hk; ++g) part(in, qkvz, qkvz_rows, g * group + Dk, Dk);               // k
    for (int64_t g = 0; g < Hk; ++g) part(in, qkvz, qkvz_rows, g * group + 2 * Dk, r * Dv);       // v
    for (int64_t g = 0; g < Hk; ++g) part(in, ba, ba_rows, g * 2 * r, r);                         // b
    for (int64_t g = 0; g < Hk; ++g) part(in, ba, ba_rows, g * 2 * r + r, r);                     // a
    for (int64_t g = 0; g < Hk; ++g) part(in, qkvz, qkvz_rows, g * group + 2 * Dk + r * Dv, r * Dv);  // z
    map.vector(&a.norm_w, p + "input_layernorm.weight", C, WeightInit::ones, kZeroCentred);
    map.gathered(&a.in_w, at + "in_proj_qkvbaz", in, C);
    map.tensor(&a.conv_w, at + "conv1d.weight", {channels, 1, la.conv_kernel});
    map.vector(&a.a_log, at + "A_log", Hv, WeightInit::zeros);
    map.vector(&a.dt_bias, at + "dt_bias", Hv, WeightInit::ones);
    map.vector(&a.out_norm_w, at + "norm.weight", Dv, WeightInit::ones);
    map.matrix(&a.out_w, at + "out_proj.weight", C, Hv * Dv);
  }
};

}  // namespace

const Family& qwen3_next_family() {
  static const Qwen3Next family;
  return family;
}

}  // namespace ding
