// softmax over the last dimension: y = exp(s·x - max) / Σ exp(s·x - max), optionally causal.
#pragma once
#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct SoftmaxParams {
  float scale = 1.0f;  // s, applied to the logits before the exponential
  // Causal: x is viewed as [..., Tq, Tk]; row i keeps columns j ≤ i + (Tk - Tq) and writes 0
  // elsewhere (the query block is the last Tq positions of the key sequence). Needs Tk ≥ Tq.
  bool causal = false;
};

struct SoftmaxArgs {
  Tensor out;  // [..., Tk], f32/f16/bf16; may be x itself (in place)
  Tensor x;    // [..., Tk] (rank ≥ 2 when causal)
  SoftmaxParams params;
};

void validate(const Device& device, const SoftmaxArgs& a);
Cost cost(const SoftmaxArgs& a);
void softmax(Stream& stream, Tensor out, Tensor x, const SoftmaxParams& params = {});

}  // namespace ding::ops
