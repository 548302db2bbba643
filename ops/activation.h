// Pointwise activations (out may be the input itself):
//   gelu   y = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (the tanh form GPT-2 uses)
//   silu   y = x·σ(x)
//   swiglu y = silu(gate) · up                          (the Llama FFN gate)
//   clamp  y = min(max(x, lo), hi), NaN stays NaN       (torch.clamp; OLMoE's clip_qkv)
//   sigmoid_gate  y = x · σ(gate)                       (Qwen3-Next's attention output gate and
//                                                        its shared expert's gate)
//   activation    y = f(x), or gated y = f(g) · u for x = [g | u] along its last dim, with f one of
//                 transformers' ACT2FN entries (ActivationFn): the feed-forwards of configs whose
//                 hidden_act / activation_function the fused products (ops::Activation) do not cover
// clamp and sigmoid_gate also take views with a contiguous last dimension and any strides in the
// others, so the parts of a fused product are used where they lie. sigmoid_gate's gate is either
// x's shape or x's with a last dim of 1: one gate per row of x.
#pragma once
#include <optional>
#include <string_view>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

// gelu's tanh form as the backends evaluate it: ½x(1 + tanh u) = x·σ(t), t = 2u = kGeluT1·x +
// kGeluT3·x³. The same value without 1 + tanh u cancelling to nothing for x ≪ 0; σ turns an
// absolute error of t into a relative error of the result, and |t| reaches ~100 before the result
// underflows, so each backend forms t to about double precision.
inline constexpr double kGeluT1 = 1.5957691216057308;  // 2·√(2/π)
inline constexpr double kGeluT3 = 0.044715 * kGeluT1;

struct GeluArgs {
  Tensor out;  // any shape, f32/f16/bf16, contiguous
  Tensor x;    // same shape
};

struct SiluArgs {
  Tensor out;  // any shape, f32/f16/bf16, contiguous
  Tensor x;    // same shape
};

struct SwigluArgs {
  Tensor out;   // any shape, f32/f16/bf16, contiguous
  Tensor gate;  // same shape
  Tensor up;    // same shape
};

struct ClampArgs {
  Tensor out;  // any shape, f32/f16/bf16, last dim contiguous; x itself or disjoint from it
  Tensor x;    // same shape, last dim contiguous
  float lo;    // lo ≤ hi, neither NaN (±inf leaves that side open)
  float hi;
};

// transformers' ACT2FN names: silu ("silu", "swish"); gelu_erf ("gelu": ½x(1 + erf(x/√2)));
// gelu_tanh ("gelu_new", "gelu_pytorch_tanh", "gelu_fast": gelu above); quick_gelu
// ("quick_gelu": x·σ(1.702x)); relu ("relu": max(x, 0), NaN kept).
enum class ActivationFn : uint8_t { silu, gelu_erf, gelu_tanh, quick_gelu, relu };

struct ActivationArgs {
  Tensor out;  // [..., N], f32/f16/bf16, contiguous
  Tensor x;    // [..., N], or gated [..., 2N] = [g | u] (each row's gate, then its up); contiguous
  ActivationFn fn = ActivationFn::silu;
  bool gated = false;  // y = f(g) · u
};

struct SigmoidGateArgs {
  Tensor out;   // [..., C], f32/f16/bf16, last dim contiguous; x itself or disjoint from it
  Tensor x;     // [..., C], last dim contiguous
  Tensor gate;  // [..., C] or [..., 1], last dim contiguous, disjoint from out
};

void validate(const Device& device, const GeluArgs& a);
void validate(const Device& device, const SiluArgs& a);
void validate(const Device& device, const SwigluArgs& a);
void validate(const Device& device, const ClampArgs& a);
void validate(const Device& device, const SigmoidGateArgs& a);
void validate(const Device& device, const ActivationArgs& a);
Cost cost(const GeluArgs& a);
Cost cost(const SiluArgs& a);
Cost cost(const SwigluArgs& a);
Cost cost(const ClampArgs& a);
Cost cost(const SigmoidGateArgs& a);
Cost cost(const ActivationArgs& a);
void gelu(Stream& stream, Tensor out, Tensor x);
void silu(Stream& stream, Tensor out, Tensor x);
void swiglu(Stream& stream, Tensor out, Tensor gate, Tensor up);
void clamp(Stream& stream, Tensor out, Tensor x, float lo, float hi);
void sigmoid_gate(Stream& stream, Tensor out, Tensor x, Tensor gate);
void activation(Stream& stream, Tensor out, Tensor x, ActivationFn fn, bool gated = false);
// The function a config's name (hidden_act, activation_function) means in transformers, or
// nullopt for a name ding does not run.
std::optional<ActivationFn> activation_fn(std::string_view name);
const char* activation_fn_name(ActivationFn fn);

}  // namespace ding::ops
