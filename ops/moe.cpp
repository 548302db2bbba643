#include "ding/ops/moe.h"

#include <fmt/format.h>

#include <algorithm>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

namespace {

// moe_group's checks, for that op and for moe_route's grouping, each naming its own op.
void check_grouping(Check& c, const MoeGroupArgs& a) {
  c.tensor("experts", a.experts, 2, 2);
  const int64_t slots = a.experts.dim(0) * a.experts.dim(1);
  for (auto [name, t] : {std::pair{"experts", &a.experts}, {"offsets", &a.offsets}, {"slots", &a.slots}, {"positions", &a.positions}}) {
    if (t != &a.experts) c.tensor(name, *t, 1, 1);
    c.dtype_in(name, *t, {DType::i32});
    c.contiguous(name, *t);
  }
  if (a.offsets.dim(0) < 2) c.fail(ErrorCode::shape_mismatch, fmt::format("offsets {} must hold E + 1 ≥ 2 entries", shape_of(a.offsets)));
  c.dim("slots", a.slots, 0, slots, "T·k (from experts)");
  c.dim("positions", a.positions, 0, slots, "T·k (from experts)");
  for (auto [name, t] : {std::pair{"offsets", &a.offsets}, {"slots", &a.slots}, {"positions", &a.positions}}) {
    c.disjoint(name, *t, "experts", a.experts);
    if (t != &a.offsets) c.disjoint(name, *t, "offsets", a.offsets);
  }
  c.disjoint("slots", a.slots, "positions", a.positions);
  if (a.x.defined() != a.x_grouped.defined())
    c.fail(ErrorCode::invalid_argument, "x and x_grouped must be given together");
  if (a.x.defined()) {
    c.tensor("x", a.x, 2, 2);
    c.tensor("x_grouped", a.x_grouped, 2, 2);
    c.float_dtype("x", a.x);
    c.float_dtype("x_grouped", a.x_grouped);
    c.contiguous("x", a.x);
    c.contiguous("x_grouped", a.x_grouped);
    c.dim("x", a.x, 0, a.experts.dim(0), "T (from experts)");
    c.dim("x_grouped", a.x_grouped, 0, slots, "T·k (from experts)");
    c.dim("x_grouped", a.x_grouped, 1, a.x.dim(1), "C (from x)");
    c.disjoint("x_grouped", a.x_grouped, "x", a.x);
  }
}

}  // namespace

