// Pointwise activations, one element per work item; each element is read before it is written,
// so out may be the input itself. clamp's and sigmoid_gate's views reach their elements through their row starts
// (the last dimension is contiguous).
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void gelu(Stream&, const ops::GeluArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  Kokkos::parallel_for("ding::gelu", Range(0, a.x.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, gelu_tanh(x.load(i))); });
}

void silu(Stream&, const ops::SiluArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  Kokkos::parallel_for("ding::silu", Range(0, a.x.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, kokkos::silu(x.load(i))); });
}

void swiglu(Stream&, const ops::SwigluArgs& a) {
  const Elements out = elements(a.out), gate = elements(a.gate), up = elements(a.up);
  Kokkos::parallel_for("ding::swiglu", Range(0, a.out.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, kokkos::silu(gate.load(i)) * up.load(i)); });
}

// The comparisons are false for a NaN v, which is kept as it is (torch.clamp).
void clamp(Stream&, const ops::ClampArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  const RowStarts out_rows = row_starts(a.out), x_rows = row_starts(a.x);
  const int64_t C = a.x.dim(-1);
  const float lo = a.lo, hi = a.hi;
  Kokkos::parallel_for("ding::clamp", Range(0, a.x.numel()), KOKKOS_LAMBDA(const int64_t i) {
    const int64_t r = i / C, c = i % C;
    const float v = x.load(x_rows(r) + c);
    out.store(out_rows(r) + c, v < lo ? lo : v > hi ? hi : v);
  });
}

void sigmoid_gate(Stream&, const ops::SigmoidGateArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x), gate = elements(a.gate);
  const RowStarts out_rows = row_starts(a.out), x_rows = row_starts(a.x), gate_rows = row_starts(a.gate);
  const int64_t C = a.x.dim(-1), gate_step = a.gate.dim(-1) == C ? 1 : 0;
  Kokkos::parallel_for("ding::sigmoid_gate", Range(0, a.x.numel()), KOKKOS_LAMBDA(const int64_t i) {
    const int64_t r = i / C, c = i % C;
    out.store(out_rows(r) + c, x.load(x_rows(r) + c) / (1.0f + expf(-gate.load(gate_rows(r) + c * gate_step))));
  });
}

// f in double, as the CPU backend forms it (this op serves rare configs; accuracy over speed).
KOKKOS_INLINE_FUNCTION double activation_value(ops::ActivationFn fn, double v) {
  switch (fn) {
    case ops::ActivationFn::silu: return v / (1.0 + exp(-v));
    case ops::ActivationFn::gelu_erf: return 0.5 * v * erfc(-v * 0.70710678118654752440);
    case ops::ActivationFn::gelu_tanh: return double(gelu_tanh(float(v)));
    case ops::ActivationFn::quick_gelu: return v / (1.0 + exp(-1.702 * v));
    case ops::ActivationFn::relu: return v > 0.0 || v != v ? v : 0.0;
  }
  return v;
}

// One output element per work item; a gated row's gate is [0, N) of its 2N inputs, its up [N, 2N).
void activation(Stream&, const ops::ActivationArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  const int64_t N = a.out.dim(-1), in_cols = a.gated ? 2 * N : N;
  const ops::ActivationFn fn = a.fn;
  const bool gated = a.gated;
  Kokkos::parallel_for("ding::activation", Range(0, a.out.numel()), KOKKOS_LAMBDA(const int64_t i) {
    const int64_t r = i / N, j = i % N;
    const double y = activation_value(fn, double(x.load(r * in_cols + j)));
    out.store(i, float(gated ? y * double(x.load(r * in_cols + N + j)) : y));
  });
}

}  // namespace ding::kokkos
