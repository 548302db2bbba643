#include "ding/ops/delta_rule.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

float delta_rule_scale(const GatedDeltaRuleArgs& a) {
  return a.params.scale > 0 ? a.params.scale : float(1.0 / std::sqrt(double(a.q.dim(3))));
}

void validate(const Device& device, const GatedDeltaRuleArgs& a) { validate_recurrence("gated_delta_rule", device, a); }

void validate_recurrence(const char* op, const Device& device, const GatedDeltaRuleArgs& a) {
  Check c(op, device);
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}}) {
    c.tensor(name, *t, 4, 4);
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  const int64_t B = a.q.dim(0), T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  c.same_shape("k", a.k, "q", a.q);
  c.dim("v", a.v, 0, B, "B (from q)");
  c.dim("v", a.v, 1, T, "T (from q)");
  c.same_shape("out", a.out, "v", a.v);
  if (Hv % Hk != 0)
    c.fail(ErrorCode::shape_mismatch, fmt::format("v's {} heads are not a multiple of q's and k's {} (q {}, v {})", Hv, Hk,
                                                  shape_of(a.q), shape_of(a.v)));
  if (Dk > kMaxDeltaRuleKeyDim)
    c.fail(ErrorCode::invalid_argument, fmt::format("the key head dim Dk = {} exceeds the {} the backends take (q {})", Dk,
                                                    kMaxDeltaRuleKeyDim, shape_of(a.q)));
  for (auto [name, t] : {std::pair{"g", &a.g}, {"beta", &a.beta}}) {
    if (!a.params.delta && !t->defined()) continue;
    c.tensor(name, *t, 3, 3);
    c.float_dtype(name, *t);
    c.dim(name, *t, 0, B, "B (from q)");
    c.dim(name, *t, 1, T, "T (from q)");
    c.dim(name, *t, 2, Hv, "Hv (from v)");
  }
  c.tensor("state", a.state, 4, 4);
  c.dtype_in("state", a.state, {DType::f32});
  c.contiguous("state", a.state);
  c.dim("state", a.state, 0, B, "B (from q)");
  c.dim("state", a.state, 1, Hv, "Hv (from v)");
  c.dim("state", a.state, 2, Dk, "Dk (from q)");
  c.dim("state", a.state, 3, Dv, "Dv (from v)");
  const GatedDeltaRuleParams& p = a.params;
  if (!(p.scale >= 0) || !std::isfinite(p.scale))
    c.fail(ErrorCode::invalid_argument, fmt::format("scale must be ≥ 0 (0 = 1/√Dk), got {}", p.scale));
  if (p.chunk < 0 || p.chunk > kMaxDeltaRuleChunk)
    c.fail(ErrorCode::invalid_argument,
           fmt::format("chunk must be in [0, {}] (0: the backend's choice), got {}", kMaxDeltaRuleChunk, p.chunk));
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"g", &a.g}, {"beta", &a.beta}}) {
    if (!t->defined()) continue;
    c.disjoint("out", a.out, name, *t);
    c.disjoint("state", a.state, name, *t);
  }
  c.disjoint("out", a.out, "state", a.state);
  const DeltaRuleGates& gates = p.gates;
  if (gates.given() || gates.dt_bias.defined()) {
    for (auto [name, t] : {std::pair{"gates.a_log", &gates.a_log}, {"gates.dt_bias", &gates.dt_bias}}) {
      c.tensor(name, *t, 1, 1);
      c.float_dtype(name, *t);
      c.contiguous(name, *t);
      c.dim(name, *t, 0, Hv, "Hv (from v)");
      c.disjoint("out", a.out, name, *t);
      c.disjoint("state", a.state, name, *t);
    }
  }
  const DeltaRuleOutNorm& norm = p.out_norm;
  if (norm.given() || norm.gate.defined()) {
    c.tensor("out_norm.weight", norm.weight, 1, 1);
    c.float_dtype("out_norm.weight", norm.weight);
    c.contiguous("out_norm.weight", norm.weight);
    c.dim("out_norm.weight", norm.weight, 0, Dv, "Dv (from v)");
    c.tensor("out_norm.gate", norm.gate, 4, 4);
    c.float_dtype("out_norm.gate", norm.gate);
    c.last_dim_contiguous("out_norm.gate", norm.gate);
    c.same_shape("out_norm.gate", norm.gate, "out", a.out);
    for (auto [name, t] : {std::pair{"out_norm.weight", &norm.weight}, {"out_norm.gate", &norm.gate}}) {
      c.disjoint("out", a.out, name, *t);
      c.disjoint("state", a.state, name, *t);
    }
    c.positive("out_norm.eps", norm.eps);
  }
}

Cost cost(const GatedDeltaRuleArgs& a) {
  // Per token and value head: the decay, Sᵀk, the rank-1 update and Sᵀq, ~8·Dk·Dv FLOPs; the state
  // is read and written once per call (a backend keeps it on chip across the call's tokens).
  const double tokens = double(a.v.dim(0) * a.v.dim(1) * a.v.dim(2));
  double flops = 8.0 * tokens * double(a.q.dim(3)) * double(a.v.dim(3));
  if (a.params.l2_normalize_qk) flops += 6.0 * double(a.q.numel());  // two squares-and-adds, a scale, for q and k
  double bytes = double(a.q.nbytes() + a.k.nbytes() + a.v.nbytes() + a.g.nbytes() + a.beta.nbytes() + a.out.nbytes() +
                        2 * a.state.nbytes());
  if (a.params.out_norm.given()) {  // squares, a scale, the weight and the gate's silu a element
    flops += 8.0 * double(a.out.numel());
    bytes += double(a.params.out_norm.gate.nbytes() + a.params.out_norm.weight.nbytes());
  }
  return {flops, bytes};
}

RmsNormArgs out_norm_args(const GatedDeltaRuleArgs& a, const Tensor& o) {
  const DeltaRuleOutNorm& norm = a.params.out_norm;
  return {a.out, o, norm.weight, {.eps = norm.eps, .gate = norm.gate}};
}

void gated_delta_rule_with_staged_norm(Stream& stream, const GatedDeltaRuleArgs& a, const Tensor& o,
                                       void (*rule)(Stream&, const GatedDeltaRuleArgs&),
                                       void (*rms_norm)(Stream&, const RmsNormArgs&)) {
  GatedDeltaRuleArgs plain = a;
  plain.out = o;
  plain.params.out_norm = {};
  rule(stream, plain);
  rms_norm(stream, out_norm_args(a, o));
}

void gated_delta_rule_with_staged_norm_on_host(Stream& stream, const GatedDeltaRuleArgs& a,
                                               void (*rule)(Stream&, const GatedDeltaRuleArgs&),
                                               void (*rms_norm)(Stream&, const RmsNormArgs&)) {
  std::vector<unsigned char> staged(a.out.nbytes());
  const Tensor o = Tensor::view(staged.data(), a.out.device, a.out.dtype, a.out.shape.data(), a.out.rank);
  gated_delta_rule_with_staged_norm(stream, a, o, rule, rms_norm);
}

void gated_delta_rule(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor state,
                      const GatedDeltaRuleParams& params) {
  dispatch(stream, GatedDeltaRuleArgs{out, q, k, v, g, beta, state, params});
}

}  // namespace ding::ops