void validate(const Device& device, const MoeRouteArgs& a) {
  Check c("moe_route", device);
  c.tensor("logits", a.logits, 2, 2);
  c.float_dtype("logits", a.logits);
  c.contiguous("logits", a.logits);
  const int64_t T = a.logits.dim(0), E = a.logits.dim(1), k = a.params.k;
  if (k < 1 || k > E) c.fail(ErrorCode::invalid_argument, fmt::format("k must be in [1, E = {}], got {}", E, k));
  c.positive("routed_scaling", a.params.routed_scaling);
  const int64_t groups = a.params.groups, top_groups = a.params.top_groups;
  if (groups < 1 || E % groups != 0)
    c.fail(ErrorCode::invalid_argument, fmt::format("groups must be ≥ 1 and divide E = {}, got {}", E, groups));
  if (top_groups < 1 || top_groups > groups)
    c.fail(ErrorCode::invalid_argument, fmt::format("top_groups must be in [1, groups = {}], got {}", groups, top_groups));
  // The top-k is taken among the kept groups' experts only: they must hold k of them.
  if (k > top_groups * (E / groups))
    c.fail(ErrorCode::invalid_argument,
           fmt::format("k = {} exceeds the {} experts of top_groups = {} groups of E/groups = {}", k,
                       top_groups * (E / groups), top_groups, E / groups));
  c.tensor("weights", a.weights, 2, 2);
  c.dtype_in("weights", a.weights, {DType::f32});
  c.contiguous("weights", a.weights);
  c.tensor("experts", a.experts, 2, 2);
  c.dtype_in("experts", a.experts, {DType::i32});
  c.contiguous("experts", a.experts);
  for (auto [name, t] : {std::pair{"weights", &a.weights}, {"experts", &a.experts}}) {
    c.dim(name, *t, 0, T, "T (from logits)");
    c.dim(name, *t, 1, k, "k");
    c.disjoint(name, *t, "logits", a.logits);
  }
  c.disjoint("weights", a.weights, "experts", a.experts);
  if (a.norm.kind != NormKind::none) {
    if (!a.x.defined()) c.fail(ErrorCode::invalid_argument, "norm needs x, the rows it normalises");
    if (!a.h.defined()) c.fail(ErrorCode::invalid_argument, "norm needs h, where the normed rows go");
    c.tensor("h", a.h, 2, 2);
    c.contiguous("h", a.h);
    c.same_shape("h", a.h, "x", a.x);
    if (a.h.dtype != a.x.dtype)
      c.fail(ErrorCode::dtype_mismatch, fmt::format("h must be x's dtype {}, got {}", dtype_name(a.x.dtype), dtype_name(a.h.dtype)));
    check_norm(c, a.norm, a.x.dim(-1), "h", a.h);
    for (auto [name, t] : {std::pair{"x", &a.x}, {"logits", &a.logits}, {"weights", &a.weights}, {"experts", &a.experts},
                           {"router_w", &a.router_w}, {"offsets", &a.offsets}, {"slots", &a.slots},
                           {"positions", &a.positions}, {"x_grouped", &a.x_grouped}})
      if (t->defined()) c.disjoint("h", a.h, name, *t);
  } else if (a.h.defined()) {
    c.fail(ErrorCode::invalid_argument, "h is given but no norm writes it");
  }
  if (a.router_w.defined()) {
    if (!a.x.defined()) c.fail(ErrorCode::invalid_argument, "router_w needs x, the rows it scores");
    if (a.logits.dtype != DType::f32)
      c.fail(ErrorCode::dtype_mismatch, fmt::format("logits must be f32 where the op computes them from router_w, got {}",
                                                    dtype_name(a.logits.dtype)));
    c.tensor("router_w", a.router_w, 2, 2);
    c.float_dtype("router_w", a.router_w);
    c.contiguous("router_w", a.router_w);
    c.dim("router_w", a.router_w, 0, E, "E (from logits)");
    for (auto [name, t] : {std::pair{"weights", &a.weights}, {"experts", &a.experts}}) c.disjoint(name, *t, "router_w", a.router_w);
  }
  if (a.x.defined()) {
    c.tensor("x", a.x, 2, 2);
    c.float_dtype("x", a.x);
    c.contiguous("x", a.x);
    c.dim("x", a.x, 0, T, "T (from logits)");
    if (a.router_w.defined()) c.dim("router_w", a.router_w, 1, a.x.dim(1), "C (from x)");
    for (auto [name, t] : {std::pair{"logits", &a.logits}, {"weights", &a.weights}, {"experts", &a.experts}})
      c.disjoint(name, *t, "x", a.x);
  }
  if (a.x_grouped.defined() && !a.x.defined()) c.fail(ErrorCode::invalid_argument, "x_grouped needs x, the rows it gathers");
  if (a.x.defined() && !a.router_w.defined() && !a.x_grouped.defined() && !has_norm(a))
    c.fail(ErrorCode::invalid_argument, "x is given but neither norm, router_w nor x_grouped uses it");
  const bool grouping = a.offsets.defined() || a.slots.defined() || a.positions.defined();
  if (grouping && !has_grouping(a))
    c.fail(ErrorCode::invalid_argument, "offsets, slots and positions must be given together");
  if (a.x_grouped.defined() && !grouping)
    c.fail(ErrorCode::invalid_argument, "x_grouped needs offsets, slots and positions, the grouping it follows");
  if (grouping) {
    check_grouping(c, grouping_part(a));
    c.dim("offsets", a.offsets, 0, E + 1, "E + 1 (E from logits)");
    for (auto [name, t] : {std::pair{"offsets", &a.offsets}, {"slots", &a.slots}, {"positions", &a.positions}}) {
      c.disjoint(name, *t, "logits", a.logits);
      c.disjoint(name, *t, "weights", a.weights);
    }
    if (a.x_grouped.defined()) {
      for (auto [name, t] : {std::pair{"logits", &a.logits}, {"weights", &a.weights}, {"offsets", &a.offsets},
                             {"slots", &a.slots}, {"positions", &a.positions}})
        c.disjoint("x_grouped", a.x_grouped, name, *t);
    }
  }
}

bool has_parts(const MoeRouteArgs& a) { return has_norm(a) || has_router(a) || has_grouping(a); }

