// Mixtral (Jiang et al. 2024, "Mixtral of Experts"): Mistral's attention (RMSNorm, rotary
// positions, GQA, an optional sliding window) with a sparse mixture of SwiGLU experts as every
// layer's feed-forward:
//   x = x + W_o · attn(rope(W_q h), rope(W_k h), W_v h),          h = rms_norm(x)
//   x = x + Σ_{e ∈ top-k(softmax(W_router h))} p̂_e · expert_e(h),  h = rms_norm(x)
// with p̂ the chosen experts' softmax scores renormalised to sum 1 (transformers'
// MixtralSparseMoeBlock), expert_e(h) = w2 · (silu(w1 h) ⊙ w3 h).
#include <fmt/format.h>

#include "ding/models/families/llama_parts.h"

namespace ding {

namespace {

class Mixtral final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"mixtral"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    parse_llama_attention(f, c);
    require_silu_experts(f, c);
    c.ffn = FfnKind::gated;
    c.activation = ops::Activation::swiglu;
    // Absent keys take MixtralConfig's defaults: 8 experts, 2 per token.
    c.moe.experts = expert_count(f, 8);
    c.moe.d_ff = f.positive_int("intermediate_size");
    c.moe.route = {.k = f.positive_int_or("num_experts_per_tok", 2), .scoring = ops::MoeScoring::softmax, .renormalize = true};
    if (c.moe.route.k > c.moe.experts)
      f.fail(fmt::format("num_experts_per_tok = {} exceeds num_local_experts = {}", c.moe.route.k, c.moe.experts));
    c.d_ff = c.moe.d_ff;  // every layer's feed-forward is the mixture; no dense one
    for (LayerSpec& layer : c.layers) layer.moe = true;
  }

  // Each expert's w1 (gate) and w3 (up) stack into its [W_gate; W_up] rows, the experts one after
  // another; w2 (down) likewise.
  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, V = c.vocab_size;
    WeightMap map = llama_weight_map(files);
    map.matrix(&w.token_embedding, "embed_tokens.weight", V, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      llama_attention_weights(map, c, l, w.layers[size_t(l)].attention);
      moe_layer_weights(map, c, l, "block_sparse_moe.", "w1.weight", "w3.weight", "w2.weight", w.layers[size_t(l)].moe);
    }
    map.vector(&w.final_norm_w, "norm.weight", C, WeightInit::ones);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    self_attention(step, w.attention, cache);  // x = x + attn(rms_norm(x)), rotary q and k
    mixture_of_experts(step, w.moe);           // x = x + Σ p̂_e · expert_e(rms_norm(x))
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    return ops_of({self_attention_ops(c), mixture_of_experts_ops(c)});
  }
};

}  // namespace

const Family& mixtral_family() {
  static const Mixtral family;
  return family;
}

}  // namespace ding
