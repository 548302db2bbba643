// gated_delta_rule: the recurrence of Gated DeltaNet layers (Yang, Kautz, Hatamizadeh 2024,
// "Gated Delta Networks"; Qwen3-Next's linear-attention layers). Per sequence b and value head h a
// state S ∈ ℝ^{Dk×Dv} (f32) carries everything the layer keeps of the past, so decode costs the
// same at any context. Token by token, in order:
//   S ← α_t · S                           α_t = e^(g_t), g_t ≤ 0 the log decay
//   S ← S + k_t · (β_t (v_t − Sᵀk_t))ᵀ      the delta rule: S·(I − β k kᵀ)-style correction toward v_t
//   o_t = Sᵀ (s · q_t)                    s = scale (0: 1/√Dk)
// q and k have Hk ≤ Hv heads; value head h reads key head h / (Hv / Hk) (transformers repeats them
// with repeat_interleave). transformers: torch_recurrent_gated_delta_rule; with l2_normalize_qk
// (below) its use_qk_l2norm_in_kernel, the normalisation of q and k that Qwen3-Next asks for.
// A sequence starts from a zero state (the caller zeroes it); the call leaves the state after its
// last token, so a prompt fed in chunks and then token by token equals one fed whole.
//
// The chunk-wise form (prefill as matrix products; transformers: torch_chunk_gated_delta_rule).
// Within a chunk of n tokens from state S_0, with G_i = g_1 + … + g_i and γ_i = e^(G_i), the
// recurrence unrolls to S_i = γ_i S_0 + Σ_{j≤i} (γ_i/γ_j) k_j u_jᵀ, and the writes u_i solve the
// unit lower-triangular system (the UT form of the chunk's product of Householder-like factors)
//   (I + L) U = diag(β) V − diag(β γ) K S_0,     L_ij = β_i (γ_i/γ_j) k_i·k_j  (j < i)
// so with W = (I + L)^(-1) (forward substitution, n × n):
//   U = W diag(β) V − W diag(β γ) K S_0
//   o_i = γ_i S_0ᵀ(s q_i) + Σ_{j≤i} (γ_i/γ_j) (s q_i·k_j) u_j
//   S_n = γ_n S_0 + Σ_j (γ_n/γ_j) k_j u_jᵀ
// Equal to the recurrent form in exact arithmetic; `chunk` picks the chunk length. A kernel of this
// form keeps the cumulative G_i in double (or relative to a nearby token): Qwen3-Next's heads decay
// by up to e^-300 a token, so G_i reach −10⁴ within a chunk, where f32 holds e^(G_i − G_j) of
// neighbours to only ~1e-3.
// Precision: the state and every sum are f32. Where q, k and v are bf16 and the output 16-bit, a
// backend may take the chunk-wise form's products in bf16 pairs (each computed operand as hi + lo,
// ~2^-17 relative): 2^8 below the output's own rounding, so it only flips a share of its roundings.
#pragma once
#include <cmath>
#include <cstdint>

#include "ding/device.h"
#include "ding/ops/norm.h"
#include "ding/profile.h"

