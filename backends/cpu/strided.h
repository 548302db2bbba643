// Rows of a strided tensor whose last dimension is contiguous: row r (row-major over all dims
// but the last) starts at element row_offset(t, r), and its elements follow one after another.
#pragma once
#include <cstdint>

#include "ding/tensor.h"

namespace ding::cpu {

inline int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t offset = 0;
  for (int d = t.rank - 2; d >= 0; --d) {
    offset += (r % t.shape[d]) * t.strides[d];
    r /= t.shape[d];
  }
  return offset;
}

// The bytes of row r.
inline const char* row_bytes(const Tensor& t, int64_t r) {
  return static_cast<const char*>(t.data) + row_offset(t, r) * int64_t(dtype_size(t.dtype));
}
inline char* row_bytes_out(const Tensor& t, int64_t r) {
  return static_cast<char*>(t.data) + row_offset(t, r) * int64_t(dtype_size(t.dtype));
}

}  // namespace ding::cpu
