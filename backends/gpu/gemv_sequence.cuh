// A sequence of decode products (ops::matmul_sequence) as one kernel on tensor cores: the
// tensor-core GEMV of gemv_mma.cuh, carried from step to step without leaving the SMs.
//
// Why: a decode layer is four products of 5–20 MB, each a few microseconds of transfer. As
// separate kernels, each pays a ramp (its ring fills only after its predecessor's blocks leave
// the SMs) and a drain (its last loads land, its sums are reduced and stored, while nothing new
// is requested); tools/bench/chain_floor.cu measured that even bare reads chained this way stop at
// ~81 % of the copy bandwidth, and ding's GEMVs lose more. Here each thread's cp.async ring runs
// through the steps' units as one stream: the units of step s + 1 are requested while step s is
// still being consumed, reduced and stored, and while the block waits for the other blocks to
// finish step s. Only x (the activations) waits; the weights never do.
//
// Work split: the grid is one wave (every block resident: blocks per SM × SMs, checked against the
// occupancy the driver reports, launched cooperatively). Each step deals its rows to the blocks as
// gemv_mma.cuh does (equal runs of rows in 16-row tiles, units dealt to the warps in turn) with
// its own MmaRows; a block's work differs per step, the ring and the shared memory are shared.
//
// Between steps: step s + 1 reads what step s (or any earlier step) wrote, from any block. Each
// block, after its stores of step s, arrives at counter s; before staging x of step s + 1 it waits
// until all blocks have arrived (the pattern of a cooperative grid sync: barrier, fence, atomic;
// acquire-load spin, fence, barrier). The last block out resets the counters for the next launch
// (launches on one stream never overlap inside their counters: a chained launch waits for its
// predecessor before its first barrier).
#pragma once
#include <algorithm>

#include "gemv_mma.cuh"

