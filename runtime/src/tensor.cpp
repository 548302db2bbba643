#include "ding/tensor.h"

#include <fmt/format.h>

#include <algorithm>

#include "ding/error.h"

namespace ding {

Tensor Tensor::view(void* data, Device* device, DType dtype, const int64_t* shape, int rank) {
  if (rank < 1 || rank > kMaxRank)
    throw Error(ErrorCode::invalid_argument, fmt::format("Tensor::view: rank must be 1 to {}, got {}", kMaxRank, rank));
  Tensor t;
  t.data = data;
  t.device = device;
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    // A stride past 64 bits saturates: such a view has more elements than 64 bits count, which
    // every op refuses by name (ops::Check), so the value is never used to address memory.
    if (__builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride)) stride = INT64_MAX;
  }
  return t;
}

Tensor Tensor::view(void* data, Device* device, DType dtype, std::initializer_list<int64_t> shape) {
  return view(data, device, dtype, shape.begin(), int(shape.size()));
}

int64_t Tensor::numel() const {
  if (rank == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    // Past 64 bits no stride can match (the outermost extent scales none).
    if (i > 0 && __builtin_mul_overflow(expected, shape[i], &expected)) return false;
  }
  return true;
}

std::pair<const char*, const char*> Tensor::byte_range() const {
  const char* base = static_cast<const char*>(data);
  if (numel() == 0) return {base, base};
  int64_t lo = 0, hi = 0;  // element offsets of the extreme elements
  for (int i = 0; i < rank; ++i) {
    const int64_t span = (shape[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  const int64_t size = int64_t(dtype_size(dtype));
  return {base + lo * size, base + (hi + 1) * size};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.data == nullptr || b.data == nullptr) return false;
  auto [a_lo, a_hi] = a.byte_range();
  auto [b_lo, b_hi] = b.byte_range();
  return a_lo < b_hi && b_lo < a_hi;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  if (!is_contiguous()) throw Error(ErrorCode::invalid_argument, fmt::format("reshape: {} is not contiguous", shape_str()));
  Tensor t = view(data, device, dtype, new_shape);
  t.scales = scales;
  if (t.numel() != numel())
    throw Error(ErrorCode::shape_mismatch, fmt::format("reshape: {} has {} elements, the new shape {} has {}", shape_str(),
                                                       numel(), t.shape_str(), t.numel()));
  return t;
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  if (d < 0) d += rank;
  if (d < 0 || d >= rank || begin < 0 || end > shape[d] || begin > end)
    throw Error(ErrorCode::invalid_argument, fmt::format("slice: [{}, {}) on dimension {} of {}", begin, end, d, shape_str()));
  Tensor t = *this;
  t.data = static_cast<char*>(data) + begin * strides[d] * int64_t(dtype_size(dtype));
  t.shape[d] = end - begin;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  if (d < 0) d += rank;
  if (rank < 2 || d < 0 || d >= rank || index < 0 || index >= shape[d])
    throw Error(ErrorCode::invalid_argument, fmt::format("select: index {} on dimension {} of {}", index, d, shape_str()));
  Tensor t = slice(d, index, index + 1);
  for (int i = d; i + 1 < rank; ++i) {
    t.shape[i] = t.shape[i + 1];
    t.strides[i] = t.strides[i + 1];
  }
  t.rank = rank - 1;
  t.shape[t.rank] = 0;
  t.strides[t.rank] = 0;
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  if (d < 0) d += rank + 1;
  if (d < 0 || d > rank || rank >= kMaxRank)
    throw Error(ErrorCode::invalid_argument, fmt::format("unsqueeze: dimension {} of {}", d, shape_str()));
  Tensor t = *this;
  for (int i = rank; i > d; --i) {
    t.shape[i] = shape[i - 1];
    t.strides[i] = strides[i - 1];
  }
  t.shape[d] = 1;
  t.strides[d] = d < rank ? shape[d] * strides[d] : 1;
  t.rank = rank + 1;
  return t;
}

Tensor Tensor::unflatten(int d, int64_t outer) const {
  if (d < 0) d += rank;
  if (d < 0 || d >= rank || rank >= kMaxRank || outer < 1 || shape[d] % outer != 0)
    throw Error(ErrorCode::invalid_argument, fmt::format("unflatten: dimension {} of {} into {} parts", d, shape_str(), outer));
  Tensor t = *this;
  for (int i = rank; i > d + 1; --i) {
    t.shape[i] = shape[i - 1];
    t.strides[i] = strides[i - 1];
  }
  const int64_t inner = shape[d] / outer;
  t.shape[d] = outer;
  t.strides[d] = inner * strides[d];
  t.shape[d + 1] = inner;
  t.strides[d + 1] = strides[d];
  t.rank = rank + 1;
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "] " + std::string(dtype_name(dtype));
}

}  // namespace ding
