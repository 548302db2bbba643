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
// `scales_offset`; from the old arena (copied, or quantized), or from its stored parts as they are.
struct Placement {
  Tensor* target;
  bool quantized;
  size_t offset, scales_offset;
  const std::string* name;
  const WeightPlan* stored = nullptr;
};

// A stored_narrow plan's parts against its shape (the checks upload_weights makes of the plans it
// converts): Error(parse) naming the tensor.
void check_stored_narrow(const WeightPlan& plan) {
  int64_t rows = 0;
  for (const WeightPart& part : plan.parts) {
    const StoredTensor& t = *part.tensor;
    const int64_t length = part.transpose ? t.shape[0] : t.shape[1];
    const int64_t end = part.row_end < 0 ? t.shape[0] : part.row_end;
    if (length != plan.shape[1] || (part.transpose && (part.row_begin != 0 || part.row_end != -1)) ||
        (!part.transpose && (part.row_begin < 0 || part.row_begin > end || end > t.shape[0])))
      throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' {} does not fit weight {} [{}, {}]", t.file, t.name,
                                                t.shape_str(), plan.name, plan.shape[0], plan.shape[1]));
    rows += part.transpose ? t.shape[1] : part.rows();
  }
  if (rows != plan.shape[0])
    throw Error(ErrorCode::parse, fmt::format("{}: weight {} [{}, {}] gathers {} rows from its tensors", plan.parts[0].tensor->file,
                                              plan.name, plan.shape[0], plan.shape[1], rows));
}

// A stored_narrow plan's values [N, K] and row scales [N], gathered from its parts.
void read_stored_narrow(const WeightPlan& plan, std::vector<int8_t>& narrow, std::vector<float>& scales) {
  const int64_t K = plan.shape[1];
  narrow.resize(size_t(plan.shape[0] * K));
  scales.clear();
  int64_t row = 0;
  for (const WeightPart& part : plan.parts) {
    const StoredTensor& t = *part.tensor;
    const std::vector<float> part_scales = read_scales(part);
    const char* q = static_cast<const char*>(t.data);
    int8_t* out = narrow.data() + row * K;
    bool read;
    if (part.transpose) {  // stored [K, N]: destination row n is stored column n
      const int64_t N = t.shape[1];
      read = mapped_read(t.data, t.bytes, [&] {
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n) out[n * K + k] = int8_t(q[k * N + n]);
      });
      scales.insert(scales.end(), part_scales.begin(), part_scales.end());
    } else {
      const int64_t rows = part.rows();
      read = mapped_read(q + part.row_begin * K, size_t(rows * K),
                         [&] { std::memcpy(out, q + part.row_begin * K, size_t(rows * K)); });
      scales.insert(scales.end(), part_scales.begin() + part.row_begin, part_scales.begin() + part.row_begin + rows);
    }
    if (!read) throw_mapped_read_failed(t);
    row += part.transpose ? t.shape[1] : part.rows();
  }
  if (plan.parts[0].tensor->dtype == DType::f8e4m3)
    for (size_t i = 0; i < narrow.size(); ++i)
      if ((uint8_t(narrow[i]) & 0x7Fu) == 0x7Fu)  // E4M3's NaN codes
        throw Error(ErrorCode::parse, fmt::format("quantize: weight {} holds an f8e4m3 NaN at row {}, column {}", plan.name,
                                                  int64_t(i) / K, int64_t(i) % K));
}

