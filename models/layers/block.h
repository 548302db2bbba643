// The layers a family's decoder block is assembled from, and what one forward step over them
// sees. Every layer reads and updates the residual stream x in place (x ← x + layer(norm(x))), so
// a block reads like its math:
//   self_attention(step, w.attention, cache);   // x = x + attn(norm(x))
//   feed_forward(step, w.ffn);                  // x = x + ffn(norm(x))
// Each norm is the prologue of the product it feeds (ops::MatmulNorm), so no normalised copy of x
// is written. A layer's cache (KvCache now; a latent cache or a recurrent state later) is made by
// make_layer_cache from the layer's type and owned by the session, which never looks inside.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "ding/device.h"
#include "ding/models/config.h"
#include "ding/workspace.h"

namespace ding {

struct AttentionWeights {
  Tensor norm_w, norm_b;  // [C]; norm_b layer_norm only
  Tensor qkv_w;           // [(H + 2·Hkv)·D, C]: rows of q, then k, then v; with ModelConfig::attention_gate
                          // q's rows are [q_h ; gate_h] per head h, [(2H + 2·Hkv)·D, C] in all
  Tensor qkv_b;           // [(H + 2·Hkv)·D], optional
  Tensor q_norm_w;        // [D] (QkNorm::per_head)
  Tensor k_norm_w;        // [D]
  Tensor qk_norm_w;       // [(H + Hkv)·D] (QkNorm::whole_projection): q's weights, then k's
  Tensor out_w;           // [C, H·D]
  Tensor out_b;           // [C], optional
  Tensor rope_inv_freq;   // f32 [R/2], rope positions only: θ_i with the config's scaling applied
};

// Multi-head latent attention's weights (ops/mla.h), transformers' DeepseekV2Attention names beside.
struct LatentAttentionWeights {
  Tensor norm_w;         // [C] input_layernorm
  // [Q + L + Dr, C]: the products of rms_norm(x), one weight stream: q_proj ([H·(Dn + Dr), C]) or,
  // with a q bottleneck, q_a_proj ([Lq, C]); then kv_a_proj_with_mqa (the latent, the rope key).
  Tensor in_w;
  Tensor q_b_w;          // [H·(Dn + Dr), Lq] q_b_proj, with a q bottleneck only
  Tensor q_a_norm_w;     // [Lq] q_a_layernorm
  Tensor kv_a_norm_w;    // [L] kv_a_layernorm
  Tensor kv_b_w;         // [H·(Dn + Dv), L] kv_b_proj: ops::mla's w_kv [H, Dn + Dv, L]
  Tensor out_w;          // [C, H·Dv] o_proj
  Tensor rope_inv_freq;  // f32 [Dr/2]: θ_i with the config's scaling applied
};

// Gated DeltaNet's weights (ModelConfig::linear), transformers' Qwen3NextGatedDeltaNet names beside.
struct LinearAttentionWeights {
  Tensor norm_w;       // [C] input_layernorm
  // [Cc + 2·Hv + Hv·Dv, C], Cc = 2·Hk·Dk + Hv·Dv: rows of q, k, v (the convolution's channels, in
  // its order), b, a, z, so one product reads them all; gathered from in_proj_qkvz and in_proj_ba,
  // which keep them grouped per key head (fix_query_key_value_ordering).
  Tensor in_w;
  Tensor conv_w;       // [Cc, 1, K] conv1d.weight
  Tensor a_log;        // [Hv] A_log
  Tensor dt_bias;      // [Hv] dt_bias
  Tensor out_norm_w;   // [Dv] norm.weight, the gated RMSNorm's (a plain scale, not 1 + w)
  Tensor out_w;        // [C, Vd] out_proj
};

struct FeedForwardWeights {
  Tensor norm_w, norm_b;  // [C]; norm_b layer_norm only
  Tensor up_w;            // mlp [F, C]; gated [2F, C] = [W_gate; W_up]
  Tensor up_b;            // [F] or [2F], optional
  Tensor down_w;          // [C, F]
  Tensor down_b;          // [C], optional
};

// Expert e's weights are rows e·R … (e + 1)·R − 1 of the stacked matrices (R = 2F or C), the
// layout of ops::moe_matmul's [E, R, K] w.
struct MoeWeights {
  Tensor norm_w;         // [C]
  Tensor router_w;       // [E, C]
  Tensor up_w;           // [E·2F, C]: each expert's [W_gate; W_up]
  Tensor down_w;         // [E·C, F]
  Tensor shared_up_w;    // [2Fs, C]: the shared experts' [W_gate; W_up], optional
  Tensor shared_down_w;  // [C, Fs]
  Tensor shared_gate_w;  // [1, C]: with MoeSpec::shared_gate, shared(h) is scaled by σ(shared_gate_w · h)
};

struct LayerWeights {
  AttentionWeights attention;
  LatentAttentionWeights latent;  // MixerKind::latent_attention layers
  LinearAttentionWeights linear;  // MixerKind::linear_attention layers
  FeedForwardWeights ffn;  // dense layers
  MoeWeights moe;          // LayerSpec::moe layers
};

// A layer's per-session state, sized once for the session's batch and context.
class LayerCache {
 public:
  virtual ~LayerCache() = default;
  virtual size_t bytes() const = 0;
  // Makes sequence `seq` empty, for a cache whose contents a new sequence reads before writing (a
  // recurrent state); caches addressed by position (KV, latent) need nothing, and do nothing.
  virtual void clear(Stream&, int64_t /*seq*/) {}
};

class KvCache final : public LayerCache {
 public:
  KvCache(Device& device, DType dtype, int64_t batch, int64_t positions, int64_t kv_heads, int64_t head_dim);
  size_t bytes() const override { return 2 * k.nbytes(); }
  Tensor k, v;  // [B, S, Hkv, D]; a sliding-window layer's S may be below the context (a rolling cache)

