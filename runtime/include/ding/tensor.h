// Tensor: a non-owning, typed, strided view of device memory. Buffers own memory; views are
// passed by value. Strides are in elements; the last dimension is the fastest.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ding/dtype.h"

namespace ding {

class Device;

constexpr int kMaxRank = 5;

struct Tensor {
  void* data = nullptr;
  Device* device = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};
  // i8 (and later fp8) weights: f32 per-row dequantization scales, [shape[rank-2]] on the same
  // device. Null for every other dtype.
  const float* scales = nullptr;

  // A contiguous row-major view of `data`. A shape may count more elements than 64 bits hold (its
  // strides then saturate at INT64_MAX): ops refuse such a view by name.
  static Tensor view(void* data, Device* device, DType dtype, std::initializer_list<int64_t> shape);
  static Tensor view(void* data, Device* device, DType dtype, const int64_t* shape, int rank);

  // A default-constructed Tensor means "absent" for optional op arguments.
  bool defined() const { return rank > 0 || data != nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  int64_t stride(int i) const { return strides[i < 0 ? rank + i : i]; }
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  // [lo, hi) of the bytes the view can touch, for aliasing checks.
  std::pair<const char*, const char*> byte_range() const;

  // Views of the same memory.
  Tensor reshape(std::initializer_list<int64_t> new_shape) const;  // contiguous only
  Tensor slice(int dim, int64_t begin, int64_t end) const;         // keeps strides
  Tensor select(int dim, int64_t index) const;                     // drops dim
  Tensor unsqueeze(int dim) const;                                 // a new dim of size 1 before `dim`
  // Dimension `dim` of outer·inner elements as two, [outer, inner]; its stride kept, so a strided
  // row (heads inside a wider row) splits too.
  Tensor unflatten(int dim, int64_t outer) const;

  template <class T> T* ptr() const { return static_cast<T*>(data); }

  std::string shape_str() const;  // "[2, 17, 64] bf16"
};

bool overlaps(const Tensor& a, const Tensor& b);

}  // namespace ding
