#include "ding/ops/activation.h"

#include <fmt/format.h>

#include <cmath>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

namespace {

void validate_pointwise(const Check& c, const Tensor& out, std::initializer_list<std::pair<const char*, const Tensor*>> inputs) {
  c.tensor("out", out, 1, kMaxRank);
  c.float_dtype("out", out);
  c.contiguous("out", out);
  for (auto [name, t] : inputs) {
    c.tensor(name, *t, 1, kMaxRank);
    c.float_dtype(name, *t);
    c.contiguous(name, *t);
    c.same_shape(name, *t, "out", out);
    c.same_or_disjoint("out", out, name, *t);
  }
}

}  // namespace

void validate(const Device& device, const GeluArgs& a) { validate_pointwise(Check("gelu", device), a.out, {{"x", &a.x}}); }
void validate(const Device& device, const SiluArgs& a) { validate_pointwise(Check("silu", device), a.out, {{"x", &a.x}}); }
void validate(const Device& device, const SwigluArgs& a) {
  validate_pointwise(Check("swiglu", device), a.out, {{"gate", &a.gate}, {"up", &a.up}});
}

void validate(const Device& device, const ClampArgs& a) {
  Check c("clamp", device);
  c.tensor("out", a.out, 1, kMaxRank);
  c.tensor("x", a.x, a.out.rank, a.out.rank);
  c.float_dtype("out", a.out);
  c.float_dtype("x", a.x);
  c.last_dim_contiguous("out", a.out);
  c.last_dim_contiguous("x", a.x);
  c.same_shape("x", a.x, "out", a.out);
  c.same_or_disjoint("out", a.out, "x", a.x);
  if (std::isnan(a.lo)) c.fail(ErrorCode::invalid_argument, "lo is NaN");
  if (std::isnan(a.hi)) c.fail(ErrorCode::invalid_argument, "hi is NaN");
  if (!(a.lo <= a.hi)) c.fail(ErrorCode::invalid_argument, fmt::format("lo = {} must not exceed hi = {}", a.lo, a.hi));
}

void validate(const Device& device, const SigmoidGateArgs& a) {
  Check c("sigmoid_gate", device);
  c.tensor("out", a.out, 1, kMaxRank);
  c.tensor("x", a.x, a.out.rank, a.out.rank);
  c.tensor("gate", a.gate, a.out.rank, a.out.rank);
  for (auto [name, t] : {std::pair{"out", &a.out}, {"x", &a.x}, {"gate", &a.gate}}) {
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.same_shape("x", a.x, "out", a.out);
  for (int d = 0; d + 1 < a.out.rank; ++d) c.dim("gate", a.gate, d, a.out.dim(d), "out's");
  const int64_t C = a.out.dim(-1), gate_cols = a.gate.dim(-1);
  if (gate_cols != C && gate_cols != 1)
    c.fail(ErrorCode::shape_mismatch, fmt::format("gate's last dim must be out's {} or 1 (one gate per row), got gate {}",
                                                  C, shape_of(a.gate)));
  c.same_or_disjoint("out", a.out, "x", a.x);
  c.disjoint("out", a.out, "gate", a.gate);
}

Cost cost(const GeluArgs& a) { return {8.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }
Cost cost(const SiluArgs& a) { return {4.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }
Cost cost(const SwigluArgs& a) {
  return {5.0 * double(a.out.numel()), double(a.gate.nbytes() + a.up.nbytes() + a.out.nbytes())};
}
Cost cost(const SigmoidGateArgs& a) {
  return {5.0 * double(a.out.numel()), double(a.x.nbytes() + a.gate.nbytes() + a.out.nbytes())};
}
Cost cost(const ClampArgs& a) { return {2.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }

void gelu(Stream& stream, Tensor out, Tensor x) { dispatch(stream, GeluArgs{out, x}); }
void silu(Stream& stream, Tensor out, Tensor x) { dispatch(stream, SiluArgs{out, x}); }
void swiglu(Stream& stream, Tensor out, Tensor gate, Tensor up) { dispatch(stream, SwigluArgs{out, gate, up}); }
void clamp(Stream& stream, Tensor out, Tensor x, float lo, float hi) { dispatch(stream, ClampArgs{out, x, lo, hi}); }
void sigmoid_gate(Stream& stream, Tensor out, Tensor x, Tensor gate) { dispatch(stream, SigmoidGateArgs{out, x, gate}); }

}  // namespace ding::ops