bool has_norm(const MoeRouteArgs& a) { return a.norm.kind != NormKind::none; }

bool has_router(const MoeRouteArgs& a) { return a.router_w.defined(); }

bool has_grouping(const MoeRouteArgs& a) { return a.offsets.defined() && a.slots.defined() && a.positions.defined(); }

namespace {
// The rows the router and the gather read: h where the op normalises x first.
Tensor routed_rows(const MoeRouteArgs& a) { return has_norm(a) ? a.h : a.x; }
}  // namespace

MatmulArgs norm_part(const MoeRouteArgs& a) { return {a.logits, a.x, a.router_w, {.norm = a.norm}}; }

MatmulArgs router_part(const MoeRouteArgs& a) { return {a.logits, routed_rows(a), a.router_w}; }

MoeRouteArgs routing_part(const MoeRouteArgs& a) { return {a.weights, a.experts, a.logits, a.params}; }

MoeGroupArgs grouping_part(const MoeRouteArgs& a) {
  return {a.offsets, a.slots, a.positions, a.experts, a.x_grouped.defined() ? routed_rows(a) : Tensor{}, a.x_grouped};
}

void moe_route_in_parts(Stream& stream, const MoeRouteArgs& a, const MoeRouteKernels& kernels) {
  if (a.norm.kind == NormKind::layer_norm) kernels.layer_norm(stream, prologue_layer_norm(norm_part(a), a.h));
  if (a.norm.kind == NormKind::rms_norm) kernels.rms_norm(stream, prologue_rms_norm(norm_part(a), a.h));
  if (has_router(a)) kernels.matmul(stream, router_part(a));
  kernels.moe_route(stream, routing_part(a));
  if (has_grouping(a)) kernels.moe_group(stream, grouping_part(a));
}

void validate(const Device& device, const MoeGroupArgs& a) {
  Check c("moe_group", device);
  check_grouping(c, a);
}

void validate(const Device& device, const MoeMatmulArgs& a) {
  Check c("moe_matmul", device);
  if (a.activation != Activation::none && a.activation != Activation::swiglu)
    c.fail(ErrorCode::invalid_argument, "activation must be none or swiglu");
  c.tensor("out", a.out, 2, 2);
  c.tensor("x", a.x, 2, 2);
  c.tensor("w", a.w, 3, 3);
  c.tensor("offsets", a.offsets, 1, 1);
  for (auto [name, t] : {std::pair{"out", &a.out}, {"x", &a.x}, {"w", &a.w}}) c.contiguous(name, *t);
  c.float_dtype("out", a.out);
  c.float_dtype("x", a.x);
  c.weight_dtype("w", a.w);
  c.dtype_in("offsets", a.offsets, {DType::i32});
  c.contiguous("offsets", a.offsets);
  const int64_t P = a.x.dim(0), K = a.x.dim(1), E = a.w.dim(0), N = a.out.dim(1);
  const bool swiglu = a.activation == Activation::swiglu;
  c.dim("out", a.out, 0, P, "P (from x)");
  c.dim("w", a.w, 1, swiglu ? 2 * N : N, swiglu ? "2N (swiglu: gate and up rows, N from out)" : "N (from out)");
  c.dim("w", a.w, 2, K, "K (from x)");
  c.dim("offsets", a.offsets, 0, E + 1, "E + 1 (E from w)");
  for (auto [name, t] : {std::pair{"x", &a.x}, {"w", &a.w}, {"offsets", &a.offsets}}) c.disjoint("out", a.out, name, *t);
}

