// Rows of a strided tensor whose last dimension is contiguous: row r (row-major over all
// dims but the last) starts at row_offset(r). Passed to kernels by value.
#pragma once
#include <cstdint>

#include <algorithm>

#include "ding/tensor.h"
#include "elements.cuh"
#include "stream.h"
#include "vendor.h"

DING_GPU_BEGIN

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

// Launch shape for row-wise moves with 256-thread blocks: threads per row a power of two from 32
// to 256 covering the row's units (a thread per unit where it fits), the rest of the block on
// further rows (blockDim.y); the grid covers the rows, capped at 16 blocks per SM (grid-stride).
inline constexpr int kRowBlockThreads = 256;

inline dim3 row_block(int64_t units_per_row) {
  int x = 32;
  while (x < kRowBlockThreads && x < units_per_row) x *= 2;
  return dim3(unsigned(x), unsigned(kRowBlockThreads / x));
}

inline unsigned row_grid(const GpuStream& s, int64_t rows, const dim3& block) {
  return unsigned(std::max<int64_t>(1, std::min(ceil_div(rows, block.y), int64_t(s.props().sm_count) * 16)));
}

// Calls f(Unit{}) with Unit the unsigned type of `unit_bytes` bytes (16, 8, 4, 2, else 1), for
// raw row moves in the widest unit that every row start and length allows.
template <class F>
void with_byte_unit(int64_t unit_bytes, F&& f) {
  switch (unit_bytes) {
    case 16: f(uint4{}); break;
    case 8: f(uint2{}); break;
    case 4: f(uint32_t{}); break;
    case 2: f(uint16_t{}); break;
    default: f(uint8_t{}); break;
  }
}

DING_GPU_END
