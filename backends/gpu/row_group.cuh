// Row-wise kernels (norms, softmax) give each row a group of threads along x: one warp when
// the row is short (blockDim.x == warp size, blockDim.y rows per block) or the whole block
// (blockDim.y == 1). Each thread keeps up to kRowCached of its row's elements in registers.
#pragma once
#include <algorithm>
#include <cstdint>

#include "elements.cuh"
#include "reduce.cuh"

DING_GPU_BEGIN

inline constexpr int kRowCached = 8;         // row elements a thread keeps in registers
inline constexpr int kRowMaxThreads = 1024;  // threads of one row group

// Sum and max over the row group; every thread of the group gets the result. `shared` holds
// one float per warp. In a block group every thread of the block must call these (they sync).
__device__ inline float row_group_sum(float v, float* shared) {
  return blockDim.x == warp_size() ? warp_sum(v) : block_sum(v, shared);
}
__device__ inline float row_group_max(float v, float* shared) {
  return blockDim.x == warp_size() ? warp_max(v) : block_max(v, shared);
}

// The block for rows of C elements: a warp per row while kRowCached per lane covers the row,
// else one row per block with enough threads to cover it (or 1024, and the kernel streams the
// row instead of caching it). Block widths are multiples of 64 so every warp is full on
// every vendor, which the shuffles of the reductions need.
inline dim3 row_group_block(int64_t C, int warp) {
  const int64_t needed = ceil_div(C, kRowCached);
  if (needed <= warp) return dim3(unsigned(warp), unsigned(256 / warp));
  return dim3(unsigned(std::min<int64_t>(kRowMaxThreads, ceil_div(needed, 64) * 64)), 1);
}

DING_GPU_END
