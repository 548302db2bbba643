// What the families built on Llama's decoder share (Llama, Mistral, Qwen2 in llama.cpp; Mixtral,
// OLMoE): its config fields for attention, rotary positions and windows, and where its
// checkpoints keep the attention weights.
#pragma once
#include "ding/models/families/family.h"

namespace ding {

// What transformers' config class of c.model_type assumes for a key config.json leaves out.
struct ConfigDefaults {
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  int64_t max_position_embeddings = 2048;
};
ConfigDefaults config_defaults(const std::string& model_type);
// The key whose object holds the rope's type and parameters, or nullptr for the plain rope:
// rope_scaling wherever a config has it, else rope_parameters. transformers 4 reads rope_scaling
// alone, and transformers 5 takes it over rope_parameters where both are written
// (PreTrainedConfig.convert_rope_params_to_dict: rope_scaling or rope_parameters).
const char* rope_parameters_key(const ConfigFields& f);
// rope_theta and rope_scaling (transformers 4) or rope_parameters (transformers 5); scalings
// ding does not implement are refused by name. Needs c.model_type and c.n_positions.
void parse_rope(const ConfigFields& f, ModelConfig& c);
// Which layers attend through a sliding window, and how wide it is (per model_type). Sets
// c.layers, one LayerSpec per layer.
void parse_windows(const ConfigFields& f, ModelConfig& c);
// Everything but the feed-forward: sizes, heads, RMSNorm, silu, rotary positions, attention
// biases, tied embeddings, windows, bos/eos.
void parse_llama_attention(const ConfigFields& f, ModelConfig& c);
// The number of routed experts, which MixtralConfig keeps as num_local_experts and OlmoeConfig as
// num_experts, each reading the other name as an alias (attribute_map): either key, or `fallback`
// (the config class's default) where neither is written. Both with different values is an error,
// as transformers versions differ in which one they keep.
int64_t expert_count(const ConfigFields& f, int64_t fallback);
// The mixtures' expert products fuse silu (ops::moe_matmul): any other hidden_act fails by name.
void require_silu_experts(const ConfigFields& f, const ModelConfig& c);
// *ForCausalLM checkpoints prefix the decoder's names with "model."; bare *Model ones do not.
WeightMap llama_weight_map(const WeightFiles* files);
// A SwiGLU FFN of width F under `prefix` (e.g. "layers.3.mlp."): gate_proj and up_proj stacked
// into `up` [2F, C] (or a stored gate_up_proj), down_proj into `down` [C, F].
void gated_ffn_weights(WeightMap& map, const ModelConfig& c, const std::string& prefix, int64_t F, Tensor* up, Tensor* down);
// Layer `layer`'s mixture of experts under layers.<layer>.<moe> (e.g. "mlp."): the
// post-attention norm, the router (<moe>gate.weight) and the routed experts, expert e's `gate` and
// `up` matrices (<moe>experts.<e>.<name>) stacked into MoeWeights::up_w expert after expert and its
// `down` into down_w; transformers 5's fused experts.gate_up_proj / experts.down_proj load too.
// norm_offset: the post-attention norm's stored_offset (1 for zero-centred norms).
void moe_layer_weights(WeightMap& map, const ModelConfig& c, int64_t layer, const char* moe, const char* gate,
                       const char* up, const char* down, MoeWeights& m, float norm_offset = 0.0f);
// Layer `layer`'s input norm, fused q/k/v (and biases) and output projection.
void llama_attention_weights(WeightMap& map, const ModelConfig& c, int64_t layer, AttentionWeights& a);

}  // namespace ding
