// layer_norm: y = (h - mean(h)) / sqrt(var(h) + eps) · weight + bias     (var is the biased variance)
// rms_norm:   y = h / sqrt(mean(h²) + eps) · weight  (· silu(gate), where a gate is given: the gated
//             RMSNorm of Qwen3-Next's linear attention output, norm(o)·silu(z), in one pass)
// where h = x, or h = x + residual when a residual is given (the pre-norm residual stream);
// `sum_out`, if given, receives h so the block can carry it forward without a second pass.
// The row tensors (x, out, residual, sum_out) are views with a contiguous last dimension C and
// any strides in the leading ones, each its own: the q part of a fused q/k/v product
// qkv [T, (H + 2Hkv)·D] is normalised as one row per token through qkv.slice(1, 0, H·D), or per
// head through its [T, H, D] view (strides [(H + 2Hkv)·D, D, 1]). weight and bias are contiguous:
// [C], or [..., C] with leading dims equal to x's last ones, each row then scaled by the weight row
// at its place in those dims (weight_row). One call so normalises parts that share a length but
// not their weights: OLMoE's q and k projections as x [T, 2, H·D] (a view of qkv) with weight
// [2, H·D], the two norm weights stacked.
#pragma once
#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct LayerNormParams {
  float eps = 1e-5f;
  Tensor bias;      // shaped as weight, optional
  Tensor residual;  // like x, optional
  Tensor sum_out;   // like x, optional (needs residual); may be x or residual itself
};

struct LayerNormArgs {
  Tensor out;     // [..., C], f32/f16/bf16, must not overlap x/residual
  Tensor x;       // [..., C]
  Tensor weight;  // [C] or [..., C] (above)
  LayerNormParams params;
};

struct RmsNormParams {
  float eps = 1e-6f;
  Tensor residual;  // like x, optional
  Tensor sum_out;   // like x, optional (needs residual); may be x or residual itself
  Tensor gate;      // like x (a row tensor of its own strides), optional; must not overlap out
};

struct RmsNormArgs {
  Tensor out;     // [..., C], f32/f16/bf16, must not overlap x/residual
  Tensor x;       // [..., C]
  Tensor weight;  // [C] or [..., C] (above)
  RmsNormParams params;
};

// The weight row of row r (of x's rows flattened over its leading dims): r modulo the weight's
// rows, since its leading dims are x's last ones.
inline int64_t weight_row(const Tensor& weight, int64_t r) { return r % (weight.numel() / weight.dim(-1)); }

void validate(const Device& device, const LayerNormArgs& a);
void validate(const Device& device, const RmsNormArgs& a);
Cost cost(const LayerNormArgs& a);
Cost cost(const RmsNormArgs& a);
void layer_norm(Stream& stream, Tensor out, Tensor x, Tensor weight, const LayerNormParams& params = {});
void rms_norm(Stream& stream, Tensor out, Tensor x, Tensor weight, const RmsNormParams& params = {});

}  // namespace ding::ops
