// linear_attention: causal linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"),
// with an optional per-token decay (gated linear attention; RetNet's and Mamba-2's scalar decay).
// Per sequence b and value head h a state S ∈ ℝ^{Dk×Dv} (f32) is all the layer keeps of the past:
//   S ← α_t·S + k_t v_tᵀ        α_t = e^(g_t) (1 without g)
//   o_t = Sᵀ(s·q_t)             s = scale (0: 1/√Dk)
// i.e. o_t = Σ_{j≤t} (α_{j+1}⋯α_t)(s q_t·k_j) v_j + (α_1⋯α_t) S_0ᵀ(s q_t): softmax attention with
// the exponential replaced by a dot product, computed in O(1) per token. Keys and queries are used
// as given (a feature map, if any, is the caller's). Value head h reads key head h / (Hv / Hk).
//
// The chunk-wise form (params.chunk > 1), for prefill: within a chunk of n tokens from S_0, with
// G_i = g_1 + … + g_i and γ_i = e^(G_i),
//   o_i = γ_i S_0ᵀ(s q_i) + Σ_{j≤i} (γ_i/γ_j)(s q_i·k_j) v_j,    S_n = γ_n S_0 + Σ_j (γ_n/γ_j) k_j v_jᵀ
// matrix products over the chunk, equal to the recurrent form in exact arithmetic. It is the gated
// delta rule (ops/delta_rule.h) without the delta correction and with β = 1, and the backends run
// it as that (GatedDeltaRuleParams::delta = false), one kernel for both recurrences.
#pragma once
#include "ding/ops/delta_rule.h"

namespace ding::ops {

struct LinearAttentionParams {
  float scale = 0.0f;  // s; 0 = 1/√Dk
  int64_t chunk = 0;   // as GatedDeltaRuleParams::chunk: 1 the recurrent form, > 1 chunk-wise, 0 the backend's choice
};

struct LinearAttentionArgs {
  Tensor out;    // [B, T, Hv, Dv], f32/f16/bf16, last dim contiguous
  Tensor q;      // [B, T, Hk, Dk], last dim contiguous; Hv % Hk == 0
  Tensor k;      // [B, T, Hk, Dk]
  Tensor v;      // [B, T, Hv, Dv]
  Tensor g;      // [B, T, Hv], any strides: the log decay; optional (no decay)
  Tensor state;  // f32 [B, Hv, Dk, Dv], in-out, contiguous; a sequence starts from zeros
  LinearAttentionParams params;
};

// What the backends run: the delta rule without its correction.
GatedDeltaRuleArgs as_gated_delta_rule(const LinearAttentionArgs& a);
void validate(const Device& device, const LinearAttentionArgs& a);
Cost cost(const LinearAttentionArgs& a);
void linear_attention(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, Tensor g, Tensor state,
                      const LinearAttentionParams& params = {});

}  // namespace ding::ops
