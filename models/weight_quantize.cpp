#include "weight_quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ding/error.h"
#include "weight_convert.h"

namespace ding {

namespace {

size_t aligned(size_t bytes) { return (bytes + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment; }

float largest_magnitude(DType to) { return to == DType::i8 ? 127.0f : 448.0f; }

// Where a weight goes in the new arena: its values at `offset`, a quantized one's row scales at
// `scales_offset`.
struct Placement {
  Tensor* target;
  bool quantized;
  size_t offset, scales_offset;
  const std::string* name;
};

// Every placed weight into the new arena at `base`: copied across, or quantized through the host.
void move_into(Device& device, Stream& stream, const std::vector<Placement>& places, char* base, DType to) {
  std::vector<char> wide;
  std::vector<int8_t> narrow;
  std::vector<float> scales;
  for (const Placement& p : places) {
    Tensor& t = *p.target;
    if (!p.quantized) {
      device.copy_within(stream, base + p.offset, t.data, t.nbytes());
      t.data = base + p.offset;
      continue;
    }
    const int64_t rows = t.dim(0), cols = t.dim(1);
    wide.resize(t.nbytes());
    download(stream, wide.data(), t, t.nbytes());
    narrow.resize(size_t(rows * cols));
    scales.resize(size_t(rows));
#pragma omp parallel
    {
      std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        // weight_convert refuses non-finite values, which quantize_row marks with a NaN scale too.
        const char* source = wide.data() + r * cols * int64_t(dtype_size(t.dtype));
        if (weight_convert(row.data(), DType::f32, source, t.dtype, cols)) {
          scales[size_t(r)] = quantize_row(row.data(), cols, to, narrow.data() + r * cols);
        } else {
          std::memset(narrow.data() + r * cols, 0, size_t(cols));
          scales[size_t(r)] = std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
    // Weights loaded unchecked (LoadOptions::check_weights false) may hold NaN or ±Inf, which 8 bits
    // cannot: an error naming the weight and row, never a quietly zeroed row.
    for (int64_t r = 0; r < rows; ++r)
      if (std::isnan(scales[size_t(r)]))
        throw Error(ErrorCode::parse,
                    fmt::format("quantize: weight {} holds NaN or ±Inf in row {}; 8-bit values cannot", *p.name, r));
    device.copy_to_device(stream, base + p.offset, narrow.data(), narrow.size());
    device.copy_to_device(stream, base + p.scales_offset, scales.data(), scales.size() * sizeof(float));
    stream.synchronize();  // the host buffers are reused for the next weight
    t.data = base + p.offset;
    t.dtype = to;
    t.scales = reinterpret_cast<const float*>(base + p.scales_offset);
  }
}

}  // namespace

float quantize_row(const float* x, int64_t cols, DType to, void* q) {
  float peak = 0.0f;
  bool finite = true;
  for (int64_t k = 0; k < cols; ++k) {
    finite = finite && std::isfinite(x[k]);
    peak = std::max(peak, std::fabs(x[k]));
  }
  if (!finite) {
    std::memset(q, 0, size_t(cols));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = peak / largest_magnitude(to);
  const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
  if (to == DType::i8) {
    auto* out = static_cast<int8_t*>(q);
    for (int64_t k = 0; k < cols; ++k)
      out[k] = int8_t(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f));  // the default mode: ties to even
  } else {
    auto* out = static_cast<f8e4m3*>(q);
    for (int64_t k = 0; k < cols; ++k) out[k] = f32_to_f8e4m3(x[k] * inverse);
  }
  return scale;
}

QuantizeStats quantize_weights(Device& device, std::span<WeightPlan> plans, std::span<Tensor* const> quantize,
                               Buffer& arena, DType to) {
  if (to != DType::i8 && to != DType::f8e4m3)
    throw Error(ErrorCode::invalid_argument, fmt::format("quantize: weights quantize to i8 or f8e4m3, not {}", dtype_name(to)));
  auto listed = [&](const Tensor* t) { return std::find(quantize.begin(), quantize.end(), t) != quantize.end(); };
  // The new arena's layout: a quantized weight's values, then its row scales, each aligned.
  std::vector<Placement> places;
  size_t size = 0;
  auto take = [&](size_t bytes) {
    const size_t at = size;
    size = aligned(size + bytes);
    return at;
  };
  QuantizeStats stats;
  stats.bytes_before = arena.size();
  for (WeightPlan& plan : plans) {
    Tensor* t = plan.target;
    if (!listed(t)) {
      places.push_back({t, false, take(t->nbytes()), 0, &plan.name});
      continue;
    }
    if (t->rank != 2 || !t->is_contiguous() || !(t->dtype == DType::f32 || t->dtype == DType::bf16 || t->dtype == DType::f16))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("quantize: weight {} is {}, not a contiguous f32/f16/bf16 matrix", plan.name, t->shape_str()));
    const size_t values = size_t(t->dim(0)) * size_t(t->dim(1));
    const size_t offset = take(values), scales_offset = take(size_t(t->dim(0)) * sizeof(float));
    places.push_back({t, true, offset, scales_offset, &plan.name});
    ++stats.weights;
  }
  Buffer fresh = device.alloc(std::max<size_t>(size, 1));
  Stream& stream = device.default_stream();
  char* const base = static_cast<char*>(fresh.data());
  // The targets as they were, put back if anything below throws (`fresh` then goes, `arena` stays).
  std::vector<Tensor> before;
  for (const Placement& p : places) before.push_back(*p.target);
  try {
    move_into(device, stream, places, base, to);
  } catch (...) {
    stream.synchronize();
    for (size_t i = 0; i < places.size(); ++i) *places[i].target = before[i];
    throw;
  }
  stream.synchronize();  // every copy out of the old arena is done before it goes
  arena = std::move(fresh);
  stats.bytes_after = arena.size();
  return stats;
}

}  // namespace ding
