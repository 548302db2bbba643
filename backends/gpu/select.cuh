// Building blocks for choosing by value (routing, argmax, top_k, sample): the one order of
// ops/sampling.h and ops/moe.h (larger value first, ties by lower index) as unsigned integers,
// so that every comparison, max reduction, radix pass and sort is an integer compare that picks
// what the reference picks; plus the warp and block scans, histograms and a block sort on them.
// Block-wide helpers assume blockDim.x is a multiple of the warp size, at most 1024 threads,
// and are called by every thread of the block.
#pragma once
#include <cstdint>

#include "vendor.h"

DING_GPU_BEGIN

// ---- the order as integers -------------------------------------------------------------------

// A float's place in the order: larger value, larger key. -0 and +0 share a key (the reference
// compares them equal); NaN is below every number, -inf included (key 0).
__device__ inline uint32_t order_key(float v) {
  if (v != v) return 0u;
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The value of a key (NaN for key 0).
__device__ inline float order_key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// A (value, index) pair as one 64-bit key: the value's key above the complemented index, so of
// equal values the lower index is the larger pair. Never 0 for an index below 2^31, so 0 pads.
__device__ inline uint64_t order_pair(float v, uint32_t index) { return (uint64_t(order_key(v)) << 32) | uint64_t(~index); }
__device__ inline uint32_t pair_index(uint64_t pair) { return ~uint32_t(pair); }
__device__ inline float pair_value(uint64_t pair) { return order_key_value(uint32_t(pair >> 32)); }

// ---- warp level ------------------------------------------------------------------------------

__device__ inline int lane_id() { return int(threadIdx.x) % warp_size(); }

// 64-bit shuffles as two 32-bit ones: the one shuffle width both vendors have for every type.
__device__ inline uint64_t shfl_xor_u64(uint64_t v, int lane_mask) {
  const uint32_t lo = shfl_xor(uint32_t(v), lane_mask), hi = shfl_xor(uint32_t(v >> 32), lane_mask);
  return (uint64_t(hi) << 32) | lo;
}

__device__ inline uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) {
    const uint64_t other = shfl_xor_u64(v, m);
    v = other > v ? other : v;
  }
  return v;
}

// Inclusive prefix sum over the lanes in lane order.
template <class T>
__device__ inline T warp_inclusive_scan(T v) {
  const int lane = lane_id();
#pragma unroll
  for (int d = 1; d < warp_size(); d *= 2) {
    const T other = shfl(v, lane >= d ? lane - d : lane);  // never a negative source lane
    if (lane >= d) v += other;
  }
  return v;
}

// Exclusive prefix sum: lane 0 gets 0, lane l the inclusive sum of lane l - 1.
template <class T>
__device__ inline T warp_exclusive_scan(T v) {
  const int lane = lane_id();
  const T inclusive = warp_inclusive_scan(v);
  const T previous = shfl(inclusive, lane > 0 ? lane - 1 : 0);
  return lane > 0 ? previous : T(0);
}

// hist[bin] += 1 for every lane with `active`: one shared-memory atomic per distinct bin of the
// warp rather than per lane, since the bins of logits cluster (most values share a sign and an
// exponent) and same-address atomics of one warp serialise. bin < 2^kBits.
template <int kBits>
__device__ inline void warp_histogram_add(int* hist, uint32_t bin, bool active) {
  uint64_t peers = ballot(active);
#pragma unroll
  for (int bit = 0; bit < kBits; ++bit) {
    const bool set = (bin >> bit) & 1u;
    const uint64_t lanes = ballot(set);
    peers &= set ? lanes : ~lanes;
  }
  // peers: the active lanes whose bin equals this lane's; the lowest of them adds for all.
  if (active && lane_id() == int(__ffsll((long long)peers)) - 1) atomicAdd(&hist[bin], int(__popcll(peers)));
}

// Claims consecutive entries for the lanes with `take` (in lane order) from the shared counter
// `*count` with one atomic per warp; returns this lane's entry (meaningless where !take).
__device__ inline int warp_append(int* count, bool take) {
  const uint64_t lanes = ballot(take);
  const int lane = lane_id(), leader = int(__ffsll((long long)lanes)) - 1;  // -1: no lane takes
  int base = 0;
  if (lane == leader) base = atomicAdd(count, int(__popcll(lanes)));
  base = shfl(base, leader > 0 ? leader : 0);
  return base + int(__popcll(lanes & ((uint64_t(1) << lane) - 1)));
}

