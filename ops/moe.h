// Mixture-of-experts routing in three steps:
//   moe_route:   scores = softmax(logits) or σ(logits); pick the top-k experts per token
//                (ties: lower expert index first), weights = their scores, optionally
//                renormalised to sum 1, then multiplied by routed_scaling.
//   moe_group:   sort the T·k (token, choice) slots by expert (stable in slot index), so each
//                expert's inputs are one contiguous block: offsets[e]..offsets[e+1]. Optionally
//                gathers the token rows into that order for the expert matmuls.
//   moe_combine: out[t] = Σ_j weights[t, j] · y_grouped[positions[t·k + j]].
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

enum class MoeScoring : uint8_t { softmax, sigmoid };

struct MoeRouteParams {
  int64_t k = 2;
  MoeScoring scoring = MoeScoring::softmax;
  bool renormalize = true;      // Mixtral/Qwen-MoE: true; OLMoE: false
  float routed_scaling = 1.0f;  // DeepSeek's routed_scaling_factor
};

struct MoeRouteArgs {
  Tensor weights;  // f32 [T, k]
  Tensor experts;  // i32 [T, k]
  Tensor logits;   // [T, E], f32/f16/bf16
  MoeRouteParams params;
};

struct MoeGroupArgs {
  Tensor offsets;    // i32 [E + 1]: expert e owns grouped rows [offsets[e], offsets[e+1])
  Tensor slots;      // i32 [T·k]: grouped row p holds slot slots[p] = t·k + j
  Tensor positions;  // i32 [T·k]: the inverse, positions[t·k + j] = p
  Tensor experts;    // i32 [T, k], from moe_route; values in [0, E) (host backends check)
  Tensor x;          // [T, C], optional: gathered into x_grouped
  Tensor x_grouped;  // [T·k, C], optional (with x): x_grouped[p] = x[slots[p] / k]
};

struct MoeCombineArgs {
  Tensor out;        // [T, C], f32/f16/bf16
  Tensor y_grouped;  // [T·k, C], the experts' outputs in grouped order
  Tensor weights;    // f32 [T, k]
  Tensor positions;  // i32 [T·k], from moe_group
};

void validate(const Device& device, const MoeRouteArgs& a);
void validate(const Device& device, const MoeGroupArgs& a);
void validate(const Device& device, const MoeCombineArgs& a);
Cost cost(const MoeRouteArgs& a);
Cost cost(const MoeGroupArgs& a);
Cost cost(const MoeCombineArgs& a);
void moe_route(Stream& stream, Tensor weights, Tensor experts, Tensor logits, const MoeRouteParams& params);
void moe_group(Stream& stream, Tensor offsets, Tensor slots, Tensor positions, Tensor experts,
               Tensor x = {}, Tensor x_grouped = {});
void moe_combine(Stream& stream, Tensor out, Tensor y_grouped, Tensor weights, Tensor positions);

}  // namespace ding::ops
