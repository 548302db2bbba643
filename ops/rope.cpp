#include "ding/ops/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ding/error.h"
#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

namespace {

[[noreturn]] void bad_scaling(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "rope_inv_frequencies: " + what);
}

// The llama3 rescaling of one frequency (transformers' _compute_llama3_parameters): long
// wavelengths are stretched by `factor`, short ones kept, the band between blended linearly in
// L/λ, the number of turns a wavelength makes over the original context.
double llama3_frequency(double freq, const RopeScaling& s) {
  const double wavelength = 2.0 * std::numbers::pi / freq;
  const double context = double(s.original_max_position);
  if (wavelength > context / s.low_freq_factor) return freq / s.factor;
  if (wavelength < context / s.high_freq_factor) return freq;
  const double smooth = (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * freq / s.factor + smooth * freq;
}

// The yarn blend of one frequency (transformers' _compute_yarn_parameters): dims below the band
// keep θ_i (they turn often over the original context: extrapolation is safe), dims above it are
// divided by `factor` (interpolated), the band between blended linearly in the dim index.
double yarn_frequency(double freq, int64_t i, double theta, int64_t rotary_dim, const RopeScaling& s) {
  const double R = double(rotary_dim), context = double(s.original_max_position);
  auto dim_of_turns = [&](double turns) {
    return R * std::log(context / (turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
  };
  double low = dim_of_turns(s.beta_fast), high = dim_of_turns(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, R - 1);
  if (low == high) high += 0.001;  // as transformers: no division by zero for a one-dim band
  const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
  return freq * (1.0 - ramp) + freq / s.factor * ramp;
}

}  // namespace

double yarn_mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

double rope_attention_factor(const RopeScaling& s) {
  if (s.kind != RopeScalingKind::yarn) return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  if (s.mscale != 0 && s.mscale_all_dim != 0) return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor, 1.0);
}

std::vector<float> rope_inv_frequencies(double theta, int64_t rotary_dim, const RopeScaling& scaling) {
  if (!(theta > 0) || !std::isfinite(theta))
    bad_scaling(fmt::format("theta must be a positive finite number, got {}", theta));
  if (rotary_dim < 2 || rotary_dim % 2 != 0)
    bad_scaling(fmt::format("rotary_dim must be even and ≥ 2, got {}", rotary_dim));
  if (scaling.kind != RopeScalingKind::none && (!(scaling.factor > 0) || !std::isfinite(scaling.factor)))
    bad_scaling(fmt::format("factor must be a positive finite number, got {}", scaling.factor));
  if (scaling.kind == RopeScalingKind::llama3) {
    if (!(scaling.low_freq_factor > 0) || !std::isfinite(scaling.high_freq_factor) ||
        !(scaling.high_freq_factor > scaling.low_freq_factor))
      bad_scaling(fmt::format("llama3 needs 0 < low_freq_factor < high_freq_factor, got low_freq_factor = {}, "
                              "high_freq_factor = {}",
                              scaling.low_freq_factor, scaling.high_freq_factor));
    if (scaling.original_max_position <= 0)
      bad_scaling(fmt::format("llama3 needs original_max_position > 0, got {}", scaling.original_max_position));
  }
  if (scaling.kind == RopeScalingKind::yarn) {
    if (scaling.original_max_position <= 0)
      bad_scaling(fmt::format("yarn needs original_max_position > 0, got {}", scaling.original_max_position));
    if (!(scaling.beta_slow > 0) || !std::isfinite(scaling.beta_fast) || !(scaling.beta_fast > scaling.beta_slow))
      bad_scaling(fmt::format("yarn needs 0 < beta_slow < beta_fast, got beta_fast = {}, beta_slow = {}", scaling.beta_fast,
                              scaling.beta_slow));
  }
  std::vector<float> inv_freq(size_t(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * double(i) / double(rotary_dim));
    switch (scaling.kind) {
      case RopeScalingKind::none: inv_freq[size_t(i)] = float(freq); break;
      case RopeScalingKind::linear: inv_freq[size_t(i)] = float(freq / scaling.factor); break;
      case RopeScalingKind::llama3: inv_freq[size_t(i)] = float(llama3_frequency(freq, scaling)); break;
      case RopeScalingKind::yarn: inv_freq[size_t(i)] = float(yarn_frequency(freq, i, theta, rotary_dim, scaling)); break;
    }
  }
  return inv_freq;
}

void validate(const Device& device, const RopeArgs& a) {
  Check c("rope", device);
  c.tensor("x", a.x, 4, 4);
  c.tensor("out", a.out, 4, 4);
  c.float_dtype("x", a.x);
  c.float_dtype("out", a.out);
  // Heads may be views into a fused q/k/v product: only each head's D values must be contiguous.
  c.last_dim_contiguous("x", a.x);
  c.last_dim_contiguous("out", a.out);
  c.same_shape("out", a.out, "x", a.x);
  c.same_or_disjoint("out", a.out, "x", a.x);
  c.positive("theta", a.params.theta);
  c.positive("attention_factor", a.params.attention_factor);
  const int64_t D = a.x.dim(3), R = a.params.rotary_dim == 0 ? D : a.params.rotary_dim;
  if (R < 2 || R > D || R % 2 != 0)
    c.fail(ErrorCode::invalid_argument, fmt::format("rotary_dim must be even and in [2, D = {}], got {}", D, R));
  if (a.params.positions.defined()) {
    c.tensor("positions", a.params.positions, 2, 2);
    c.dtype_in("positions", a.params.positions, {DType::i32});
    c.contiguous("positions", a.params.positions);
    c.dim("positions", a.params.positions, 0, a.x.dim(0), "B (from x)");
    c.dim("positions", a.params.positions, 1, a.x.dim(1), "T (from x)");
  } else if (a.params.position_offset < 0) {
    c.fail(ErrorCode::invalid_argument, fmt::format("position_offset must be ≥ 0, got {}", a.params.position_offset));
  }
  if (a.params.inv_freq.defined()) {
    c.tensor("inv_freq", a.params.inv_freq, 1, 1);
    c.dtype_in("inv_freq", a.params.inv_freq, {DType::f32});
    c.contiguous("inv_freq", a.params.inv_freq);
    c.dim("inv_freq", a.params.inv_freq, 0, R / 2, "R/2 (rotary_dim / 2)");
    c.disjoint("out", a.out, "inv_freq", a.params.inv_freq);
  }
}

Cost cost(const RopeArgs& a) {
  const int64_t D = a.x.dim(3), R = a.params.rotary_dim == 0 ? D : a.params.rotary_dim;
  const double table = a.params.inv_freq.defined() ? double(a.params.inv_freq.nbytes()) : 0.0;
  return {3.0 * double(a.x.numel() / D * R), double(a.x.nbytes() + a.out.nbytes()) + table};
}

void rope(Stream& stream, Tensor out, Tensor x, const RopeParams& params) {
  dispatch(stream, RopeArgs{out, x, params});
}

}  // namespace ding::ops