// The first of 256 bins, in ascending (or descending) bin order, at which the running sum of
// value(bin) reaches `target`; `before` gets the sum of the bins ahead of it. -1 if the total
// falls short. Called by every lane of one warp; lane l owns 256 / warp_size() adjacent bins.
template <class T, class Value>
__device__ inline int warp_first_reaching(T target, bool descending, Value value, T& before) {
  constexpr int kBins = 256;
  const int per_lane = kBins / warp_size(), lane = lane_id();
  auto bin = [&](int r) { const int pos = lane * per_lane + r; return descending ? kBins - 1 - pos : pos; };
  T own = 0;
  for (int r = 0; r < per_lane; ++r) own += value(bin(r));
  T run = warp_exclusive_scan(own);
  int found = -1;
  T found_before = 0;
  for (int r = 0; r < per_lane && found < 0; ++r) {
    const T v = value(bin(r));
    if (run + v >= target) found = bin(r), found_before = run;
    run += v;
  }
  // The lowest lane that found one holds the answer (robust to rounding between the lane sums
  // and the running sums when T is floating point).
  const uint64_t finders = ballot(found >= 0);
  if (finders == 0) return -1;
  const int first = int(__ffsll((long long)finders)) - 1;
  before = shfl(found_before, first);
  return shfl(found, first);
}

// ---- block level -----------------------------------------------------------------------------

// Sum over the block, the same in every thread and in every run: warp trees, then the warps'
// sums in warp order. `shared` holds one T per warp; safe to reuse right after.
template <class T>
__device__ inline T block_sum_ordered(T v, T* shared) {
  const int warp = int(threadIdx.x) / warp_size(), warps = int(blockDim.x) / warp_size();
#pragma unroll
  for (int m = warp_size() / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  __syncthreads();  // earlier readers of `shared` are done
  if (lane_id() == 0) shared[warp] = v;
  __syncthreads();
  T sum = 0;
  for (int w = 0; w < warps; ++w) sum += shared[w];
  return sum;
}

__device__ inline uint64_t block_max_u64(uint64_t v, uint64_t* shared) {
  const int warp = int(threadIdx.x) / warp_size(), warps = int(blockDim.x) / warp_size();
  v = warp_max_u64(v);
  __syncthreads();
  if (lane_id() == 0) shared[warp] = v;
  __syncthreads();
  for (int w = 0; w < warps; ++w) v = shared[w] > v ? shared[w] : v;
  return v;
}

// Inclusive prefix sum over the block in thread order; `total` gets the block's sum, equal to
// the last thread's result. `shared` holds one T per warp; safe to reuse right after.
template <class T>
__device__ inline T block_inclusive_scan(T v, T* shared, T& total) {
  const int warp = int(threadIdx.x) / warp_size(), warps = int(blockDim.x) / warp_size();
  v = warp_inclusive_scan(v);
  __syncthreads();
  if (lane_id() == warp_size() - 1) shared[warp] = v;
  __syncthreads();
  T before = 0;
  for (int w = 0; w < warp; ++w) before += shared[w];
  total = before;
  for (int w = warp; w < warps; ++w) total += shared[w];
  return before + v;
}

// ---- block sort ------------------------------------------------------------------------------

constexpr int kSortTile = 4096;  // keys sorted in shared memory at a time (32 KB)

// One step of bitonic sorting (Batcher) over a[0, n), which sits at `offset` in the whole
// sequence: orders a[i] and a[i + j] for every i with bit j clear, descending where bit k of
// the whole-sequence index is clear and ascending where set. j < k ≤ 2^62, powers of two.
__device__ inline void bitonic_step(uint64_t* a, int64_t n, int64_t offset, int64_t k, int64_t j) {
  for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
    const int64_t i = ((p & ~(j - 1)) << 1) | (p & (j - 1));  // the p-th index with bit j clear
    const uint64_t x = a[i], y = a[i + j];
    const bool descending = ((offset + i) & k) == 0;
    if (descending ? x < y : x > y) a[i] = y, a[i + j] = x;
  }
}

// Sorts keys[0, n) descending, n a power of two; `tile` is kSortTile keys of shared memory.
// Strides below the tile size run in shared memory one tile at a time; the longer ones (only
// for n > kSortTile) run in global memory, which __syncthreads orders within the block.
__device__ inline void block_sort_descending(uint64_t* keys, int64_t n, uint64_t* tile) {
  const int64_t tile_n = n < kSortTile ? n : kSortTile;
  auto tile_pass = [&](int64_t first_k, int64_t last_k, bool whole_merges) {
    for (int64_t t = 0; t < n; t += tile_n) {
      for (int64_t i = threadIdx.x; i < tile_n; i += blockDim.x) tile[i] = keys[t + i];
      __syncthreads();
      for (int64_t k = first_k; k <= last_k; k *= 2)
        for (int64_t j = whole_merges ? k / 2 : tile_n / 2; j > 0; j /= 2) {
          bitonic_step(tile, tile_n, t, k, j);
          __syncthreads();
        }
      for (int64_t i = threadIdx.x; i < tile_n; i += blockDim.x) keys[t + i] = tile[i];
      __syncthreads();
    }
  };
  tile_pass(2, tile_n, true);  // every tile sorted, alternating direction by its position
  for (int64_t k = 2 * tile_n; k <= n; k *= 2) {
    for (int64_t j = k / 2; j >= tile_n; j /= 2) {
      bitonic_step(keys, n, 0, k, j);
      __syncthreads();
    }
    tile_pass(k, k, false);  // the strides j < tile_n of this merge
  }
}

DING_GPU_END