// Every placed weight into the new arena at `base`: copied across, or quantized through the host.
void move_into(Device& device, Stream& stream, const std::vector<Placement>& places, char* base, DType to) {
  std::vector<char> wide;
  std::vector<int8_t> narrow;
  std::vector<float> scales;
  for (const Placement& p : places) {
    Tensor& t = *p.target;
    if (p.stored) {
      read_stored_narrow(*p.stored, narrow, scales);
      device.copy_to_device(stream, base + p.offset, narrow.data(), narrow.size());
      device.copy_to_device(stream, base + p.scales_offset, scales.data(), scales.size() * sizeof(float));
      stream.synchronize();  // the host buffers are reused for the next weight
      t = Tensor::view(base + p.offset, &device, to, p.stored->shape.data(), int(p.stored->shape.size()));
      t.scales = reinterpret_cast<const float*>(base + p.scales_offset);
      continue;
    }
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

// move_into on the device's stream, finished before it returns (so the old arena may go); if
// anything throws, every target is put back as it was.
void move_or_restore(Device& device, const std::vector<Placement>& places, char* base, DType to) {
  std::vector<Tensor> before;
  for (const Placement& p : places) before.push_back(*p.target);
  Stream& stream = device.default_stream();
  try {
    move_into(device, stream, places, base, to);
  } catch (...) {
    stream.synchronize();
    for (size_t i = 0; i < places.size(); ++i) *places[i].target = before[i];
    throw;
  }
  stream.synchronize();
}

// A block-wise checkpoint's scales hold exactly [⌈N / block_rows⌉, ⌈K / block_cols⌉], as
// transformers' FP8Linear declares them: check_scales counts values only, and scales stored
// transposed ([⌈K / bc⌉, ⌈N / bn⌉], the same count) would otherwise scale the wrong blocks. One
// scale per tensor may also be [] or [1].
void check_block_scales_shape(const WeightPart& part) {
  const StoredTensor& t = *part.tensor;
  const StoredTensor& sc = *part.scales;
  const std::vector<int64_t> want = {(t.shape[0] + part.block_rows - 1) / part.block_rows,
                                     (t.shape[1] + part.block_cols - 1) / part.block_cols};
  if (sc.shape == want || (want[0] * want[1] == 1 && sc.shape.size() < 2)) return;
  throw Error(ErrorCode::parse, fmt::format("{}: scales '{}' {} do not fit '{}' {} in blocks of {} × {}: expected [{}, {}]",
                                            sc.file, sc.name, sc.shape_str(), t.name, t.shape_str(), part.block_rows,
                                            part.block_cols, want[0], want[1]));
}

}  // namespace

size_t stored_narrow_bytes(std::span<const WeightPlan> plans) {
  size_t bytes = 0;
  for (const WeightPlan& plan : plans) bytes += aligned(size_t(plan.shape[0] * plan.shape[1])) + aligned(size_t(plan.shape[0]) * sizeof(float));
  return bytes;
}

void place_stored_narrow(Device& device, std::span<WeightPlan> plans, char* at, DType to) {
  std::vector<Placement> places;
  size_t size = 0;
  for (WeightPlan& plan : plans) {
    if (!stored_narrow(plan, to))
      throw Error(ErrorCode::invalid_argument, fmt::format("place_stored_narrow: weight {} is not stored in {} with row scales",
                                                           plan.name, dtype_name(to)));
    check_stored_narrow(plan);
    const size_t rows = size_t(plan.shape[0]), offset = size;
    size += aligned(rows * size_t(plan.shape[1]));
    places.push_back({plan.target, true, offset, size, &plan.name, &plan});
    size += aligned(rows * sizeof(float));
  }
  move_or_restore(device, places, at, to);
}

void attach_scales(std::span<WeightPlan> plans, const WeightFiles& files, const QuantizedCheckpoint& checkpoint,
                   const std::string& dir) {
  const bool row_scales = checkpoint.method == QuantizedCheckpoint::Method::ding;
  const std::string suffix = row_scales ? "_scale" : "_scale_inv";
  for (WeightPlan& plan : plans)
    for (WeightPart& part : plan.parts) {
      const StoredTensor& t = *part.tensor;
      if (t.dtype != DType::i8 && t.dtype != DType::f8e4m3) continue;
      if (!files.has(t.name + suffix))
        throw Error(ErrorCode::parse,
                    fmt::format("{}: tensor '{}' {} is 8-bit, but the folder {} has no scales '{}{}' ({} quantization_config)",
                                t.file, t.name, t.shape_str(), dir, t.name, suffix, row_scales ? "ding" : "fp8"));
      part.scales = &files.get(t.name + suffix);
      if (t.shape.size() != 2) continue;  // check_scales names it
      if (row_scales) {  // one scale per output row: per stored row, or per stored column when transposed
        part.block_rows = part.transpose ? t.shape[0] : 1;
        part.block_cols = part.transpose ? 1 : t.shape[1];
      } else {
        part.block_rows = checkpoint.block_rows > 0 ? checkpoint.block_rows : std::max<int64_t>(t.shape[0], 1);
        part.block_cols = checkpoint.block_cols > 0 ? checkpoint.block_cols : std::max<int64_t>(t.shape[1], 1);
      }
      check_scales(part, fmt::format("{}: tensor '{}' {} (weight '{}')", t.file, t.name, t.shape_str(), plan.name));
      if (!row_scales) check_block_scales_shape(part);
    }
}

bool stored_narrow(const WeightPlan& plan, DType to) {
  if (plan.init != WeightInit::stored || plan.parts.empty() || plan.shape.size() != 2) return false;
  for (const WeightPart& p : plan.parts) {
    const StoredTensor& t = *p.tensor;
    if (p.scales == nullptr || t.dtype != to || t.shape.size() != 2) return false;
    const bool per_output_row = p.transpose ? p.block_cols == 1 && p.block_rows >= t.shape[0]
                                            : p.block_rows == 1 && p.block_cols >= t.shape[1];
    if (!per_output_row) return false;
  }
  return true;
}

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
    if (listed(t) && stored_narrow(plan, to)) {
      check_stored_narrow(plan);
      const size_t rows = size_t(plan.shape[0]);
      const size_t offset = take(rows * size_t(plan.shape[1])), scales_offset = take(rows * sizeof(float));
      places.push_back({t, true, offset, scales_offset, &plan.name, &plan});
      ++stats.weights;
      continue;
    }
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
  move_or_restore(device, places, static_cast<char*>(fresh.data()), to);  // on error `fresh` goes, `arena` stays
  arena = std::move(fresh);
  stats.bytes_after = arena.size();
  return stats;
}

}  // namespace ding
