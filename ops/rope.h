// rope: rotary position embedding. For each pair (a, b) of a head vector and frequency index
// i ∈ [0, R/2), with R = rotary_dim and angle φ = pos · theta^(-2i/R):
//   a' = a·cos φ - b·sin φ,   b' = a·sin φ + b·cos φ
// Pairs are (x[i], x[i + R/2]) in the neox layout (Llama/Qwen/GPT-NeoX in HF) and
// (x[2i], x[2i+1]) in the interleaved layout (GPT-J, original Llama). Dims ≥ R are copied.
// pos(b, t) = positions[b, t] if given, else position_offset + t.
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

enum class RopeLayout : uint8_t { neox, interleaved };

struct RopeParams {
  RopeLayout layout = RopeLayout::neox;
  float theta = 10000.0f;
  int64_t rotary_dim = 0;       // R; 0 = the whole head dim D. Even, ≤ D
  Tensor positions;             // i32 [B, T], optional
  int64_t position_offset = 0;  // used when positions is absent
};

struct RopeArgs {
  Tensor out;  // [B, T, H, D], f32/f16/bf16; may be x itself (in place)
  Tensor x;    // [B, T, H, D]
  RopeParams params;
};

void validate(const Device& device, const RopeArgs& a);
Cost cost(const RopeArgs& a);
void rope(Stream& stream, Tensor out, Tensor x, const RopeParams& params = {});

}  // namespace ding::ops
