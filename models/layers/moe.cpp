// The mixture-of-experts feed-forward: x ← x + Σ_j weight_j · expert_j(h) + shared(h), h = norm(x),
// expert(h) = W_down · (silu(W_gate h) ⊙ W_up h). Every step is a device op, so routing results
// never visit the host and a decode step records into a graph like any other:
//   h = norm(x)                              moe_route, which normalises x, computes the logits in
//   logits = W_router h                      f32 (the choice of experts needs no rounding), routes,
//   weights, experts = top-k of the scores   and groups its choices as moe_group does (offsets:
//   h_grouped = h's rows sorted by expert    each expert's block of rows): a decode step's routing
//                                            in one launch
//   hidden = silu(g) ⊙ u per expert          moe_matmul, swiglu: reads only the chosen experts
//   y = W_down hidden per expert             moe_matmul
//   x += shared(h)                           matmul ×2, where the model has shared experts; Qwen3-Next
//                                            gates them: σ(w_g·h) scales the hidden before W_down
//                                            (sigmoid_gate, one logit per row), the same product
//   x += Σ_j weights · y                     moe_combine, residual in place
#include <algorithm>

#include "ding/models/layers/block.h"
#include "ding/ops/ops.h"

namespace ding {

// moe_route runs its norm, router and grouping through the backend's own kernels where it does not
// fuse them: they are its parts, not ops this layer dispatches.
std::vector<std::string_view> mixture_of_experts_ops(const ModelConfig& c) {
  std::vector<std::string_view> ops = {"moe_route", "moe_matmul", "moe_combine"};
  if (c.moe.shared_d_ff > 0) ops.push_back("matmul");
  if (c.moe.shared_gate) ops.push_back("sigmoid_gate");
  return ops;
}

size_t mixture_of_experts_scratch_bytes(const ModelConfig& c, DType dtype, int64_t rows) {
  const bool any = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.moe; });
  if (!any) return 0;
  const int64_t E = c.moe.experts, k = c.moe.route.k, C = c.d_model, F = c.moe.d_ff, slots = rows * k;
  const size_t element = dtype_size(dtype);
  const size_t takes[] = {size_t(rows * C) * element,                  // h
                          size_t(rows * E) * 4,                        // logits
                          size_t(slots) * 4 * 2,                       // weights, experts
                          size_t(E + 1) * 4, size_t(slots) * 4 * 2,    // offsets, slots, positions
                          size_t(slots * C) * element,                 // h_grouped
                          size_t(slots * F) * element,                 // hidden
                          size_t(slots * C) * element,                 // y
                          size_t(rows * c.moe.shared_d_ff) * element,   // the shared experts' hidden
                          size_t(rows) * 4};                            // their gate's logits
  size_t bytes = 0;
  for (size_t t : takes) bytes += (t + 255) / 256 * 256 + 256;  // each take aligned to 256 bytes
  return bytes;
}

void mixture_of_experts(const Step& s, const MoeWeights& w) {
  const ModelConfig& c = *s.config;
  const int64_t n = s.n, E = c.moe.experts, k = c.moe.route.k, C = c.d_model, F = c.moe.d_ff, slots = n * k;
  const DType dt = s.x.dtype;
  Workspace& scratch = *s.scratch;
  Stream& stream = *s.stream;

  const Tensor h = scratch.take(dt, {n, C});
  const Tensor logits = scratch.take(DType::f32, {n, E});
  const Tensor weights = scratch.take(DType::f32, {n, k});
  const Tensor experts = scratch.take(DType::i32, {n, k});
  const Tensor offsets = scratch.take(DType::i32, {E + 1});
  const Tensor slot_of = scratch.take(DType::i32, {slots});
  const Tensor positions = scratch.take(DType::i32, {slots});
  const Tensor h_grouped = scratch.take(dt, {slots, C});
  ops::moe_route(stream, {.weights = weights, .experts = experts, .logits = logits, .params = c.moe.route, .x = s.x,
                          .router_w = w.router_w,
                          .norm = {.kind = ops::NormKind::rms_norm, .weight = w.norm_w, .eps = c.norm_eps}, .h = h,
                          .offsets = offsets, .slots = slot_of, .positions = positions, .x_grouped = h_grouped});
  const Tensor hidden = scratch.take(dt, {slots, F});
  ops::moe_matmul(stream, hidden, h_grouped, w.up_w.reshape({E, 2 * F, C}), offsets, ops::Activation::swiglu);
  const Tensor y = scratch.take(dt, {slots, C});
  ops::moe_matmul(stream, {.out = y, .x = hidden, .w = w.down_w.reshape({E, C, F}), .offsets = offsets,
                           .offsets_from_earlier_op = true});

  if (c.moe.shared_d_ff > 0) {
    const Tensor shared = scratch.take(dt, {n, c.moe.shared_d_ff});
    ops::matmul(stream, shared, h, w.shared_up_w, {.activation = ops::Activation::swiglu});
    if (c.moe.shared_gate) {
      const Tensor gate = scratch.take(DType::f32, {n, 1});
      ops::matmul(stream, gate, h, w.shared_gate_w);
      ops::sigmoid_gate(stream, shared, shared, gate);
    }
    ops::matmul(stream, s.x, shared, w.shared_down_w, {.residual = s.x});
  }
  ops::moe_combine(stream, s.x, y, weights, positions, s.x);
}

}  // namespace ding
