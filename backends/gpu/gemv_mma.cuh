// The few-rows matmul core on tensor cores (NVIDIA sm_80+, x and w both bf16 or both f16):
// out = epilogue(norm(x)[M, K] · w[N, K]ᵀ) for M ≤ 8, as m16n8k16 products over 16 rows of w
// (a tile), 16 of K and all M rows of x (the n8 side; rows ≥ M are zero).
//
// Why tensor cores for a memory-bound product: on the FMA path every 16-bit weight costs a
// widening and an FMA per row of x, which at HBM3 rates leaves the SMs issue-bound (the f32
// GEMV, with half the elements per byte, ran at 96 % of copy bandwidth where bf16 ran at 67 %).
// mma.sync takes the 16-bit operands as loaded, and batch 8 costs what batch 1 does.
//
// Loads stay 16 bytes wide: a product over k does not care in which order k is summed, so each
// lane feeds the mma fragments from 8 contiguous elements of its row of w and the same 8 of x.
// Lane (g, q) = (lane / 4, lane % 4) loads elements [32c + 8q, 32c + 8q + 8) of w rows g and g + 8
// and of x row g; fragment k positions 2q, 2q + 1, 2q + 8, 2q + 9 of the first mma take its
// elements 0–3, those of the second mma elements 4–7. A and B use the same map, so each mma sums
// 16 distinct elements of k, and the two cover the lane group's 32.
//
// Work split: one wave of blocks, each over an equal run of rows of w (±1 row). A decode step's
// matrices are 100 to 400 tiles of 16 rows; one tile per block left a quarter of a 132-SM device
// idle (100 tiles) or ran 2.3 and 3.03 waves (300 and 400 tiles), the last nearly empty. A
// block's rows are contiguous in memory and cut into tiles of 16 (the last one short; rows past
// the run are neither loaded nor stored). Its units (tile, 32-element chunk of K), numbered tile
// by tile, go to its warps in turn (warp w takes units w, w + 8, ...), so all warps stream the
// same bytes and each keeps the next step of units in flight across tile boundaries. A warp
// leaves its sum for each tile in shared memory; after one barrier the block adds the 8 warps'
// sums of each tile in warp order and stores it. Nothing crosses blocks: no global scratch, and
// the result does not depend on timing.
//
// The prologue: weights are never written by a kernel of the step, so before waiting for the
// previous kernel (chained launch, vendor.h) a block asks L2 for the start of its rows and each
// warp loads its first step into registers; the block then normalises x into shared memory
// (Normed, gemv.cuh normalize_row) while those loads are in flight.
#pragma once
#include "gemm_mma.cuh"
#include "gemv.cuh"

