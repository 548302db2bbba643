// Rows of a strided tensor whose last dimension is contiguous: row r (row-major over all
// dims but the last) starts at row_offset(r). Passed to kernels by value.
#pragma once
#include <cstdint>

#include "ding/tensor.h"
#include "vendor.h"

namespace ding::gpu {

struct RowLayout {
  int outer = 0;                     // dims before the last
  int64_t shape[kMaxRank] = {};      // of those dims
  int64_t strides[kMaxRank] = {};    // in elements
};

inline RowLayout row_layout(const Tensor& t) {
  RowLayout l;
  l.outer = t.rank - 1;
  for (int d = 0; d < l.outer; ++d) {
    l.shape[d] = t.shape[d];
    l.strides[d] = t.strides[d];
  }
  return l;
}

__device__ inline int64_t row_offset(const RowLayout& l, int64_t r) {
  int64_t offset = 0;
  for (int d = l.outer - 1; d >= 0; --d) {
    offset += (r % l.shape[d]) * l.strides[d];
    r /= l.shape[d];
  }
  return offset;
}

}  // namespace ding::gpu
