#include "ding/ops/check.h"

#include "ding/ops/matmul.h"

#include <fmt/format.h>

#include <cmath>

namespace ding::ops {

std::string shape_of(const Tensor& t) { return t.shape_str(); }

void Check::fail(ErrorCode code, const std::string& message) const {
  throw Error(code, fmt::format("{}: {}", op_, message));
}

void Check::tensor(const char* name, const Tensor& t, int min_rank, int max_rank) const {
  if (!t.defined()) fail(ErrorCode::invalid_argument, fmt::format("{} is missing", name));
  if (t.device != &device_)
    fail(ErrorCode::device_mismatch,
         fmt::format("{} is on device '{}' but the stream runs on '{}'", name,
                     t.device ? t.device->name() : std::string("none"), device_.name()));
  if (t.rank < min_rank || t.rank > max_rank)
    fail(ErrorCode::shape_mismatch, min_rank == max_rank
             ? fmt::format("{} must have rank {}, got {}", name, min_rank, shape_of(t))
             : fmt::format("{} must have rank {} to {}, got {}", name, min_rank, max_rank, shape_of(t)));
  int64_t elements = 1;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 1)
      fail(ErrorCode::invalid_argument, fmt::format("{} has dimension {} of size {} (sizes must be ≥ 1): {}",
                                                    name, i, t.shape[i], shape_of(t)));
    if (__builtin_mul_overflow(elements, t.shape[i], &elements))
      fail(ErrorCode::invalid_argument, fmt::format("{} has more elements than fit in 64 bits: {}", name, shape_of(t)));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, int64_t(dtype_size(t.dtype)), &bytes) || bytes > (int64_t(1) << 50))
    fail(ErrorCode::invalid_argument, fmt::format("{} is larger than any device memory: {}", name, shape_of(t)));
  if (t.data == nullptr) fail(ErrorCode::invalid_argument, fmt::format("{} has a null data pointer", name));
}

void Check::dtype_in(const char* name, const Tensor& t, std::initializer_list<DType> allowed) const {
  for (DType d : allowed)
    if (t.dtype == d) return;
  std::string list;
  for (DType d : allowed) list += (list.empty() ? "" : ", ") + std::string(dtype_name(d));
  fail(ErrorCode::dtype_mismatch, fmt::format("{} has dtype {}, expected one of {}", name, dtype_name(t.dtype), list));
}

void Check::float_dtype(const char* name, const Tensor& t) const {
  dtype_in(name, t, {DType::f32, DType::f16, DType::bf16});
}

void Check::weight_dtype(const char* name, const Tensor& t) const {
  dtype_in(name, t, {DType::f32, DType::f16, DType::bf16, DType::i8, DType::f8e4m3});
  const bool quantized = quantized_weight(t.dtype);
  if (quantized && t.scales == nullptr)
    fail(ErrorCode::invalid_argument, fmt::format("{} {} is quantized but carries no per-row scales ({}.scales)", name, shape_of(t), name));
  if (!quantized && t.scales != nullptr)
    fail(ErrorCode::invalid_argument, fmt::format("{} {} carries scales but is not quantized (i8 or f8e4m3)", name, shape_of(t)));
}

void Check::contiguous(const char* name, const Tensor& t) const {
  if (!t.is_contiguous())
    fail(ErrorCode::invalid_argument, fmt::format("{} must be contiguous: {}", name, shape_of(t)));
}

void Check::last_dim_contiguous(const char* name, const Tensor& t) const {
  if (t.strides[t.rank - 1] != 1)
    fail(ErrorCode::invalid_argument,
         fmt::format("{} must have a contiguous last dimension (stride {}): {}", name, t.strides[t.rank - 1], shape_of(t)));
}

void Check::same_shape(const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) const {
  bool same = t.rank == ref.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == ref.shape[i];
  if (!same)
    fail(ErrorCode::shape_mismatch,
         fmt::format("{} {} must have the shape of {} {}", name, shape_of(t), ref_name, shape_of(ref)));
}

void Check::dim(const char* name, const Tensor& t, int d, int64_t expected, const char* meaning) const {
  if (t.dim(d) != expected)
    fail(ErrorCode::shape_mismatch, fmt::format("{} has {} = {} at dimension {}, expected {} ({})", name, meaning,
                                                t.dim(d), d < 0 ? t.rank + d : d, expected, shape_of(t)));
}

void Check::same_or_disjoint(const char* out_name, const Tensor& out, const char* in_name, const Tensor& in) const {
  bool identical = out.data == in.data && out.dtype == in.dtype && out.rank == in.rank &&
                   out.shape == in.shape && out.strides == in.strides;
  if (!identical) disjoint(out_name, out, in_name, in);
}

void Check::disjoint(const char* out_name, const Tensor& out, const char* in_name, const Tensor& in) const {
  if (overlaps(out, in))
    fail(ErrorCode::aliasing, fmt::format("{} {} overlaps {} {} in memory", out_name, shape_of(out), in_name, shape_of(in)));
}

void Check::positive(const char* name, double value) const {
  if (!(value > 0) || !std::isfinite(value))
    fail(ErrorCode::invalid_argument, fmt::format("{} must be a positive finite number, got {}", name, value));
}

}  // namespace ding::ops