namespace ding::gpu {

namespace gemv {

constexpr int kMaxSequenceSteps = ops::kMaxSequenceSteps;

struct SequenceStep {
  GemmShape p;  // M ≤ 8, one batch
  Epilogue ep;
  Norm norm;    // weight null: x as given
  MmaRows rows; // base, extra, chunks, x_pairs
};

struct SequenceParams {
  SequenceStep steps[kMaxSequenceSteps];
  int count = 0;
  // [kMaxSequenceSteps]: blocks past their stores of step s; then one: blocks done. Zero between
  // launches (GpuStream::grid_counters).
  unsigned* counters = nullptr;
  // Shared memory: staged x at 0, the norm's parameters, the tile sums, then the ring.
  uint32_t params_offset = 0, sums_offset = 0, ring_offset = 0;
};

#if defined(DING_GPU_NVIDIA_MMA)
__device__ inline unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
#endif

template <class T, int Depth>
__global__ void __launch_bounds__(kMmaThreads, kMmaMaxBlocksPerSm)
    gemv_sequence_kernel(const DING_GRID_CONSTANT SequenceParams a) {
#if defined(DING_GPU_NVIDIA_MMA)
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  const int block = int(blockIdx.x);

  extern __shared__ __align__(16) unsigned char shared[];
  T* staged = reinterpret_cast<T*>(shared);
  T* params = reinterpret_cast<T*>(shared + a.params_offset);
  float4* sums = reinterpret_cast<float4*>(shared + a.sums_offset);
  uint4* ring = reinterpret_cast<uint4*>(shared + a.ring_offset);
  __shared__ float red[kMmaWarps];
  auto slot_lo = [&](int s) { return ring + s * kMmaThreads + tid; };
  auto slot_hi = [&](int s) { return ring + (Depth + s) * kMmaThreads + tid; };

  // The block's share of step s: its first row, its run of w, and its rows in 16-row tiles.
  struct Share {
    const T* w;
    int64_t r0;
    int K, rows, tiles, chunks;
  };
  auto share_of = [&](int s) {
    const SequenceStep& st = a.steps[s];
    Share sh;
    sh.r0 = int64_t(block) * st.rows.base + min(block, st.rows.extra);
    sh.rows = st.rows.base + (block < st.rows.extra ? 1 : 0);
    sh.K = int(st.p.K);
    sh.w = static_cast<const T*>(st.p.w) + sh.r0 * st.p.K;
    sh.tiles = (sh.rows + kMmaRows - 1) / kMmaRows;
    sh.chunks = st.rows.chunks;
    return sh;
  };
  // A unit of the whole sequence: step, tile, chunk, and the lane's element of K and row of the
  // block (32-bit offsets into the block's run of w: mma_sequence_plan keeps them below 2^31).
  struct Cursor {
    int step, tile, chunk, k, row;
  };
  // The warp's first unit at or after step s (its units of a step are w, w + 8, ...: a step of
  // fewer units than warps has none for some); step == count: the sequence is done.
  auto first_from = [&](int s, Share& sh) {
    for (; s < a.count; ++s) {
      sh = share_of(s);
      const int tile = warp / sh.chunks, chunk = warp % sh.chunks;
      if (tile < sh.tiles) return Cursor{s, tile, chunk, chunk * kMmaChunk + q * 8, tile * kMmaRows + g};
    }
    return Cursor{a.count, 0, 0, 0, 0};
  };
  auto advance = [&](Cursor& c, Share& sh) {
    c.chunk += kMmaWarps, c.k += kMmaWarps * kMmaChunk;
    while (c.chunk >= sh.chunks) c.chunk -= sh.chunks, c.k -= sh.chunks * kMmaChunk, ++c.tile, c.row += kMmaRows;
    if (c.tile >= sh.tiles) c = first_from(c.step + 1, sh);
  };
  // The unit's rows g and g + 8 into slot s: one commit group per unit, empty past the sequence's
  // end, so that the group count stays in step with the units.
  auto issue = [&](int s, const Cursor& c, const Share& sh) {
    if (c.step < a.count) {
      const bool in = c.k < sh.K;  // K % 8 == 0: a lane's 8 elements are all in or all out
      const bool lo = in && c.row < sh.rows, hi = in && c.row + 8 < sh.rows;
      const T* src = sh.w + (c.row * sh.K + c.k);
      cp_async_16(smem_address(slot_lo(s)), lo ? src : sh.w, lo ? 16 : 0);
      cp_async_16(smem_address(slot_hi(s)), hi ? src + 8 * sh.K : sh.w, hi ? 16 : 0);
    }
    cp_async_commit();
  };

  // Weights are constants of the sequence: the ring fills before the previous kernel is done.
  Share ahead_share;
  Cursor ahead = first_from(0, ahead_share);
#pragma unroll
  for (int s = 0; s < Depth; ++s) {
    issue(s, ahead, ahead_share);
    advance(ahead, ahead_share);
  }
  wait_for_prior_kernels();

  Share at_share;
  Cursor at = first_from(0, at_share);
  int slot = 0;
  for (int s = 0; s < a.count; ++s) {
    const SequenceStep& st = a.steps[s];
    if (s > 0) {  // every block's stores of step s − 1
      if (tid == 0) {
        while (load_acquire(a.counters + (s - 1)) < gridDim.x) __nanosleep(20);
        __threadfence();
      }
      __syncthreads();
    }
    // Every block is resident and past its last wait on the previous kernel: the next may start.
    if (s == a.count - 1) release_dependents();

    const int M = int(st.p.M), K = int(st.p.K);
    const T* x = static_cast<const T*>(st.p.x);
    if (st.norm.weight) {
      T* gamma = params;
      T* beta = st.norm.bias ? params + K : nullptr;
      normalize_rows(x, staged, gamma, beta, M, K, st.norm, red, &st.norm);
    } else {
      for (int i = tid; i < M * K / 8; i += kMmaThreads)
        reinterpret_cast<uint4*>(staged)[i] = reinterpret_cast<const uint4*>(x)[i];
    }
    __syncthreads();

    const Share sh = share_of(s);
    const int x_pairs = st.rows.x_pairs;
    auto sum_at = [&](int tile, int w) { return sums + ((tile * kMmaWarps + w) * 8 + g) * x_pairs + q; };
    const T* x_row = staged + g * K;
    float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int tile = 0;
    auto leave_sums_before = [&](int end) {
      for (; tile < end; ++tile) {
        if (q < x_pairs) *sum_at(tile, warp) = make_float4(d0[0] + d1[0], d0[1] + d1[1], d0[2] + d1[2], d0[3] + d1[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) d0[i] = d1[i] = 0.0f;
      }
    };
    // Unit u of the sequence sits in slot u % Depth (as in gemv_mma_kernel); its refill is the
    // unit Depth ahead, of this step or a later one.
    for (; at.step == s; advance(at, at_share)) {
      cp_async_wait<Depth - 1>();
      leave_sums_before(at.tile);
      const uint4 lo = *slot_lo(slot), hi = *slot_hi(slot);
      const uint4 xv = at.k < K && g < M ? *reinterpret_cast<const uint4*>(x_row + at.k) : make_uint4(0, 0, 0, 0);
      mma::mma_16816<T>(d0, {lo.x, hi.x, lo.y, hi.y}, {xv.x, xv.y});
      mma::mma_16816<T>(d1, {lo.z, hi.z, lo.w, hi.w}, {xv.z, xv.w});
      issue(slot, ahead, ahead_share);
      advance(ahead, ahead_share);
      slot = slot + 1 == Depth ? 0 : slot + 1;
    }
    leave_sums_before(sh.tiles);
    __syncthreads();

    // Tile t by warp t % 8: the warps' sums in warp order (as gemv_mma_kernel).
    for (int t = warp; t < sh.tiles; t += kMmaWarps) {
      if (q >= x_pairs) continue;
      float4 sum = *sum_at(t, 0);
#pragma unroll
      for (int w = 1; w < kMmaWarps; ++w) {
        const float4 v = *sum_at(t, w);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int row = t * kMmaRows + g, m = 2 * q;
      const int64_t n = sh.r0 + row;
      if (row < sh.rows && m < M) st.ep.store(m, n, sum.x);
      if (row < sh.rows && m + 1 < M) st.ep.store(m + 1, n, sum.y);
      if (row + 8 < sh.rows && m < M) st.ep.store(m, n + 8, sum.z);
      if (row + 8 < sh.rows && m + 1 < M) st.ep.store(m + 1, n + 8, sum.w);
    }
    __syncthreads();  // the block's stores done; the sums and staged rows are rewritten next step
    if (s + 1 < a.count && tid == 0) {
      __threadfence();
      atomicAdd(a.counters + s, 1u);
    }
  }
  cp_async_wait<0>();  // only empty groups remain
  if (tid == 0) {
    // Every block arrives here after its last wait: the last one resets the counters.
    unsigned* done = a.counters + kMaxSequenceSteps;
    if (atomicAdd(done, 1u) + 1 == gridDim.x) {
      for (int s = 0; s < a.count; ++s) a.counters[s] = 0;
      *done = 0;
      __threadfence();
    }
  }
#endif
}

// The launch of a sequence: one ring depth and one wave of blocks for every step.
struct SequencePlan {
  int depth = 0;  // 0: the kernel cannot take the sequence
  int per_sm = 0;
  int64_t blocks = 0;
  size_t shared_bytes = 0;
  uint32_t params_offset = 0, sums_offset = 0, ring_offset = 0;
  MmaRows rows[kMaxSequenceSteps];
};

// The most bytes in flight per SM (blocks per SM × depth) whose shared memory (the largest staged
// x, norm parameters and tile sums of any step, and the ring) fits, as mma_plan chooses for one
// product; every step's offsets into a block's run of w must stay below 2^31 elements.
inline SequencePlan mma_sequence_plan(const Props& props, const GemmShape* steps, const bool* normed, int count) {
  auto round16 = [](size_t b) { return (b + 15) / 16 * 16; };
  SequencePlan best;
  for (int per_sm = kMmaMaxBlocksPerSm; per_sm >= 1; --per_sm) {
    const int64_t blocks = int64_t(props.sm_count) * per_sm;
    size_t staged = 0, params = 0, sums = 0;
    bool fits = true;
    SequencePlan plan;
    for (int i = 0; i < count; ++i) {
      const GemmShape& p = steps[i];
      MmaRows& r = plan.rows[i];
      r.base = int(p.N / blocks);
      r.extra = int(p.N % blocks);
      r.chunks = int(ceil_div(p.K, kMmaChunk));
      r.x_pairs = int(ceil_div(p.M, 2));
      staged = std::max(staged, round16(size_t(p.M * p.K) * 2));
      params = std::max(params, normed[i] ? size_t(p.K) * 2 * 2 : size_t(0));
      const int64_t tiles = ceil_div(ceil_div(p.N, blocks), kMmaRows);
      sums = std::max(sums, size_t(tiles) * kMmaWarps * 8 * size_t(r.x_pairs) * sizeof(float4));
      if ((ceil_div(p.N, blocks) + kMmaRows) * p.K >= (int64_t(1) << 31)) fits = false;
    }
    const size_t budget =
        std::min(props.shared_per_block_optin, props.shared_per_sm / per_sm - kSharedReservedPerBlock);
    for (int depth : kMmaDepths) {
      const size_t bytes = staged + params + sums + size_t(depth) * kMmaSlotBytes;
      if (!fits || bytes > budget || per_sm * depth <= best.per_sm * best.depth) continue;
      plan.depth = depth;
      plan.per_sm = per_sm;
      plan.blocks = blocks;
      plan.params_offset = uint32_t(staged);
      plan.sums_offset = uint32_t(staged + params);
      plan.ring_offset = uint32_t(staged + params + sums);
      plan.shared_bytes = bytes;
      best = plan;
    }
  }
  return best;
}

}  // namespace gemv

}  // namespace ding::gpu
