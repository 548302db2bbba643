// A mixture-of-experts layer in four steps:
//   moe_route:   scores = softmax(logits) or σ(logits); pick the top-k experts per token
//                (ties: lower expert index first), weights = their scores, optionally
//                renormalised to sum 1, then multiplied by routed_scaling. With groups > 1
//                (DeepSeek-V2's group_limited_greedy) the experts split into `groups`
//                consecutive groups of E/groups, a group's score is its best expert's, only the
//                top_groups best groups (ties: lower group first) are eligible, and the top-k is
//                taken among their experts; the scores themselves, and so the weights, stay
//                those over all E experts. It may also norm the rows and compute the logits
//                from the router's weights first, and group its choices after, as moe_group
//                does (MoeRouteArgs).
//   moe_group:   sort the T·k (token, choice) slots by expert (stable in slot index), so each
//                expert's inputs are one contiguous block: offsets[e]..offsets[e+1]. Optionally
//                gathers the token rows into that order for the expert matmuls.
//   moe_matmul:  every expert's product over its block of grouped rows, as one segmented matmul:
//                out[p] = act(x[p] · W[e]ᵀ) for offsets[e] ≤ p < offsets[e+1], act none or swiglu
//                exactly as matmul defines them (swiglu: W[e] = [W_gate; W_up], 2N rows, and
//                out[p, j] = silu(g)·u). Only experts that own rows are read, so a decode step at
//                one token reads k experts' weights, and the offsets stay on the device.
//   moe_combine: out[t] = residual[t] + Σ_j weights[t, j] · y_grouped[positions[t·k + j]]
//                (residual optional; it may be out itself, the layer's residual stream).
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/ops/matmul.h"
#include "ding/profile.h"

