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

void validate(const Device& device, const ActivationArgs& a) {
  Check c("activation", device);
  c.tensor("out", a.out, 1, kMaxRank);
  c.tensor("x", a.x, a.out.rank, a.out.rank);
  c.float_dtype("out", a.out);
  c.float_dtype("x", a.x);
  c.contiguous("out", a.out);
  c.contiguous("x", a.x);
  if (a.fn > ActivationFn::relu) c.fail(ErrorCode::invalid_argument, fmt::format("fn = {} is not an ActivationFn", int(a.fn)));
  for (int d = 0; d + 1 < a.out.rank; ++d) c.dim("x", a.x, d, a.out.dim(d), "out's");
  const int64_t N = a.out.dim(-1);
  if (a.x.dim(-1) != (a.gated ? 2 * N : N))
    c.fail(ErrorCode::shape_mismatch, fmt::format("x's last dim must be {} ({}out's {}), got x {}", a.gated ? 2 * N : N,
                                                  a.gated ? "gated: twice " : "", N, shape_of(a.x)));
  if (a.gated) c.disjoint("out", a.out, "x", a.x);  // out's rows are half as long: in place would overtake x
  else c.same_or_disjoint("out", a.out, "x", a.x);
}

std::optional<ActivationFn> activation_fn(std::string_view name) {
  if (name == "silu" || name == "swish") return ActivationFn::silu;
  if (name == "gelu") return ActivationFn::gelu_erf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return ActivationFn::gelu_tanh;
  if (name == "quick_gelu") return ActivationFn::quick_gelu;
  if (name == "relu") return ActivationFn::relu;
  return std::nullopt;
}

const char* activation_fn_name(ActivationFn fn) {
  switch (fn) {
    case ActivationFn::silu: return "silu";
    case ActivationFn::gelu_erf: return "gelu";
    case ActivationFn::gelu_tanh: return "gelu_tanh";
    case ActivationFn::quick_gelu: return "quick_gelu";
    case ActivationFn::relu: return "relu";
  }
  return "?";
}

Cost cost(const GeluArgs& a) { return {8.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }
Cost cost(const SiluArgs& a) { return {4.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }
Cost cost(const SwigluArgs& a) {
  return {5.0 * double(a.out.numel()), double(a.gate.nbytes() + a.up.nbytes() + a.out.nbytes())};
}
Cost cost(const SigmoidGateArgs& a) {
  return {5.0 * double(a.out.numel()), double(a.x.nbytes() + a.gate.nbytes() + a.out.nbytes())};
}
Cost cost(const ActivationArgs& a) {
  return {(a.gated ? 9.0 : 8.0) * double(a.out.numel()), double(a.x.nbytes() + a.out.nbytes())};
}
Cost cost(const ClampArgs& a) { return {2.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }

void gelu(Stream& stream, Tensor out, Tensor x) { dispatch(stream, GeluArgs{out, x}); }
void silu(Stream& stream, Tensor out, Tensor x) { dispatch(stream, SiluArgs{out, x}); }
void swiglu(Stream& stream, Tensor out, Tensor gate, Tensor up) { dispatch(stream, SwigluArgs{out, gate, up}); }
void clamp(Stream& stream, Tensor out, Tensor x, float lo, float hi) { dispatch(stream, ClampArgs{out, x, lo, hi}); }
void sigmoid_gate(Stream& stream, Tensor out, Tensor x, Tensor gate) { dispatch(stream, SigmoidGateArgs{out, x, gate}); }
void activation(Stream& stream, Tensor out, Tensor x, ActivationFn fn, bool gated) {
  dispatch(stream, ActivationArgs{out, x, fn, gated});
}

}  // namespace ding::ops
