// GPT-2 (Radford et al. 2019): learned positions, LayerNorm, GELU MLP, biases everywhere.
// Its Conv1D layers store W as [in, out]; the map transposes them to ops::matmul's [out, in].
//   x = x + attn(layer_norm(x))
//   x = x + W2·gelu(W1·layer_norm(x) + b1) + b2
#include <fmt/format.h>

#include <cmath>

#include "ding/models/families/family.h"

namespace ding {

namespace {

class Gpt2 final : public Family {
 public:
  std::span<const std::string_view> model_types() const override {
    static constexpr std::string_view types[] = {"gpt2"};
    return types;
  }

  void parse_config(const ConfigFields& f, ModelConfig& c) const override {
    c.n_layer = f.layer_count("n_layer");
    c.n_head = f.positive_int("n_head");
    c.n_kv_head = c.n_head;
    c.d_model = f.positive_int("n_embd");
    if (c.d_model % c.n_head != 0)
      f.fail(fmt::format("n_embd = {} is not divisible by n_head = {}", c.d_model, c.n_head));
    c.d_head = c.d_model / c.n_head;
    c.d_ff = f.positive_int_or("n_inner", 4 * c.d_model);
    c.n_positions = f.positive_int_or("n_positions", f.positive_int_or("n_ctx", 1024));
    c.vocab_size = f.positive_int("vocab_size");
    c.norm = NormKind::layer_norm;
    c.norm_eps = f.positive_float_or("layer_norm_epsilon", 1e-5f);
    c.positions = PositionKind::learned;
    c.context_bounded = true;  // a position past the table has no embedding
    c.ffn = FfnKind::mlp;
    c.activation = ops::Activation::gelu_tanh;  // fused into the up product where the function is it
    c.ffn_fn = parse_activation(f, "activation_function", "gelu_new");
    c.qkv_bias = c.out_bias = c.ffn_bias = true;
    c.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
    if (f.boolean_or("add_cross_attention", false)) f.fail("add_cross_attention = true (an encoder-decoder) is not supported");
    c.layers.assign(size_t(c.n_layer), LayerSpec{});
    // transformers' GPT2Attention: scores times 1/√d_head unless scale_attn_weights is false, and
    // divided by layer + 1 where scale_attn_by_inverse_layer_idx (stanford-crfm's GPT-2 runs).
    const double base = f.boolean_or("scale_attn_weights", true) ? 1.0 / std::sqrt(double(c.d_head)) : 1.0;
    const bool by_layer = f.boolean_or("scale_attn_by_inverse_layer_idx", false);
    for (int64_t l = 0; l < c.n_layer; ++l) c.layers[size_t(l)].attention_scale = float(by_layer ? base / double(l + 1) : base);
    const std::vector<int32_t> bos = f.token_list("bos_token_id");
    c.bos_token = bos.empty() ? -1 : bos[0];
    c.eos_tokens = f.token_list("eos_token_id");
  }

  // Checkpoints saved from GPT2LMHeadModel prefix the names with "transformer."; GPT2Model's do not.
  std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const override {
    const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size, P = c.n_positions;
    WeightMap map(files, files && files->has("transformer.wte.weight") ? "transformer." : "");
    map.matrix(&w.token_embedding, "wte.weight", V, C);
    map.matrix(&w.position_embedding, "wpe.weight", P, C);
    w.layers.resize(size_t(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      AttentionWeights& a = w.layers[size_t(l)].attention;
      FeedForwardWeights& m = w.layers[size_t(l)].ffn;
      const std::string h = fmt::format("h.{}.", l);
      map.vector(&a.norm_w, h + "ln_1.weight", C, WeightInit::ones);
      map.vector(&a.norm_b, h + "ln_1.bias", C, WeightInit::zeros);
      map.matrix(&a.qkv_w, h + "attn.c_attn.weight", 3 * C, C, /*transposed=*/true);
      map.vector(&a.qkv_b, h + "attn.c_attn.bias", 3 * C, WeightInit::zeros);
      map.matrix(&a.out_w, h + "attn.c_proj.weight", C, C, true);
      map.vector(&a.out_b, h + "attn.c_proj.bias", C, WeightInit::zeros);
      map.vector(&m.norm_w, h + "ln_2.weight", C, WeightInit::ones);
      map.vector(&m.norm_b, h + "ln_2.bias", C, WeightInit::zeros);
      map.matrix(&m.up_w, h + "mlp.c_fc.weight", F, C, true);
      map.vector(&m.up_b, h + "mlp.c_fc.bias", F, WeightInit::zeros);
      map.matrix(&m.down_w, h + "mlp.c_proj.weight", C, F, true);
      map.vector(&m.down_b, h + "mlp.c_proj.bias", C, WeightInit::zeros);
    }
    map.vector(&w.final_norm_w, "ln_f.weight", C, WeightInit::ones);
    map.vector(&w.final_norm_b, "ln_f.bias", C, WeightInit::zeros);
    if (!c.tied_embeddings) map.lm_head(&w.lm_head, V, C);
    return map.take();
  }

  void block(const Step& step, const LayerWeights& w, LayerCache& cache) const override {
    self_attention(step, w.attention, cache);  // x = x + attn(layer_norm(x))
    feed_forward(step, w.ffn);                 // x = x + mlp(layer_norm(x))
  }

  std::vector<std::string_view> block_ops(const ModelConfig& c) const override {
    return ops_of({self_attention_ops(c), feed_forward_ops(c)});
  }
};

}  // namespace

const Family& gpt2_family() {
  static const Gpt2 family;
  return family;
}

}  // namespace ding
