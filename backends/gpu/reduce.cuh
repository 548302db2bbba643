// Warp and block reductions, written for any warp size (32 or 64 lanes).
#pragma once
#include <cfloat>

#include "vendor.h"

DING_GPU_BEGIN

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}

__device__ inline double warp_sum(double v) {
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v = fmaxf(v, shfl_xor(v, m));
  return v;
}

// Block-wide reductions: every thread gets the result. `shared` holds one float per warp
// (at most 32: blocks of up to 1024 threads). Safe to call repeatedly with the same `shared`.
template <class Op>
__device__ inline float block_reduce(float v, float* shared, Op op, float identity) {
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int warps = (blockDim.x + warp_size() - 1) / warp_size();
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v = op(v, shfl_xor(v, m));
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v = op(v, shfl_xor(v, m));
  return v;
}

struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };
struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };

__device__ inline float block_sum(float v, float* shared) { return block_reduce(v, shared, SumOp{}, 0.0f); }
__device__ inline float block_max(float v, float* shared) { return block_reduce(v, shared, MaxOp{}, -FLT_MAX); }

DING_GPU_END