namespace ding::ops {

// The widest key head the backends take: a GPU warp keeps its lanes' share of a state column in
// registers.
inline constexpr int64_t kMaxDeltaRuleKeyDim = 256;

// transformers' l2norm: x·(Σx² + ε)^-½ with this ε.
inline constexpr float kDeltaRuleL2Eps = 1e-6f;

// Gated DeltaNet's gates as Qwen3-Next parametrises them, applied where g and beta are read: with
// a_log given, g holds each token's decay input a_t and beta its write logit b_t, and the op uses
//   g_t = −e^(A_log[h]) · softplus(a_t + dt_bias[h]),   β_t = σ(b_t)
// (softplus(x) = ln(1 + eˣ), and x itself above 20, as torch's). Saves a pass over [B, T, Hv] and
// a launch per layer.
struct DeltaRuleGates {
  Tensor a_log;    // [Hv], f32/f16/bf16, contiguous; absent: g and beta are used as given
  Tensor dt_bias;  // [Hv], f32/f16/bf16, contiguous
  bool given() const { return a_log.defined(); }
};

// Qwen3-Next's gated RMSNorm of each head's output (Qwen3NextRMSNormGated), applied in the op:
//   out[b, t, h] = rms_norm(o[b, t, h]) · weight · silu(gate[b, t, h])   over the Dv elements
// where o is the rule's output rounded to out's dtype, exactly what ops::rms_norm with this gate
// computes on it (ops/norm.h). A backend fuses it or stages it through rms_norm (with_staged_norm);
// either way a decode step needs no norm of its own, and the GPU's recurrent kernel launches none.
struct DeltaRuleOutNorm {
  Tensor weight;  // [Dv], f32/f16/bf16, contiguous; absent: out is o
  Tensor gate;    // [B, T, Hv, Dv], f32/f16/bf16, last dim contiguous, apart from out
  float eps = 1e-6f;
  bool given() const { return weight.defined(); }
};

struct GatedDeltaRuleParams {
  float scale = 0.0f;  // s; 0 = 1/√Dk
  DeltaRuleGates gates;
  // Tokens per chunk of the chunk-wise form, ≤ kMaxDeltaRuleChunk; 1 is the recurrent form (a chunk
  // of one token is one step of it), which benchmarks ask for by it; 0: the backend's choice. The
  // reference computes the chunk-wise form for chunk > 1 and the recurrent one otherwise.
  int64_t chunk = 0;
  // false: no delta correction, S ← α_t·S + β_t k_t v_tᵀ (the chunk-wise form with L = 0): how
  // ops::linear_attention runs on the backends, with β = 1 there (beta absent) and α = 1 without g.
  bool delta = true;
  // true: q and k enter as their heads' unit vectors, each row x of Dk elements replaced by
  // x·(Σx² + kDeltaRuleL2Eps)^-½ rounded to x's dtype (transformers applies l2norm in the input
  // dtype), the sum and the product in double and rounded to f32 on the way, so that every backend
  // rounds each element alike. A model then launches no normalisation of its own.
  bool l2_normalize_qk = false;
  DeltaRuleOutNorm out_norm;
  // A scheduling fact, no part of the result: the state was last written two or more ops back (a
  // decode step's state, written by the previous step), so a kernel chained behind the op before
  // may read it before waiting for that op (vendor.h). Host backends ignore it.
  bool state_from_earlier_op = false;
};

inline constexpr int64_t kMaxDeltaRuleChunk = 256;

struct GatedDeltaRuleArgs {
  Tensor out;    // [B, T, Hv, Dv], f32/f16/bf16, last dim contiguous
  Tensor q;      // [B, T, Hk, Dk], f32/f16/bf16, last dim contiguous; Hv % Hk == 0
  Tensor k;      // [B, T, Hk, Dk]
  Tensor v;      // [B, T, Hv, Dv]
  Tensor g;      // [B, T, Hv], f32/f16/bf16, any strides: the log decay (any real; models give g ≤ 0);
                 // absent only through linear_attention (no decay)
  Tensor beta;   // [B, T, Hv], f32/f16/bf16, any strides: the write strength; absent only through
                 // linear_attention (β = 1)
  Tensor state;  // f32 [B, Hv, Dk, Dv], in-out, contiguous
  GatedDeltaRuleParams params;
};

float delta_rule_scale(const GatedDeltaRuleArgs& a);
// softplus as torch computes it (threshold 20), in the op's float and double forms.
inline double delta_rule_softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
void validate(const Device& device, const GatedDeltaRuleArgs& a);
// The checks under `op`'s name: g and beta are required with params.delta, optional without it.
void validate_recurrence(const char* op, const Device& device, const GatedDeltaRuleArgs& a);
Cost cost(const GatedDeltaRuleArgs& a);
// The out_norm as the op it stands for, out ← rms_norm(o) · silu(gate), for a backend that stages it.
RmsNormArgs out_norm_args(const GatedDeltaRuleArgs& a, const Tensor& o);
// A backend's unfused path: the rule (without out_norm) into `o` (shaped and typed as a.out, apart
// from every other tensor), then rms_norm from o into a.out.
void gated_delta_rule_with_staged_norm(Stream& stream, const GatedDeltaRuleArgs& a, const Tensor& o,
                                       void (*rule)(Stream&, const GatedDeltaRuleArgs&),
                                       void (*rms_norm)(Stream&, const RmsNormArgs&));
// The same with o in host memory, for host-memory backends.
void gated_delta_rule_with_staged_norm_on_host(Stream& stream, const GatedDeltaRuleArgs& a,
                                               void (*rule)(Stream&, const GatedDeltaRuleArgs&),
                                               void (*rms_norm)(Stream&, const RmsNormArgs&));
void gated_delta_rule(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state,
                      const GatedDeltaRuleParams& params = {});

}  // namespace ding::ops
