// Reference activations: the formulas of ops/activation.h evaluated in double, element by element.
//   gelu: the tanh approximation of Hendrycks & Gimpel, "Gaussian Error Linear Units" (2016), eq. in
//         §2, as GPT-2 uses it (HF transformers: NewGELUActivation, "gelu_new").
//   silu: Elfwing et al., "Sigmoid-Weighted Linear Units" (2017) (HF: nn.SiLU).
//   swiglu: Shazeer, "GLU Variants Improve Transformer" (2020), SwiGLU with β = 1 (HF: LlamaMLP,
//           act_fn(gate_proj(x)) * up_proj(x)).
//   clamp:  torch.clamp(x, min=lo, max=hi), NaN kept (HF: OlmoeAttention's clip_qkv).
//   sigmoid_gate: x · torch.sigmoid(gate) (HF: Qwen3NextAttention's output gate, and
//           Qwen3NextSparseMoeBlock's shared_expert_gate, one gate per row).
//   activation: transformers' ACT2FN functions — GELUActivation (erf: ½x·erfc(−x/√2), the same
//           value without 1 + erf cancelling for x ≪ 0), QuickGELUActivation, nn.ReLU, nn.SiLU,
//           and the tanh GELU above; gated as LlamaMLP applies them, act_fn(gate)·up.
// gelu, silu and swiglu take contiguous tensors (checked by the front end), so element i sits at
// offset i in each; clamp and sigmoid_gate walk rows of its views' contiguous last dimension. Reading each element
// before writing it keeps in-place use (out == x) correct.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "reference.h"

namespace ding::reference {

// ½x(1 + tanh u) evaluated as x·σ(2u), the same value (½(1 + tanh u) = 1/(1 + e^(−2u))): for
// u ≪ 0, 1 + tanh u cancels to nothing in double (from x ≈ −7 on), while the σ form keeps full
// relative precision all the way to underflow.
double gelu_value(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return x * sigmoid_value(2.0 * u);
}

double sigmoid_value(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double silu_value(double x) { return x * sigmoid_value(x); }

void gelu(Stream&, const ops::GeluArgs& a) {
  for (int64_t i = 0; i < a.x.numel(); ++i) store(a.out, i, gelu_value(load(a.x, i)));
}

void silu(Stream&, const ops::SiluArgs& a) {
  for (int64_t i = 0; i < a.x.numel(); ++i) store(a.out, i, silu_value(load(a.x, i)));
}

void swiglu(Stream&, const ops::SwigluArgs& a) {
  for (int64_t i = 0; i < a.out.numel(); ++i) store(a.out, i, silu_value(load(a.gate, i)) * load(a.up, i));
}

// The comparisons are false for a NaN x, which is kept as it is.
void clamp(Stream&, const ops::ClampArgs& a) {
  const int64_t C = a.x.dim(-1), rows = a.x.numel() / C;
  const double lo = a.lo, hi = a.hi;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t x_row = row_offset(a.x, r), out_row = row_offset(a.out, r);
    for (int64_t c = 0; c < C; ++c) {
      const double v = load(a.x, x_row + c);
      store(a.out, out_row + c, v < lo ? lo : v > hi ? hi : v);
    }
  }
}

double activation_value(ops::ActivationFn fn, double x) {
  switch (fn) {
    case ops::ActivationFn::silu: return silu_value(x);
    case ops::ActivationFn::gelu_erf: return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
    case ops::ActivationFn::gelu_tanh: return gelu_value(x);
    case ops::ActivationFn::quick_gelu: return x * sigmoid_value(1.702 * x);
    case ops::ActivationFn::relu: return std::isnan(x) ? x : std::max(x, 0.0);
  }
  return x;
}

// Row r of out is [r·N, (r + 1)·N); of a gated x, [r·2N, (r + 1)·2N) with the gate first.
void activation(Stream&, const ops::ActivationArgs& a) {
  const int64_t N = a.out.dim(-1), rows = a.out.numel() / N;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N; ++j) {
      if (a.gated)
        store(a.out, r * N + j, activation_value(a.fn, load(a.x, r * 2 * N + j)) * load(a.x, r * 2 * N + N + j));
      else
        store(a.out, r * N + j, activation_value(a.fn, load(a.x, r * N + j)));
    }
}

// σ(t) = 1/(1 + e^(−t)) in double: no overflow concern (e^(−t) = inf gives 0, as it should).
void sigmoid_gate(Stream&, const ops::SigmoidGateArgs& a) {
  const int64_t C = a.x.dim(-1), rows = a.x.numel() / C;
  const bool per_row = a.gate.dim(-1) == 1 && C != 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t x_row = row_offset(a.x, r), out_row = row_offset(a.out, r), gate_row = row_offset(a.gate, r);
    for (int64_t c = 0; c < C; ++c) {
      const double gate = load(a.gate, gate_row + (per_row ? 0 : c));
      store(a.out, out_row + c, load(a.x, x_row + c) * sigmoid_value(gate));
    }
  }
}

}  // namespace ding::reference
