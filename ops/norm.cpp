#include "ding/ops/norm.h"

#include <fmt/format.h>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

namespace {

// weight (or bias) [..., C]: its dims are x's last ones.
void norm_weight_shape(const Check& c, const char* name, const Tensor& weight, const Tensor& x) {
  c.dim(name, weight, weight.rank - 1, x.dim(-1), "C (from x)");
  for (int i = 2; i <= weight.rank; ++i)
    if (weight.dim(-i) != x.dim(-i))
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("{} has shape {}: its leading dims must be x's last ones (x is {})", name,
                         shape_of(weight), shape_of(x)));
}

// The checks layer_norm and rms_norm share: a row-wise op with optional residual stream.
void validate_norm(const Check& c, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                   const Tensor& residual, const Tensor& sum_out) {
  c.tensor("x", x, 1, kMaxRank);
  c.tensor("out", out, x.rank, x.rank);
  c.tensor("weight", weight, 1, x.rank);
  for (auto [name, t] : {std::pair{"x", &x}, {"out", &out}, {"weight", &weight}}) c.float_dtype(name, *t);
  // Rows may sit anywhere (strided views of fused products); within a row, kernels step by one.
  c.last_dim_contiguous("x", x);
  c.last_dim_contiguous("out", out);
  c.contiguous("weight", weight);
  c.same_shape("out", out, "x", x);
  norm_weight_shape(c, "weight", weight, x);
  c.positive("eps", eps);
  c.disjoint("out", out, "x", x);
  if (residual.defined()) {
    c.tensor("residual", residual, x.rank, x.rank);
    c.float_dtype("residual", residual);
    c.last_dim_contiguous("residual", residual);
    c.same_shape("residual", residual, "x", x);
    c.disjoint("out", out, "residual", residual);
  }
  if (sum_out.defined()) {
    if (!residual.defined()) c.fail(ErrorCode::invalid_argument, "sum_out is given without a residual to add");
    c.tensor("sum_out", sum_out, x.rank, x.rank);
    c.float_dtype("sum_out", sum_out);
    c.last_dim_contiguous("sum_out", sum_out);
    c.same_shape("sum_out", sum_out, "x", x);
    c.same_or_disjoint("sum_out", sum_out, "x", x);
    c.same_or_disjoint("sum_out", sum_out, "residual", residual);
    c.disjoint("out", out, "sum_out", sum_out);
  }
}

Cost norm_cost(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
               const Tensor& sum_out) {
  Cost c;
  c.flops = 7.0 * double(x.numel());
  for (const Tensor* t : {&out, &x, &weight, &bias, &residual, &sum_out})
    if (t->defined()) c.bytes += double(t->nbytes());
  return c;
}

}  // namespace

void validate(const Device& device, const LayerNormArgs& a) {
  Check c("layer_norm", device);
  validate_norm(c, a.out, a.x, a.weight, a.params.eps, a.params.residual, a.params.sum_out);
  if (a.params.bias.defined()) {
    c.tensor("bias", a.params.bias, 1, a.x.rank);
    c.float_dtype("bias", a.params.bias);
    c.contiguous("bias", a.params.bias);
    c.same_shape("bias", a.params.bias, "weight", a.weight);
  }
}

void validate(const Device& device, const RmsNormArgs& a) {
  Check c("rms_norm", device);
  validate_norm(c, a.out, a.x, a.weight, a.params.eps, a.params.residual, a.params.sum_out);
  if (const Tensor& gate = a.params.gate; gate.defined()) {
    c.tensor("gate", gate, a.x.rank, a.x.rank);
    c.float_dtype("gate", gate);
    c.last_dim_contiguous("gate", gate);
    c.same_shape("gate", gate, "x", a.x);
    c.disjoint("out", a.out, "gate", gate);
  }
}

Cost cost(const LayerNormArgs& a) {
  return norm_cost(a.out, a.x, a.weight, a.params.bias, a.params.residual, a.params.sum_out);
}

Cost cost(const RmsNormArgs& a) {
  Cost c = norm_cost(a.out, a.x, a.weight, {}, a.params.residual, a.params.sum_out);
  if (a.params.gate.defined()) {  // silu and the product: an exp, a divide, two multiplies
    c.flops += 4.0 * double(a.x.numel());
    c.bytes += double(a.params.gate.nbytes());
  }
  return c;
}

void layer_norm(Stream& stream, Tensor out, Tensor x, Tensor weight, const LayerNormParams& params) {
  dispatch(stream, LayerNormArgs{out, x, weight, params});
}

void rms_norm(Stream& stream, Tensor out, Tensor x, Tensor weight, const RmsNormParams& params) {
  dispatch(stream, RmsNormArgs{out, x, weight, params});
}

}  // namespace ding::ops
