// rope: rotary position embedding. For each pair (a, b) of a head vector and frequency index
// i ∈ [0, R/2), with R = rotary_dim, frequency θ_i and angle φ = pos · θ_i:
//   a' = f·(a·cos φ - b·sin φ),   b' = f·(a·sin φ + b·cos φ)
// θ_i = theta^(-2i/R) unless an inv_freq table gives it (a scaled RoPE: rope_inv_frequencies),
// and f = attention_factor (YaRN's mscale; 1 otherwise).
// Pairs are (x[i], x[i + R/2]) in the neox layout (Llama/Qwen/GPT-NeoX in HF) and
// (x[2i], x[2i+1]) in the interleaved layout (GPT-J, original Llama). Dims ≥ R are copied.
// pos(b, t) = positions[b, t] + position_offset if positions is given, else position_offset + t.
#pragma once
#include <cstdint>
#include <vector>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

enum class RopeLayout : uint8_t { neox, interleaved };

struct RopeParams {
  RopeLayout layout = RopeLayout::neox;
  float theta = 10000.0f;         // unused when inv_freq is given
  int64_t rotary_dim = 0;         // R; 0 = the whole head dim D. Even, ≤ D
  Tensor positions;               // i32 [B, T], optional
  int64_t position_offset = 0;    // added to positions (e.g. −1 on decode's lengths), or pos = offset + t
  Tensor inv_freq;                // f32 [R/2] on the op's device, optional: θ_i replacing theta^(-2i/R)
  float attention_factor = 1.0f;  // cos φ and sin φ are multiplied by it (YaRN's mscale; 1 for the others)
};

struct RopeArgs {
  // x and out may be strided views (the q or k heads of a fused q/k/v product); the last dim is contiguous.
  Tensor out;  // [B, T, H, D], f32/f16/bf16; may be x itself (in place)
  Tensor x;    // [B, T, H, D]
  RopeParams params;
};

// How a model's config scales the RoPE frequencies (HF config.json's rope_scaling; transformers'
// modeling_rope_utils.py defines each kind).
enum class RopeScalingKind : uint8_t { none, linear, llama3, yarn };
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::none;
  double factor = 1.0;                   // linear, llama3, yarn
  double low_freq_factor = 1.0;          // llama3
  double high_freq_factor = 4.0;         // llama3
  int64_t original_max_position = 8192;  // llama3, yarn: original_max_position_embeddings
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn: the rotation counts bounding the blended band
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn: 0 = absent
  double attention_factor = 0.0;              // yarn: 0 = derived from factor and the mscales
  bool truncate = true;                       // yarn: the band's ends rounded outwards to whole dims
};

// θ_i for i < R/2, as transformers computes them for this scaling: θ_i = theta^(-2i/R), then
//   linear: θ_i / factor;
//   llama3: with wavelength λ_i = 2π/θ_i and L = original_max_position, θ_i / factor where
//     λ_i > L / low_freq_factor, θ_i where λ_i < L / high_freq_factor, and between them the blend
//     (1 − s)·θ_i / factor + s·θ_i with s = (L/λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor);
//   yarn (Peng et al. 2023, "YaRN"): with d(n) = R·ln(L / (2πn)) / (2·ln theta), the dim index at
//     which a wavelength turns n times over L, the band [low, high] = [d(beta_fast), d(beta_slow)]
//     (floor and ceil when truncate, clamped into [0, R − 1]) and ramp r_i = clamp((i − low) /
//     (high − low), 0, 1): θ_i·(1 − r_i) + (θ_i / factor)·r_i (fast dims kept, slow ones interpolated).
// Computed in double and rounded to f32 once. transformers forms the same values in f32 (2i/R,
// theta^(2i/R) and the reciprocal each round), so its table can differ by a few f32 ulps.
// Throws Error(invalid_argument) on a bad value: theta ≤ 0, R odd or < 2, factor ≤ 0, a llama3
// band with low_freq_factor ≤ 0 or high_freq_factor ≤ low_freq_factor, original_max_position ≤ 0,
// yarn's beta_fast ≤ beta_slow.
std::vector<float> rope_inv_frequencies(double theta, int64_t rotary_dim, const RopeScaling& scaling);
// The factor cos φ and sin φ are scaled by (RopeParams::attention_factor): yarn's attention_factor
// if given, else mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both mscales are set,
// else mscale(factor, 1), with mscale(s, m) = 0.1·m·ln s + 1 for s > 1 (1 otherwise); 1 for the
// other scalings.
double rope_attention_factor(const RopeScaling& scaling);
// yarn's mscale(s, m) above, which DeepSeek-V2 also applies (squared, with m = mscale_all_dim) to
// its softmax scale.
double yarn_mscale(double factor, double m);

void validate(const Device& device, const RopeArgs& a);
Cost cost(const RopeArgs& a);
void rope(Stream& stream, Tensor out, Tensor x, const RopeParams& params = {});

}  // namespace ding::ops
