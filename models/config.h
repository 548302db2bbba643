// ModelConfig: a decoder's hyperparameters, read from a Hugging Face config.json by the family
// that owns its model_type (models/families/). One struct covers every family; variants are
// fields (norm, positions, FFN, biases) and a type per layer, never separate model classes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ding/dtype.h"
#include "ding/ops/activation.h"
#include "ding/ops/matmul.h"
#include "ding/ops/moe.h"
#include "ding/ops/rope.h"

namespace ding {

using ops::NormKind;  // the block's norm: layer_norm or rms_norm (never none)
enum class PositionKind : uint8_t { learned, rope };
// mlp:   down(act(up(h) + b_up)) + b_down                    (GPT-2)
// gated: down(silu(gate(h)) ⊙ up(h)), gate and up stacked    (Llama's SwiGLU)
enum class FfnKind : uint8_t { mlp, gated };
// What mixes tokens in a layer: softmax attention over a per-head KV cache, multi-head latent
// attention (DeepSeek-V2) over a cache of latents (ModelConfig::mla), or linear attention
// (Qwen3-Next's Gated DeltaNet) over a state of constant size (ModelConfig::linear).
enum class MixerKind : uint8_t { attention, latent_attention, linear_attention };
// RMSNorm of q and k before the rotation: none; over the whole q and k projections, one norm of
// H·D and one of Hkv·D (OLMoE); or per head over D (Qwen3, Qwen3-Next).
enum class QkNorm : uint8_t { none, whole_projection, per_head };

// One decoder layer's type: its mixer, how far back it sees, and its feed-forward.
struct LayerSpec {
  MixerKind mixer = MixerKind::attention;
  int64_t window = 0;  // > 0: sliding-window attention over the last `window` positions; 0: full
  bool moe = false;    // the feed-forward is the mixture of experts (ModelConfig::moe), else dense (d_ff)
  float attention_scale = 0.0f;  // the scores' factor s; 0: 1/√d_head
};

// The mixture-of-experts feed-forward (Mixtral, OLMoE, DeepSeek): the router scores E experts per
// token, the k best run (each a SwiGLU FFN of width d_ff) and their outputs are summed with the
// router's weights; shared experts, where the model has them, run for every token.
struct MoeSpec {
  int64_t experts = 0;        // E
  int64_t d_ff = 0;           // one expert's hidden width
  ops::MoeRouteParams route;  // k, scoring, renormalisation (norm_topk_prob), routed_scaling_factor
  int64_t shared_d_ff = 0;    // the shared experts' hidden width, all of them together; 0: none
  bool shared_gate = false;   // Qwen3-Next: the shared experts' output scaled by σ(w_gate · h), one logit per token
};

// Multi-head latent attention (ops/mla.h): queries from x directly or through a low-rank
// bottleneck, keys and values up-projected from a per-token latent of kv_lora_rank elements, the
// only thing cached besides one rotated key of rope_dim shared by the heads.
struct MlaSpec {
  int64_t q_lora_rank = 0;   // Lq; 0: q = W_q x (DeepSeek-V2-Lite), else q = W_qb · rms_norm(W_qa x)
  int64_t kv_lora_rank = 0;  // L
  int64_t rope_dim = 0;      // Dr (qk_rope_head_dim)
  int64_t nope_dim = 0;      // Dn (qk_nope_head_dim)
  int64_t value_dim = 0;     // Dv (v_head_dim)
  float softmax_scale = 0;   // (Dn + Dr)^-½, times yarn_mscale(factor, mscale_all_dim)² under YaRN
};

// Gated DeltaNet (ops/delta_rule.h) as Qwen3-Next's linear_attention layers use it: q, k (Hk heads
// of Dk) and v (Hv heads of Dv) from one projection through a short causal convolution, q and k
// L2-normalised, the recurrence with gates from A_log and dt_bias, then RMSNorm(o)·silu(z).
struct LinearAttentionSpec {
  int64_t key_heads = 0;    // Hk (linear_num_key_heads)
  int64_t value_heads = 0;  // Hv (linear_num_value_heads), a multiple of Hk
  int64_t key_dim = 0;      // Dk (linear_key_head_dim)
  int64_t value_dim = 0;    // Dv (linear_value_head_dim)
  int64_t conv_kernel = 0;  // K (linear_conv_kernel_dim)
  int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
};

// config.json's quantization_config, for the 8-bit checkpoints ding loads (docs/DESIGN.md,
// "Quantized model folders"):
//   ding  written by ding-quantize (format_version kDingQuantizedFormat): the matmul weights in i8 or
//         f8e4m3, each tensor T with f32 row scales "T_scale" (per stored row; per stored column of
//         a weight stored transposed, GPT-2's Conv1D).
//   fp8   checkpoints quantized block-wise (transformers' "fp8" method, FineGrainedFP8Config, as
//         DeepSeek and Qwen publish them): f8e4m3 tensors T [N, K] with f32, bf16 or f16 scales
//         "T_scale_inv" [⌈N / block_rows⌉, ⌈K / block_cols⌉] (weight_block_size, 128 × 128 when
//         absent; null: one scale per tensor, [] or [1]). The layers it leaves wide
//         (modules_to_not_convert: lm_head, routers, …) are stored in a float dtype and load as such.
struct QuantizedCheckpoint {
  enum class Method : uint8_t { ding, fp8_blocks };
  Method method = Method::ding;
  DType weights = DType::i8;               // the 8-bit dtype of the quantized tensors
  int64_t block_rows = 0, block_cols = 0;  // fp8: weight_block_size; 0: one block per tensor
};
inline constexpr int kDingQuantizedFormat = 1;

struct ModelConfig {
  std::string model_type;       // as config.json names it: "gpt2", "llama", "mistral", "qwen2"
  int64_t n_layer = 0;
  int64_t n_head = 0;           // H
  int64_t n_kv_head = 0;        // Hkv: = H for MHA, < H for GQA, 1 for MQA
  int64_t d_model = 0;          // C
  int64_t d_head = 0;           // D (C / H unless the config says otherwise)
  int64_t d_ff = 0;             // F, the FFN's hidden width
  int64_t n_positions = 0;      // the longest context the model was built for
  bool context_bounded = false; // contexts past n_positions are refused: learned positions, or a
                                // rope (dynamic NTK) whose frequencies would change past it
  int64_t vocab_size = 0;       // V, rows of the embedding table
  NormKind norm = NormKind::layer_norm;
  float norm_eps = 1e-5f;
  PositionKind positions = PositionKind::learned;
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;       // R ≤ D; 0 = D
  ops::RopeScaling rope_scaling;
  FfnKind ffn = FfnKind::mlp;
  ops::Activation activation = ops::Activation::gelu_tanh;  // the mlp's; gated FFNs use swiglu
  // The dense feed-forward's function (hidden_act, GPT-2's activation_function). Where it is not
  // the one `activation` fuses into the up product (silu for a gated FFN, the tanh GELU for an
  // mlp), the feed-forward writes the product and applies ops::activation after it.
  ops::ActivationFn ffn_fn = ops::ActivationFn::silu;
  bool qkv_bias = false;        // biases of the q, k, v projections
  QkNorm qk_norm = QkNorm::none;
  bool attention_gate = false;  // Qwen3-Next: q_proj gives each head [q | gate]; the output is attn ⊙ σ(gate)
  float clip_qkv = 0;           // > 0: q, k and v clamped to [−clip_qkv, clip_qkv] after those norms (OLMoE)
  bool out_bias = false;        // of the attention's output projection
  bool ffn_bias = false;        // of the FFN's projections
  bool tied_embeddings = true;  // the LM head reuses the token embedding
  MoeSpec moe;                  // the layers with LayerSpec::moe
  MlaSpec mla;                  // the layers with MixerKind::latent_attention
  LinearAttentionSpec linear;   // the layers with MixerKind::linear_attention
  std::vector<LayerSpec> layers;    // one per layer
  int32_t bos_token = -1;           // -1: none
  std::vector<int32_t> eos_tokens;  // generation stops on any of them; ids outside the vocabulary are kept
                                    // (transformers accepts them) and can never be sampled
  std::optional<DType> stored_dtype;  // torch_dtype / dtype: what the checkpoint holds
  std::optional<QuantizedCheckpoint> quantization;  // quantization_config, when ding loads its method

  // Parses `path` (a config.json); throws Error(io | parse) naming the file and the field, and
  // Error(parse) naming the model_type when no family owns it.
  static ModelConfig from_json_file(const std::string& path);
  static ModelConfig from_json_text(const std::string& text, const std::string& origin);

  // Parameters of the whole model (embeddings counted once when tied).
  int64_t parameter_count() const;
  // Ids in [0, vocab_size) among eos_tokens: the ones a sampler can produce.
  std::vector<int32_t> reachable_eos() const;
};

// generation_config.json: what transformers' generate() would use unless told otherwise.
struct GenerationDefaults {
  std::optional<bool> do_sample;  // false: greedy
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::vector<int32_t> eos_tokens;  // empty: the config's

  // Absent file: all unset. Throws Error(parse) naming the file and the field for a bad value.
  static GenerationDefaults from_json_file(const std::string& path);
};

}  // namespace ding
