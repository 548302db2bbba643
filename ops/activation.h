// Pointwise activations (out may be the input itself):
//   gelu   y = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (the tanh form GPT-2 uses)
//   silu   y = x·σ(x)
//   swiglu y = silu(gate) · up                          (the Llama FFN gate)
//   clamp  y = min(max(x, lo), hi), NaN stays NaN       (torch.clamp; OLMoE's clip_qkv)
//   sigmoid_gate  y = x · σ(gate)                       (Qwen3-Next's attention output gate and
//                                                        its shared expert's gate)
// clamp and sigmoid_gate also take views with a contiguous last dimension and any strides in the
// others, so the parts of a fused product are used where they lie. sigmoid_gate's gate is either
// x's shape or x's with a last dim of 1: one gate per row of x.
#pragma once
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
Cost cost(const GeluArgs& a);
Cost cost(const SiluArgs& a);
Cost cost(const SwigluArgs& a);
Cost cost(const ClampArgs& a);
Cost cost(const SigmoidGateArgs& a);
void gelu(Stream& stream, Tensor out, Tensor x);
void silu(Stream& stream, Tensor out, Tensor x);
void swiglu(Stream& stream, Tensor out, Tensor gate, Tensor up);
void clamp(Stream& stream, Tensor out, Tensor x, float lo, float hi);
void sigmoid_gate(Stream& stream, Tensor out, Tensor x, Tensor gate);

}  // namespace ding::ops