void validate(const Device& device, const MoeCombineArgs& a) {
  Check c("moe_combine", device);
  c.tensor("weights", a.weights, 2, 2);
  c.dtype_in("weights", a.weights, {DType::f32});
  c.contiguous("weights", a.weights);
  const int64_t T = a.weights.dim(0), k = a.weights.dim(1);
  c.tensor("out", a.out, 2, 2);
  c.tensor("y_grouped", a.y_grouped, 2, 2);
  c.tensor("positions", a.positions, 1, 1);
  c.float_dtype("out", a.out);
  c.float_dtype("y_grouped", a.y_grouped);
  c.dtype_in("positions", a.positions, {DType::i32});
  for (auto [name, t] : {std::pair{"out", &a.out}, {"y_grouped", &a.y_grouped}, {"positions", &a.positions}}) c.contiguous(name, *t);
  c.dim("out", a.out, 0, T, "T (from weights)");
  c.dim("y_grouped", a.y_grouped, 0, T * k, "T·k (from weights)");
  c.dim("y_grouped", a.y_grouped, 1, a.out.dim(1), "C (from out)");
  c.dim("positions", a.positions, 0, T * k, "T·k (from weights)");
  for (auto [name, t] : {std::pair{"y_grouped", &a.y_grouped}, {"weights", &a.weights}, {"positions", &a.positions}})
    c.disjoint("out", a.out, name, *t);
  if (a.residual.defined()) {
    c.tensor("residual", a.residual, 2, 2);
    c.float_dtype("residual", a.residual);
    c.contiguous("residual", a.residual);
    c.same_shape("residual", a.residual, "out", a.out);
    c.same_or_disjoint("out", a.out, "residual", a.residual);
  }
}

Cost cost(const MoeRouteArgs& a) {
  Cost c{4.0 * double(a.logits.numel()), double(a.logits.nbytes() + a.weights.nbytes() + a.experts.nbytes())};
  if (has_norm(a)) {
    // As matmul's prologue counts it: about 8 FLOPs per element of x; x read, h written, the weights.
    c.flops += 8.0 * double(a.x.numel());
    c.bytes += double(a.x.nbytes() + a.h.nbytes() + a.norm.weight.nbytes());
    if (a.norm.bias.defined()) c.bytes += double(a.norm.bias.nbytes());
  }
  if (has_router(a)) {
    const Cost router = cost(router_part(a));
    c.flops += router.flops;
    c.bytes += router.bytes;  // the logits are written there and read back here
  }
  if (has_grouping(a)) c.bytes += cost(grouping_part(a)).bytes;
  return c;
}

Cost cost(const MoeGroupArgs& a) {
  Cost c{0, double(a.experts.nbytes() + a.offsets.nbytes() + a.slots.nbytes() + a.positions.nbytes())};
  if (a.x.defined()) c.bytes += double(a.x_grouped.nbytes()) * (1.0 + double(dtype_size(a.x.dtype)) / double(dtype_size(a.x_grouped.dtype)));
  return c;
}

Cost cost(const MoeMatmulArgs& a, int64_t active_experts) {
  const int64_t P = a.x.dim(0), E = a.w.dim(0), rows = a.w.dim(1), K = a.w.dim(2);
  const double active = double(active_experts >= 0 ? active_experts : std::min(E, P));
  // A quantized expert's f32 row scales are read with its rows.
  const double scale_bytes = quantized_weight(a.w.dtype) ? 4.0 : 0.0;
  return {2.0 * double(P) * double(rows) * double(K),
          active * double(rows) * (double(K) * double(dtype_size(a.w.dtype)) + scale_bytes) +
              double(a.x.nbytes() + a.out.nbytes() + a.offsets.nbytes())};
}

Cost cost(const MoeCombineArgs& a) {
  Cost c{2.0 * double(a.y_grouped.numel()),
         double(a.out.nbytes() + a.y_grouped.nbytes() + a.weights.nbytes() + a.positions.nbytes())};
  if (a.residual.defined()) c.bytes += double(a.residual.nbytes());
  return c;
}

void moe_route(Stream& stream, Tensor weights, Tensor experts, Tensor logits, const MoeRouteParams& params) {
  dispatch(stream, MoeRouteArgs{weights, experts, logits, params});
}

void moe_route(Stream& stream, const MoeRouteArgs& args) { dispatch(stream, args); }

void moe_group(Stream& stream, Tensor offsets, Tensor slots, Tensor positions, Tensor experts, Tensor x, Tensor x_grouped) {
  dispatch(stream, MoeGroupArgs{offsets, slots, positions, experts, x, x_grouped});
}

void moe_matmul(Stream& stream, Tensor out, Tensor x, Tensor w, Tensor offsets, Activation activation) {
  dispatch(stream, MoeMatmulArgs{out, x, w, offsets, activation});
}

void moe_matmul(Stream& stream, const MoeMatmulArgs& args) { dispatch(stream, args); }

void moe_combine(Stream& stream, Tensor out, Tensor y_grouped, Tensor weights, Tensor positions, Tensor residual) {
  dispatch(stream, MoeCombineArgs{out, y_grouped, weights, positions, residual});
}

}  // namespace ding::ops