namespace ding::gpu {

namespace gemv {

constexpr int kMmaRows = 16;   // rows of w per tile: the mma's m
constexpr int kMmaChunk = 32;  // elements of K per unit: 4 lanes × 8
constexpr int kMmaUnroll = 3;  // units per step; a warp loads the next step before this one's mmas
                               // (4 spilled under the 128-register cap: ptxas -v, sm_90)
constexpr int kMmaWarps = 8;   // per block
// Blocks per SM, all resident at once (the register cap of __launch_bounds__; shared memory
// stays within kGemvStagedBytes a block), so a grid of this many per SM is one wave.
constexpr int kMmaBlocksPerSm = 2;

// How the rows of w are dealt to the blocks: block i takes `base` rows, one more if i < extra,
// from row i · base + min(i, extra), of every batch.
struct MmaRows {
  int base = 0, extra = 0;
  int chunks = 0;      // per tile: ceil(K / 32)
  int x_pairs = 0;     // ceil(M / 2): the lanes (q < x_pairs) whose sums hold rows of x
  size_t staged_bytes = 0;  // Normed: norm(x) [M, K] ahead of the sums in shared memory
};

// Shared memory of a block: the staged rows (Normed), then the warps' tile sums
// [tile][warp][g][x_pairs] float4.
inline size_t mma_shared_bytes(const MmaRows& r, int64_t tiles) {
  return r.staged_bytes + size_t(tiles) * kMmaWarps * 8 * size_t(r.x_pairs) * sizeof(float4);
}

template <class T, bool Normed>
__global__ void __launch_bounds__(kMmaWarps * 32, kMmaBlocksPerSm) gemv_mma_kernel(const Params a, const MmaRows rs) {
#if defined(DING_GPU_NVIDIA_MMA)
  const GemmShape& p = a.p;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int block = int(blockIdx.x);
  const int64_t r0 = int64_t(block) * rs.base + min(block, rs.extra);
  const int rows = rs.base + (block < rs.extra ? 1 : 0);
  const int tiles = (rows + kMmaRows - 1) / kMmaRows;

  extern __shared__ __align__(16) unsigned char shared[];
  T* staged = reinterpret_cast<T*>(shared);
  float4* sums = reinterpret_cast<float4*>(shared + rs.staged_bytes);
  auto sum_at = [&](int tile, int w) { return sums + ((tile * kMmaWarps + w) * 8 + g) * rs.x_pairs + q; };

  // This warp's units in order: w, w + 8, ... of the block's (tile, chunk) sequence.
  struct Cursor {
    int tile, chunk;
  };
  auto advance = [&](Cursor& c) {
    c.chunk += kMmaWarps;
    while (c.chunk >= rs.chunks) c.chunk -= rs.chunks, ++c.tile;
  };
  struct Step {
    uint4 lo[kMmaUnroll], hi[kMmaUnroll];
  };
  // The step's rows g and g + 8 of w, of batch b.
  auto load_w = [&](Step& st, Cursor c, int64_t b) {
#pragma unroll
    for (int i = 0; i < kMmaUnroll; ++i, advance(c)) {
      const int row = c.tile * kMmaRows + g;
      const int k = c.chunk * kMmaChunk + q * 8;
      const bool in = c.tile < tiles && k < p.K;  // K % 8 == 0: a lane's 8 elements are all in or all out
      const T* w = static_cast<const T*>(p.w) + b * p.w_batch + (r0 + row) * p.K + k;
      st.lo[i] = in && row < rows ? *reinterpret_cast<const uint4*>(w) : make_uint4(0, 0, 0, 0);
      st.hi[i] = in && row + 8 < rows ? *reinterpret_cast<const uint4*>(w + 8 * p.K) : make_uint4(0, 0, 0, 0);
    }
  };
  // Row g of x at the unit's chunk: shared memory (Normed) or L1, so it is loaded when used
  // rather than carried in the step's registers.
  auto x_at = [&](Cursor c, const T* x) {
    const int k = c.chunk * kMmaChunk + q * 8;
    return k < p.K && g < p.M ? *reinterpret_cast<const uint4*>(x + g * p.K + k) : make_uint4(0, 0, 0, 0);
  };

  const Cursor first{warp / rs.chunks, warp % rs.chunks};
  Step cur;
  const int64_t b0 = blockIdx.z;
  if (b0 < p.batches) {
    if (a.prefetch_bytes && threadIdx.x == 0) {
      const int64_t bytes = int64_t(rows) * p.K * int64_t(sizeof(T));
      prefetch_to_l2(static_cast<const T*>(p.w) + b0 * p.w_batch + r0 * p.K,
                     uint32_t(std::min<int64_t>(bytes, a.prefetch_bytes)));
    }
    load_w(cur, first, b0);
  }
  wait_for_prior_kernels();
  release_dependents();

  // The batch loop is uniform across the block, so the barriers inside it are reached by all.
  for (int64_t b = b0; b < p.batches; b += gridDim.z) {
    if (b != b0) load_w(cur, first, b);
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch;
    if constexpr (Normed) {
      for (int m = warp; m < p.M; m += kMmaWarps) normalize_row<T, 8>(x + m * p.K, staged + m * p.K, p.K, a.norm);
      __syncthreads();
      x = staged;
    }

    // Every warp leaves a sum for every tile of the block (zero where it had no unit in it).
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int tile = 0;
    auto leave_sums_before = [&](int end) {
      for (; tile < end; ++tile) {
        if (q < rs.x_pairs) *sum_at(tile, warp) = make_float4(d[0], d[1], d[2], d[3]);
        d[0] = d[1] = d[2] = d[3] = 0.0f;
      }
    };
    Cursor at = first;
    while (at.tile < tiles) {
      Cursor next_at = at;
#pragma unroll
      for (int i = 0; i < kMmaUnroll; ++i) advance(next_at);
      Step next;
      if (next_at.tile < tiles) load_w(next, next_at, b);
#pragma unroll
      for (int i = 0; i < kMmaUnroll; ++i, advance(at)) {
        if (at.tile >= tiles) break;
        leave_sums_before(at.tile);
        const uint4 xv = x_at(at, x);
        mma::mma_16816<T>(d, {cur.lo[i].x, cur.hi[i].x, cur.lo[i].y, cur.hi[i].y}, {xv.x, xv.y});
        mma::mma_16816<T>(d, {cur.lo[i].z, cur.hi[i].z, cur.lo[i].w, cur.hi[i].w}, {xv.z, xv.w});
      }
      at = next_at;
      cur = next;
    }
    leave_sums_before(tiles);
    __syncthreads();

    // Tile t by warp t % 8: the warps' sums in warp order; d holds rows g and g + 8 of the
    // tile, x rows 2q and 2q + 1.
    for (int t = warp; t < tiles; t += kMmaWarps) {
      if (q >= rs.x_pairs) continue;
      float4 sum = *sum_at(t, 0);
#pragma unroll
      for (int w = 1; w < kMmaWarps; ++w) {
        const float4 v = *sum_at(t, w);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int row = t * kMmaRows + g, m = 2 * q;
      const int64_t out_row = b * p.M, n = r0 + row;
      if (row < rows && m < p.M) a.ep.store(out_row + m, n, sum.x);
      if (row < rows && m + 1 < p.M) a.ep.store(out_row + m + 1, n, sum.y);
      if (row + 8 < rows && m < p.M) a.ep.store(out_row + m, n + 8, sum.z);
      if (row + 8 < rows && m + 1 < p.M) a.ep.store(out_row + m + 1, n + 8, sum.w);
    }
    __syncthreads();  // the sums and the staged rows are rewritten by the next batch
  }
#endif
}

// The blocks for a product: one wave (kMmaBlocksPerSm per SM, fewer if w has fewer rows), more
// only where a block's tile sums would not fit kGemvStagedBytes (gemv.cuh). rows.base == 0: the core
// cannot take it (the staged rows alone overflow).
inline MmaRows mma_rows(const Props& props, const GemmShape& p, bool normed, int64_t* blocks) {
  MmaRows r;
  r.chunks = int(ceil_div(p.K, kMmaChunk));
  r.x_pairs = int(ceil_div(p.M, 2));
  r.staged_bytes = normed ? size_t(p.M * p.K) * 2 : 0;  // 16-bit x
  r.staged_bytes = (r.staged_bytes + 15) / 16 * 16;
  const size_t per_tile = mma_shared_bytes(r, 1) - r.staged_bytes;
  if (r.staged_bytes + per_tile > size_t(kGemvStagedBytes)) return r;
  const int64_t max_tiles = int64_t((size_t(kGemvStagedBytes) - r.staged_bytes) / per_tile);
  // Per batch: the wave spread over the batches, at least one block each.
  int64_t n = std::max<int64_t>(1, int64_t(props.sm_count) * kMmaBlocksPerSm / std::min(p.batches, kMaxGridYZ));
  n = std::min(n, p.N);
  n = std::max(n, ceil_div(p.N, max_tiles * kMmaRows));  // ceil(N / n) rows fit max_tiles tiles
  r.base = int(p.N / n);
  r.extra = int(p.N % n);
  *blocks = n;
  return r;
}

}  // namespace gemv

// Whether the tensor-core GEMV takes the product: 16-bit x and w of one type, 16-byte rows, the
// staged rows (normed) and one tile's sums within a block's shared memory.
template <class X, class W>
bool gemv_mma_fits(const Props& props, const GemmShape& p, bool normed) {
  if (!(std::is_same_v<X, W> && !std::is_same_v<X, float> && props.has_mma_sync() && p.K % 8 == 0 &&
        aligned_to(p.x, 16) && aligned_to(p.w, 16) && p.N < (int64_t(1) << 31)))
    return false;
  int64_t blocks = 0;
  return gemv::mma_rows(props, p, normed, &blocks).base > 0;
}

template <class T>
void launch_gemv_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm) {
  using namespace gemv;
  const bool normed = norm.kind != ops::NormKind::none;
  Params a{p, ep, {}, 1, p.K, 0};
  if (normed) a.norm = {norm.kind == ops::NormKind::layer_norm, norm.weight.data, norm.bias.data, norm.eps};
  int64_t blocks = 0;
  const MmaRows rows = mma_rows(s.props(), p, normed, &blocks);
  const int64_t tiles = ceil_div(int64_t(rows.base) + (rows.extra ? 1 : 0), kMmaRows);
  const size_t shared = mma_shared_bytes(rows, tiles);
  const bool chained = gemv_chained(s);
  // The start of each block's rows, at most a share of L2 per block: a prefetch of more than
  // L2 holds (the 160 MB LM head) would evict its own lines before the loads reach them.
  if (chained && gemv_prefetch(s))
    a.prefetch_bytes = uint32_t(std::min<size_t>(s.props().l2_bytes / (2 * size_t(blocks) * std::min<int64_t>(p.batches, kMaxGridYZ)), size_t(1) << 30) / 16 * 16);
  const dim3 grid(unsigned(blocks), 1, unsigned(std::min(p.batches, kMaxGridYZ)));
  if (normed)
    DING_GPU_CHECK(launch_chained(chained, gemv_mma_kernel<T, true>, grid, dim3(kMmaWarps * 32), shared, s.handle(), a, rows));
  else
    DING_GPU_CHECK(launch_chained(chained, gemv_mma_kernel<T, false>, grid, dim3(kMmaWarps * 32), shared, s.handle(), a, rows));
  DING_GPU_CHECK_LAUNCH("gemv_mma_kernel");
}

}  // namespace ding::gpu
