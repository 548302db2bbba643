// causal_conv1d: the short causal depthwise convolution that linear-attention layers (Gated
// DeltaNet in Qwen3-Next, Mamba) apply to their projections, channel by channel along time, with a
// rolling state of the last K − 1 inputs so that a sequence fed in chunks (or token by token at
// decode) convolves exactly as if fed whole. transformers: Qwen3NextGatedDeltaNet's nn.Conv1d
// (groups = C, padding K − 1, the first T outputs) for a whole prompt, torch_causal_conv1d_update
// for a step. Per sequence b, with u = [state[b] ; x[b]] (K − 1 + T rows, oldest first):
//   out[b, t, c] = act(bias[c] + Σ_{j<K} weight[c, j] · u[t + j, c])        act: none or silu
//   state[b] ← the last K − 1 rows of u
// A sequence starts from a zero state (the caller zeroes it): the zero padding of the whole-prompt
// convolution. weight is conv1d's [C, 1, K] weight without its middle dim.
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

enum class ConvActivation : uint8_t { none, silu };

// The longest kernel the backends take: a GPU thread keeps a channel's window in registers.
inline constexpr int64_t kMaxCausalConvKernel = 16;

struct CausalConv1dArgs {
  Tensor out;     // [B, T, C], f32/f16/bf16, last dim contiguous
  Tensor x;       // [B, T, C], f32/f16/bf16, last dim contiguous (a view into a wider projection is fine)
  Tensor weight;  // [C, K], 2 ≤ K ≤ kMaxCausalConvKernel, contiguous
  Tensor state;   // [B, K − 1, C], in-out, contiguous
  Tensor bias;    // [C], optional
  ConvActivation activation = ConvActivation::silu;
};

void validate(const Device& device, const CausalConv1dArgs& a);
Cost cost(const CausalConv1dArgs& a);
void causal_conv1d(Stream& stream, Tensor out, Tensor x, Tensor weight, Tensor state, Tensor bias = {},
                   ConvActivation activation = ConvActivation::silu);

}  // namespace ding::ops
