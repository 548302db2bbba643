// OLMoE (Muennighoff et al. 2024, "OLMoE: Open Mixture-of-Experts Language Models"), as
// transformers' modeling_olmoe.py defines it: Llama's block with q and k normalised over their
// whole projections (one RMSNorm of H·D and one of Hkv·D, not per head) before the rotation,
// q, k and v optionally clipped (clip_qkv), and a sparse mixture of SwiGLU experts as every
// layer's feed-forward:
//   x = x + W_o · attn(rope(clip(rms_norm(W_q h))), rope(clip(rms_norm(W_k h))), clip(W_v h)),  h = rms_norm(x)
//   x = x + Σ_{e ∈ top-k(softmax(W_router h))} p_e · expert_e(h),                             h = rms_norm(x)
// with the chosen experts' softmax scores p_e used as they are (norm_topk_prob false, as
// published) or renormalised to sum 1 (true).
#include <fmt/format.h>

#include "ding/models/families/llama_parts.h"

namespace ding {

namespace {

class Olmoe final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"olmoe"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    parse_llama_attention(f, c);
    require_silu_experts(f, c);
    // transformers sizes q_norm by hidden_size and k_norm by (hidden_size / heads)·kv_heads.
    if (c.n_head * c.d_head != c.d_model)
      f.fail(fmt::format("head_dim = {} × num_attention_heads = {} must equal hidden_size = {} (olmoe normalises q over "
                         "hidden_size)", c.d_head, c.n_head, c.d_model));
    c.qk_norm = QkNorm::whole_projection;
    if (f.has("clip_qkv")) c.clip_qkv = float(f.positive_number("clip_qkv"));
    c.ffn = FfnKind::gated;
    c.activation = ops::Activation::swiglu;
    c.moe.experts = expert_count(f, 64);
    c.moe.d_ff = f.positive_int("intermediate_size");
    c.moe.route = {.k = f.positive_int_or("num_experts_per_tok", 8), .scoring = ops::MoeScoring::softmax,
                   .renormalize = f.boolean_or("norm_topk_prob", false)};
    if (c.moe.route.k > c.moe.experts)
      f.fail(fmt::format("num_experts_per_tok = {} exceeds num_experts = {}", c.moe.route.k, c.moe.experts));
    c.d_ff = c.moe.d_ff;  // every layer's feed-forward is the mixture; no dense one
    for (LayerSpec& layer : c.layers) layer.moe = true;
  }

  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, V = c.vocab_size;
    WeightMap map = llama_weight_map(files);
    map.matrix(&w.token_embedding, "embed_tokens.weight", V, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      AttentionWeights& a = w.layers[size_t(l)].attention;
      llama_attention_weights(map, c, l, a);
      const std::string p = fmt::format("layers.{}.", l);
      // q_norm and k_norm stacked: one norm launch takes both where they are as wide (H = Hkv).
      const std::string norms[] = {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"};
      const int64_t widths[] = {c.n_head * c.d_head, c.n_kv_head * c.d_head};
      map.stacked_vector(&a.qk_norm_w, p + "self_attn.qk_norm.weight", norms, widths, WeightInit::ones);
      moe_layer_weights(map, c, l, "mlp.", "gate_proj.weight", "up_proj.weight", "down_proj.weight", w.layers[size_t(l)].moe);
    }
    map.vector(&w.final_norm_w, "norm.weight", C, WeightInit::ones);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    self_attention(step, w.attention, cache);  // x = x + attn(…), q and k normalised, rotary
    mixture_of_experts(step, w.moe);           // x = x + Σ p_e · expert_e(rms_norm(x))
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    return ops_of({self_attention_ops(c), mixture_of_experts_ops(c)});
  }
};

}  // namespace

const Family& olmoe_family() {
  static const Olmoe family;
  return family;
}

}  // namespace ding