namespace ding::ops {

enum class MoeScoring : uint8_t { softmax, sigmoid };

struct MoeRouteParams {
  int64_t k = 2;
  MoeScoring scoring = MoeScoring::softmax;
  bool renormalize = true;      // Mixtral/Qwen-MoE: true; OLMoE: false
  float routed_scaling = 1.0f;  // DeepSeek's routed_scaling_factor
  int64_t groups = 1;           // DeepSeek-V2's n_group: divides E; 1 = no grouping
  int64_t top_groups = 1;       // its topk_group: in [1, groups], k ≤ top_groups · E/groups
};

struct MoeRouteArgs {
  Tensor weights;  // f32 [T, k]
  Tensor experts;  // i32 [T, k]
  Tensor logits;   // [T, E], f32/f16/bf16; with router_w, f32 and written by the op
  MoeRouteParams params;
  // Optional, the router's product first: logits = x · router_wᵀ, exactly ops::matmul's into f32.
  Tensor x;         // [T, C], f32/f16/bf16: the tokens' rows
  Tensor router_w;  // [E, C], f32/f16/bf16
  // Optional, before all of it: h = norm(x), exactly matmul's prologue (the norm op, its result
  // rounded to x's dtype), written to h; the router and the gather then read h in x's place.
  MatmulNorm norm;
  Tensor h;  // [T, C], x's dtype: with norm
  // Optional, then moe_group of the choices (offsets, slots and positions together; x_grouped with
  // x), exactly as that op defines them. So a decode step's routing can be a single launch.
  Tensor offsets;    // i32 [E + 1]
  Tensor slots;      // i32 [T·k]
  Tensor positions;  // i32 [T·k]
  Tensor x_grouped;  // [T·k, C], f32/f16/bf16
};

struct MoeGroupArgs {
  Tensor offsets;    // i32 [E + 1]: expert e owns grouped rows [offsets[e], offsets[e+1])
  Tensor slots;      // i32 [T·k]: grouped row p holds slot slots[p] = t·k + j
  Tensor positions;  // i32 [T·k]: the inverse, positions[t·k + j] = p
  Tensor experts;    // i32 [T, k], from moe_route; values in [0, E) (host backends check)
  Tensor x;          // [T, C], optional: gathered into x_grouped
  Tensor x_grouped;  // [T·k, C], optional (with x): x_grouped[p] = x[slots[p] / k]
};

// x, w: f32/f16/bf16 in any combination, or w quantized as matmul's may be (ops/matmul.h): i8 or
// f8e4m3 values with one f32 scale per row of w, every expert's rows in order (w.scales, E·N or
// E·2N of them), so that W[e][r, k] = q[e, r, k]·scale[e·rows + r]. Accumulation is f32 in
// kernels, f64 in the reference; swiglu combines g and u before the one rounding to out's dtype.
// As for matmul, f8e4m3 experts beside 16-bit x over more rows than experts (P > E: a prefill's
// rows, not a decode step's) let a backend round each row of x to E4M3 with a scale of its own,
// and i8 experts beside 16-bit x let it round each row of x to integers (any P).
struct MoeMatmulArgs {
  Tensor out;      // [P, N], f32/f16/bf16
  Tensor x;        // [P, K]: the grouped rows (moe_group's x_grouped)
  Tensor w;        // [E, N, K]; swiglu: [E, 2N, K]; f32/f16/bf16, or i8/f8e4m3 with row scales
  Tensor offsets;  // i32 [E + 1], from moe_group: 0 = offsets[0] ≤ … ≤ offsets[E] = P (host backends check)
  Activation activation = Activation::none;  // none or swiglu
  // A scheduling hint that changes no result: true when the op just before this one on the stream
  // did not write offsets (a decode step's down projection, with the gate/up product between it
  // and the routing). A backend whose kernels overlap their predecessor (the GPU's chained launches)
  // may then read the offsets, and the weights they select, before that op has finished.
  bool offsets_from_earlier_op = false;
};

struct MoeCombineArgs {
  Tensor out;        // [T, C], f32/f16/bf16
  Tensor y_grouped;  // [T·k, C], the experts' outputs in grouped order
  Tensor weights;    // f32 [T, k]
  Tensor positions;  // i32 [T·k], from moe_group
  Tensor residual;   // [T, C], optional, f32/f16/bf16; may be out itself
};

void validate(const Device& device, const MoeRouteArgs& a);
// moe_route's parts as the ops they stand for (the norm, as matmul's prologue; the router's matmul;
// the routing alone; the grouping), and, for a backend that runs them apart, the four in order
// through its own kernels.
bool has_parts(const MoeRouteArgs& a);  // a norm, a router or a grouping beside the routing
bool has_norm(const MoeRouteArgs& a);
bool has_router(const MoeRouteArgs& a);
bool has_grouping(const MoeRouteArgs& a);
MatmulArgs norm_part(const MoeRouteArgs& a);  // matmul's prologue: prologue_*_norm(norm_part(a), a.h)
MatmulArgs router_part(const MoeRouteArgs& a);
MoeRouteArgs routing_part(const MoeRouteArgs& a);
MoeGroupArgs grouping_part(const MoeRouteArgs& a);
struct MoeRouteKernels {
  void (*layer_norm)(Stream&, const LayerNormArgs&);
  void (*rms_norm)(Stream&, const RmsNormArgs&);
  void (*matmul)(Stream&, const MatmulArgs&);
  void (*moe_route)(Stream&, const MoeRouteArgs&);
  void (*moe_group)(Stream&, const MoeGroupArgs&);
};
void moe_route_in_parts(Stream& stream, const MoeRouteArgs& a, const MoeRouteKernels& kernels);
void validate(const Device& device, const MoeGroupArgs& a);
void validate(const Device& device, const MoeMatmulArgs& a);
void validate(const Device& device, const MoeCombineArgs& a);
Cost cost(const MoeRouteArgs& a);
Cost cost(const MoeGroupArgs& a);
// Bytes count the weights of the experts that own rows, each read once: `active_experts` where the
// caller knows how many (the offsets live on the device), else min(E, P), every expert that can.
Cost cost(const MoeMatmulArgs& a, int64_t active_experts = -1);
Cost cost(const MoeCombineArgs& a);
void moe_route(Stream& stream, Tensor weights, Tensor experts, Tensor logits, const MoeRouteParams& params);
void moe_route(Stream& stream, const MoeRouteArgs& args);
void moe_group(Stream& stream, Tensor offsets, Tensor slots, Tensor positions, Tensor experts,
               Tensor x = {}, Tensor x_grouped = {});
void moe_matmul(Stream& stream, Tensor out, Tensor x, Tensor w, Tensor offsets,
                Activation activation = Activation::none);
void moe_matmul(Stream& stream, const MoeMatmulArgs& args);
void moe_combine(Stream& stream, Tensor out, Tensor y_grouped, Tensor weights, Tensor positions,
                 Tensor residual = {});

}  // namespace ding::ops
