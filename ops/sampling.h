// Sampling primitives over logits [B, V]. Ordering is by value, ties broken by lower index,
// everywhere, so every backend picks the same token.
//   argmax: the index of the largest logit.
//   top_k:  the k largest logits and their indices, in descending order.
//   sample: a pure function of (logits, params, u): with z = logits / temperature sorted
//           descending, keep the first top_k (if > 0), take p = softmax(z) over the kept,
//           keep the shortest prefix with Σp ≥ top_p (if < 1), drop p < min_p · p_max
//           (if > 0), then return the first kept token whose cumulative p exceeds u · Σp.
//           temperature 0 is argmax. The caller supplies u ∈ [0, 1) so runs are reproducible.
//   count_nonfinite: per row, how many values are NaN or ±Inf. A sampler runs it beside argmax or
//           sample and reads the counts back with the tokens, so a step whose logits went bad is
//           an error instead of a token, at no extra round trip to the host.
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct ArgmaxArgs {
  Tensor out;     // i32 [B]
  Tensor logits;  // [B, V], f32/f16/bf16
};

struct TopKArgs {
  Tensor values;   // f32 [B, k]
  Tensor indices;  // i32 [B, k]
  Tensor logits;   // [B, V], f32/f16/bf16, k ≤ V
};

struct SampleParams {
  float temperature = 1.0f;  // ≥ 0
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1); 0 = off
};

struct SampleArgs {
  Tensor out;       // i32 [B]
  Tensor logits;    // [B, V], f32/f16/bf16
  Tensor uniforms;  // f32 [B], each in [0, 1)
  SampleParams params;
};

struct CountNonfiniteArgs {
  Tensor out;  // i32 [B]
  Tensor x;    // [B, N], f32/f16/bf16, contiguous
};

void validate(const Device& device, const ArgmaxArgs& a);
void validate(const Device& device, const CountNonfiniteArgs& a);
Cost cost(const CountNonfiniteArgs& a);
void count_nonfinite(Stream& stream, Tensor out, Tensor x);
void validate(const Device& device, const TopKArgs& a);
void validate(const Device& device, const SampleArgs& a);
Cost cost(const ArgmaxArgs& a);
Cost cost(const TopKArgs& a);
Cost cost(const SampleArgs& a);
void argmax(Stream& stream, Tensor out, Tensor logits);
void top_k(Stream& stream, Tensor values, Tensor indices, Tensor logits);
void sample(Stream& stream, Tensor out, Tensor logits, Tensor uniforms, const SampleParams& params = {});

}  // namespace ding::ops