 private:
  Buffer buffer_;
};

// Multi-head latent attention's cache: per position the normalised latent and the rotated rope
// key, [c ; k^R], never per-head keys or values.
class LatentCache final : public LayerCache {
 public:
  LatentCache(Device& device, DType dtype, int64_t batch, int64_t positions, int64_t row);
  size_t bytes() const override { return latent.nbytes(); }
  Tensor latent;  // [B, S, L + Dr]

 private:
  Buffer buffer_;
};

// Gated DeltaNet's cache: per sequence the convolution's last K − 1 inputs and the recurrent state,
// the same size at any context.
class LinearAttentionCache final : public LayerCache {
 public:
  LinearAttentionCache(Device& device, DType dtype, int64_t batch, const LinearAttentionSpec& spec);
  size_t bytes() const override { return conv.nbytes() + state.nbytes(); }
  // Zeros: the convolution's padding before the first token, and an empty memory.
  void clear(Stream& stream, int64_t seq) override;
  Tensor conv;   // [B, K − 1, Cc] in the compute dtype
  Tensor state;  // f32 [B, Hv, Dk, Dv]

 private:
  Buffer buffer_;
};

// The cache layer `layer` needs for sequences of up to max_tokens positions, prefilled in chunks of
// up to max_chunk: its mixer's kind decides (attention: a KvCache, of the window's size where the
// layer has one).
std::unique_ptr<LayerCache> make_layer_cache(const ModelConfig& c, int64_t layer, Device& device, DType dtype,
                                             int64_t max_batch, int64_t max_tokens, int64_t max_chunk);
// The bytes make_layer_cache would allocate, for checking a session's plan before any of it (in
// double: a hostile context length must not wrap the sum).
double layer_cache_bytes(const ModelConfig& c, int64_t layer, DType dtype, int64_t max_batch, int64_t max_tokens,
                         int64_t max_chunk);

enum class StepKind : uint8_t { prefill, decode };

// One forward step: a prefill chunk of sequence `seq` (rows are its positions start..start+n−1)
// or a decode step (row b is sequence b's next token). Everything a decode step reads that
// changes between steps is a device tensor, so the step can be recorded once and replayed.
struct Step {
  Stream* stream = nullptr;
  const ModelConfig* config = nullptr;
  StepKind kind = StepKind::prefill;
  int64_t layer = 0;      // the layer being run (its type is config->layers[layer])
  int64_t n = 0;          // token rows
  int64_t seq = 0;        // prefill: the sequence
  int64_t start = 0;      // prefill: the chunk's first position
  Tensor start_dev;       // prefill: i32 [1], start on the device
  Tensor positions;       // i32 [n]: each row's position
  Tensor seq_lens;        // decode: i32 [n], each sequence's length including this token
  Tensor x;               // [n, C] the residual stream, updated in place
  Workspace* scratch = nullptr;  // reset before each layer
};

// x ← x + attention(norm(x)): the fused q/k/v projection, rotary positions where the config has
// them, causal attention (full or sliding-window, per the layer's type) over the cache after
// appending this step's keys and values, and the output projection added to x.
void self_attention(const Step& step, const AttentionWeights& w, LayerCache& cache);
// x ← x + W_o · mla(q, latents): the query (through its bottleneck where the config has one), the
// token's latent normalised and its rope key rotated into the LatentCache, then ops::mla_prefill or
// ops::mla_decode (which reads only latents) and the output projection added to x.
void latent_attention(const Step& step, const LatentAttentionWeights& w, LayerCache& cache);
// x ← x + W_out · (rms_norm(o) ⊙ silu(z)), o = gated_delta_rule(q, k, v) of h = norm(x): the
// projection, the causal convolution of q, k, v (its state carried in the LinearAttentionCache),
// q and k L2-normalised, the recurrence (chunk-wise over a prefill chunk, one step at decode), the
// gated norm and the output projection added to x. A new sequence starts from the zero states
// LinearAttentionCache::clear leaves.
void linear_attention(const Step& step, const LinearAttentionWeights& w, LayerCache& cache);
// x ← x + down(act(up(norm(x)))): GELU MLP, or silu(gate) ⊙ up fused into the up product's epilogue.
void feed_forward(const Step& step, const FeedForwardWeights& w);
// x ← x + Σ_j weight_j · expert_j(h) (+ shared(h)), h = norm(x): route, group the token rows by
// expert, both expert products as segmented matmuls, and combine into x, all on the device.
void mixture_of_experts(const Step& step, const MoeWeights& w);
// The ops (names from ops/op_list.h) each layer dispatches for a model of config `c`: what a
// backend must have before the model loads on it (Model::load refuses it otherwise).
std::vector<std::string_view> self_attention_ops(const ModelConfig& c);
std::vector<std::string_view> latent_attention_ops(const ModelConfig& c);
std::vector<std::string_view> linear_attention_ops(const ModelConfig& c);
std::vector<std::string_view> feed_forward_ops(const ModelConfig& c);
std::vector<std::string_view> mixture_of_experts_ops(const ModelConfig& c);
// Scratch the dense feed-forward takes for `rows` token rows.
size_t feed_forward_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows);
// Scratch the mixture of experts takes for `rows` token rows (0 without MoE layers).
size_t mixture_of_experts_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows);
// The union of layers' op lists, each op once, in first-seen order.
std::vector<std::string_view> ops_of(std::initializer_list<std::vector<std::string_view>> layers);
// Bytes every layer's cache holds for `tokens` positions of each of `batch` sequences (a sliding
// window's layer at most its window): what a run of that many tokens stores. At tokens = 1, the
// cache's bytes per token.
double model_cache_bytes(const ModelConfig& c, DType dtype, int64_t batch, int64_t tokens);
// One sequence's cache as it grows: bytes per position held (the attention layers' keys and
// values, or latents) and bytes held whatever the length (the linear layers' states).
struct CacheSize {
  double per_token = 0, per_sequence = 0;
};
CacheSize model_cache_size(const ModelConfig& c, DType dtype);
// Scratch one block needs for `rows` token rows in `dtype`.
size_t block_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows);
// The weights a layer hands only to ops::matmul and ops::moe_matmul (as w), which
// LoadOptions::quantize may store as 8-bit values with row scales: the projections of attention,
// latent attention, linear attention, the dense MLP, the routed experts and the shared experts.
// Not the router (its logits choose the experts: a near tie should not flip on rounding) or
// kv_b_proj (the latent attention ops read it). Every such slot of the layer, also those its
// family leaves undefined: the loader matches them against weight plans before any weight is
// uploaded.
std::vector<Tensor*> projection_weights(LayerWeights& w);

}  // namespace ding
