// Rows of a strided tensor whose last dimension is contiguous: row r (row-major over all
// dims but the last) starts at row_offset(r). Passed to kernels by value. Leading dims that step
// over each other exactly are merged (a contiguous [B, T, C] has one dim of B·T rows), and dims
// of size 1 dropped, so the common layouts cost one multiply per row.
#pragma once
#include <cstdint>

#include <algorithm>

#include "ding/tensor.h"
#include "elements.cuh"
#include "stream.h"
#include "vendor.h"

DING_GPU_BEGIN

struct RowLayout {
  int outer = 0;                     // dims before the last, after merging
  int64_t shape[kMaxRank] = {};      // of those dims
  int64_t strides[kMaxRank] = {};    // in elements
};

// An absent tensor (rank 0) has no dims: every row starts at 0.
inline RowLayout row_layout(const Tensor& t) {
  RowLayout l;
  for (int d = 0; d + 1 < t.rank; ++d) {
    if (t.shape[d] == 1) continue;
    if (l.outer > 0 && l.strides[l.outer - 1] == t.strides[d] * t.shape[d]) {
      l.shape[l.outer - 1] *= t.shape[d];
      l.strides[l.outer - 1] = t.strides[d];
    } else {
      l.shape[l.outer] = t.shape[d];
      l.strides[l.outer] = t.strides[d];
      ++l.outer;
    }
  }
  return l;
}

// r < the product of the shape, so the outermost dim needs no modulo.
__device__ inline int64_t row_offset(const RowLayout& l, int64_t r) {
  if (l.outer == 0) return 0;
  int64_t offset = 0;
  for (int d = l.outer - 1; d > 0; --d) {
    offset += (r % l.shape[d]) * l.strides[d];
    r /= l.shape[d];
  }
  return offset + r * l.strides[0];
}

// Whether every row of t starts a multiple of n elements past its base (an absent t: yes).
inline bool rows_start_at_multiples(const Tensor& t, int64_t n) {
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.shape[d] > 1 && t.strides[d] % n != 0) return false;
  return true;
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
