// Pointwise activations (out may be the input itself):
//   gelu   y = ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (the tanh form GPT-2 uses)
//   silu   y = x·σ(x)
//   swiglu y = silu(gate) · up                          (the Llama FFN gate)
//   clamp  y = min(max(x, lo), hi), NaN stays NaN       (torch.clamp; OLMoE's clip_qkv)
// clamp also takes views with a contiguous last dimension and any strides in the others, so the
// q, k and v parts of a fused q/k/v product are clamped in place where they lie.
#pragma once
#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

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

void validate(const Device& device, const GeluArgs& a);
void validate(const Device& device, const SiluArgs& a);
void validate(const Device& device, const SwigluArgs& a);
void validate(const Device& device, const ClampArgs& a);
Cost cost(const GeluArgs& a);
Cost cost(const SiluArgs& a);
Cost cost(const SwigluArgs& a);
Cost cost(const ClampArgs& a);
void gelu(Stream& stream, Tensor out, Tensor x);
void silu(Stream& stream, Tensor out, Tensor x);
void swiglu(Stream& stream, Tensor out, Tensor gate, Tensor up);
void clamp(Stream& stream, Tensor out, Tensor x, float lo, float hi);

}  // namespace ding::ops
