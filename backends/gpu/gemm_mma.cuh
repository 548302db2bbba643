// The tensor-core matmul core (NVIDIA sm_80+: mma.sync, ldmatrix, cp.async), for x and w both
// bf16 or both f16, f32 accumulation, fused epilogue.
//
// A block computes a BM × BN tile of out. K advances in 32-deep slices through a ring of
// `Stages` shared-memory stages filled by 16-byte cp.async copies, Stages - 1 slices ahead of the
// math. Each warp owns a (BM / WarpsM) × (BN / WarpsN) piece: per 16-deep step it loads its A
// fragments (x, row-major: the "row" operand) and B fragments (w [N, K] row-major is exactly the
// "col" operand, no transpose) with ldmatrix.x4 and issues m16n8k16 MMAs.
//
// Shared layout: a stage row holds 32 elements = four 16-byte chunks; chunk c of row r lives at
// slot c ^ ((r / 2) % 4). ldmatrix reads one chunk column of 8 consecutive rows per 8×8 matrix;
// unswizzled, rows r and r + 2 would share banks (a row is 64 bytes), with the XOR the 8 rows
// cover all 8 16-byte bank groups of a 128-byte line: conflict-free.
//
// Per product the host picks a tile shape (128 × 128, 128 × 64, 64 × 128, 64 × 64) and a K split
// (gemm_split.cuh) from a wave-quantisation cost model (mma_plan); gemm_wgmma.h takes the large
// products instead on an H100. This core is the one every other NVIDIA GPU (RTX 4090) runs.
//
// Segmented (moe_matmul's prefill, row_tiles.cuh): grid x enumerates the row tiles of BM rows of
// every segment instead of one product's; a block finds its tile (segment e, rows [begin, end)),
// multiplies those rows of x by w + e · w_batch and stores the same rows of out. Unsplit; a block
// past the offsets' real tile count leaves before its first barrier.
//
// Edges: rows of x beyond M, rows of w beyond N and chunks beyond K are zero-filled by cp.async
// (source size 0: nothing is read), so the MMAs need no special case and the epilogue checks
// m < M, n < N.
//
// swiglu: the tile is BN columns of the product whose groups of 16 are 8 outputs' gate sums and
// their up sums (gemm.cuh); only the rows of w the copies read change. Every warp's piece (kWarpN,
// a multiple of 16, from a multiple of 16) holds both sums of its outputs, which the epilogue
// (SplitK::store_piece) combines, or the split reduce when K is split. The host sends a product here only when every 16-byte chunk is whole and aligned:
// K a multiple of 8 and both base pointers 16-byte aligned (else the SIMT core takes it).
#pragma once
#include <algorithm>
#include <type_traits>

#include "check.h"
#include "cp_async.cuh"
#include "gemm.cuh"
#include "gemm_split.cuh"
#include "mma_sync.cuh"
#include "row_tiles.cuh"
#include "stream.h"

DING_GPU_BEGIN

namespace mma {

// mma.sync and ldmatrix are 32-lane instructions; this kernel runs only on NVIDIA GPUs.
constexpr int kLanes = 32;
constexpr int kBK = 32;              // K per stage: 4 chunks of 8 elements per row
constexpr int kChunks = kBK / 8;

template <int BM_, int BN_, int WarpsM_, int WarpsN_, int Stages_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WarpsM = WarpsM_, WarpsN = WarpsN_, Stages = Stages_;
  static constexpr int kThreads = WarpsM * WarpsN * kLanes;
  static constexpr int kMinBlocks = 65536 / (kThreads * 128);  // blocks per SM at ≤ 128 registers
  static constexpr int kWarpM = BM / WarpsM, kWarpN = BN / WarpsN;
  static constexpr int kFragsM = kWarpM / 16, kFragsN = kWarpN / 8;  // m16 and n8 pieces per warp
  static constexpr int kStageElems = (BM + BN) * kBK;
  static constexpr int kSmemBytes = Stages * kStageElems * 2;
  // The epilogue stages one 16 × kWarpN f32 piece per warp in the (then idle) stages; rows padded
  // by 4 floats so the fragment writes (8 rows × 4 lanes) spread over the banks.
  static constexpr int kPieceLd = kWarpN + 4;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "B fragments are loaded two n8 pieces at a time");
  static_assert((BM * kChunks) % kThreads == 0 && (BN * kChunks) % kThreads == 0, "whole chunks per thread");
  static_assert(Stages >= 2, "the pipeline needs a stage to compute on and one to fill");
  static_assert(WarpsM * WarpsN * 16 * kPieceLd * 4 <= kSmemBytes, "epilogue pieces fit in the stages");
};

// The tile shapes the host chooses from (mma_plan below). 128 × 128, 8 warps of 64 × 32: 64
// accumulators per thread, each loaded element used most often. Four stages (64 KB) where two
// blocks fit per SM that way (H100: 228 KB), else three (48 KB; RTX 4090: 100 KB per SM).
using TileLarge4 = Tile<128, 128, 2, 4, 4>;
using TileLarge3 = Tile<128, 128, 2, 4, 3>;
// 128 × 64 and 64 × 128, 4 warps of 64 × 32 / 32 × 64: half the tile, nearly the reuse of the
// large one per warp; twice the blocks where 128 × 128 would leave SMs idle.
using TileTall = Tile<128, 64, 2, 2, 4>;
using TileWide = Tile<64, 128, 2, 2, 4>;
// 64 × 64, 4 warps of 32 × 32: four times the blocks of the large tile.
using TileSmall = Tile<64, 64, 2, 2, 4>;

// Element offset of chunk c of row r in a stage's A or B part (see the swizzle above).
__device__ inline int swizzle(int r, int c) { return r * kBK + ((c ^ ((r >> 1) & 3)) * 8); }

// kMinBlocks caps registers at 128 per thread: two 256-thread blocks (or four 128-thread ones) per SM.
template <class T, class Tl>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kMinBlocks)
    gemm_mma_kernel(const GemmShape shape, const Epilogue segment_ep, const SplitK split, const RowSegments segments) {
#if defined(DING_GPU_NVIDIA_MMA)
  extern __shared__ uint4 smem_chunks[];  // dynamic: Stages × (A: BM rows, B: BN rows) × kBK
  T* const smem = reinterpret_cast<T*>(smem_chunks);
  const int tid = int(threadIdx.x), lane = tid % kLanes, warp = tid / kLanes;
  const int warp_m = (warp / Tl::WarpsN) * Tl::kWarpM, warp_n = (warp % Tl::WarpsN) * Tl::kWarpN;
  int64_t m0 = int64_t(blockIdx.x) * Tl::BM;
  GemmShape p = shape;
  Epilogue ep = segment_ep;
  if (segments.offsets) {  // one row tile of one segment: rows [m0, p.M) of the one batch
    const RowTile tile = find_row_tile(segments.offsets, segments.count, segments.rows, blockIdx.x, Tl::BM);
    if (tile.rows == 0) return;
    m0 = tile.begin;
    p.M = tile.begin + tile.rows;
    p.w = static_cast<const T*>(shape.w) + int64_t(tile.segment) * shape.w_batch;
    p.batches = 1;
    // Widened 8-bit experts (moe_matmul.cu): the segment's row scales follow its rows of w.
    if (ep.w_scales) ep.w_scales += int64_t(tile.segment) * (shape.w_batch / shape.K);
  }
  const int64_t k_tiles_all = (p.K + kBK - 1) / kBK;

  // n0: the tile's first column of the product (for swiglu, of its 2N-wide form: gemm.cuh).
  for (int64_t n0 = int64_t(blockIdx.y) * Tl::BN; n0 < split.product_n; n0 += int64_t(gridDim.y) * Tl::BN)
    for (int64_t z = blockIdx.z; z < p.batches * split.splits; z += gridDim.z) {
      const int64_t b = z / split.splits, s = z % split.splits;
      // This block's K slices: [k_first, k_first + k_tiles).
      const int64_t k_first = split.first_tile(s), k_tiles = split.tile_count(s, k_tiles_all);
      const T* const x = static_cast<const T*>(p.x) + b * p.x_batch;
      const T* const w = static_cast<const T*>(p.w) + b * p.w_batch;

      // Copies: thread t moves chunk t % 4 of rows t / 4 + it · kRowStep of x and of w, every
      // slice. K % 8 == 0, so a chunk is all in range or all out; out-of-range chunks name the
      // (valid) base pointer and copy 0 bytes.
      constexpr int kRowStep = Tl::kThreads / kChunks;
      constexpr int kCopiesA = Tl::BM / kRowStep, kCopiesB = Tl::BN / kRowStep;
      const int copy_row = tid / kChunks, copy_chunk = tid % kChunks;
      const uint32_t smem_base = smem_address(smem);
      const T* a_src[kCopiesA];
      const T* b_src[kCopiesB];
      bool a_ok[kCopiesA], b_ok[kCopiesB];
      uint32_t a_dst[kCopiesA], b_dst[kCopiesB];
#pragma unroll
      for (int it = 0; it < kCopiesA; ++it) {
        const int r = copy_row + it * kRowStep;
        a_ok[it] = m0 + r < p.M;
        a_src[it] = x + (a_ok[it] ? (m0 + r) * p.K : 0) + copy_chunk * 8;
        a_dst[it] = smem_base + uint32_t(swizzle(r, copy_chunk)) * 2;
      }
#pragma unroll
      for (int it = 0; it < kCopiesB; ++it) {
        const int r = copy_row + it * kRowStep;
        const int64_t w_row = product_w_row(n0 + r, p.N, ep.swiglu);
        b_ok[it] = w_row >= 0;
        b_src[it] = w + (b_ok[it] ? w_row * p.K : 0) + copy_chunk * 8;
        b_dst[it] = smem_base + uint32_t(Tl::BM * kBK + swizzle(r, copy_chunk)) * 2;
      }
      auto load_stage = [&](int stage, int64_t local_kt) {
        const int64_t kt = k_first + local_kt;
        const uint32_t stage_bytes = uint32_t(stage * Tl::kStageElems * 2);
        const bool k_ok = kt * kBK + copy_chunk * 8 < p.K;
#pragma unroll
        for (int it = 0; it < kCopiesA; ++it) {
          const bool ok = a_ok[it] && k_ok;
          cp_async_16(a_dst[it] + stage_bytes, ok ? a_src[it] + kt * kBK : x, ok ? 16 : 0);
        }
#pragma unroll
        for (int it = 0; it < kCopiesB; ++it) {
          const bool ok = b_ok[it] && k_ok;
          cp_async_16(b_dst[it] + stage_bytes, ok ? b_src[it] + kt * kBK : w, ok ? 16 : 0);
        }
      };

      // ldmatrix addresses of this lane in stage 0, per 16-deep step kk. A (16 × 16 per piece):
      // lanes 0-15 give rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15; the four 8×8
      // matrices come back as a0 … a3 of the m16n8k16 A fragment. B, two n8 pieces per x4:
      // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) = b0, b1 of
      // piece 2j and b0, b1 of piece 2j + 1. Piece i (j) is 16 rows further: the swizzle term
      // (r / 2) % 4 is the same there, so its address is a constant offset.
      const int a_row = warp_m + lane % 16, b_row = warp_n + (lane / 16) * 8 + lane % 8;
      uint32_t a_addr[kBK / 16], b_addr[kBK / 16];
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        a_addr[kk] = smem_base + uint32_t(swizzle(a_row, kk * 2 + lane / 16)) * 2;
        b_addr[kk] = smem_base + uint32_t(Tl::BM * kBK + swizzle(b_row, kk * 2 + (lane / 8) % 2)) * 2;
      }
      constexpr uint32_t kPieceBytes = 16 * kBK * 2;

      float acc[Tl::kFragsM][Tl::kFragsN][4] = {};
      // Prologue: slices 0 … Stages-2 in flight. One commit per slice even when there is no
      // slice to load, so "group g holds slice g" holds for the waits below.
#pragma unroll
      for (int st = 0; st < Tl::Stages - 1; ++st) {
        if (st < k_tiles) load_stage(st, st);
        cp_async_commit();
      }
      int read_stage = 0;  // slice kt's stage; slice kt + Stages-1 goes where slice kt-1 was
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        // Groups 0 … kt + Stages-2 are committed; leaving Stages-2 in flight means slice kt has
        // landed (for this thread's copies; the barrier publishes everyone's). The barrier also
        // means every warp has finished computing on slice kt-1, whose stage is refilled next.
        cp_async_wait<Tl::Stages - 2>();
        __syncthreads();
        if (kt + Tl::Stages - 1 < k_tiles)
          load_stage(read_stage == 0 ? Tl::Stages - 1 : read_stage - 1, kt + Tl::Stages - 1);
        cp_async_commit();

        const uint32_t stage_bytes = uint32_t(read_stage * Tl::kStageElems * 2);
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          uint32_t a[Tl::kFragsM][4];
#pragma unroll
          for (int i = 0; i < Tl::kFragsM; ++i) ldmatrix_x4(a[i], a_addr[kk] + stage_bytes + i * kPieceBytes);
          uint32_t bfrag[Tl::kFragsN][2];
#pragma unroll
          for (int j = 0; j < Tl::kFragsN / 2; ++j) {
            uint32_t r[4];
            ldmatrix_x4(r, b_addr[kk] + stage_bytes + j * kPieceBytes);
            bfrag[2 * j][0] = r[0];
            bfrag[2 * j][1] = r[1];
            bfrag[2 * j + 1][0] = r[2];
            bfrag[2 * j + 1][1] = r[3];
          }
#pragma unroll
          for (int i = 0; i < Tl::kFragsM; ++i)
#pragma unroll
            for (int j = 0; j < Tl::kFragsN; ++j) mma_16816<T>(acc[i][j], a[i], bfrag[j]);
        }
        read_stage = read_stage + 1 == Tl::Stages ? 0 : read_stage + 1;
      }
      cp_async_wait<0>();  // only empty groups remain; nothing may land after the stages are reused
      __syncthreads();     // every warp is done with the stages: they become the epilogue's staging

      // Out goes through shared memory one m16 piece at a time: each warp writes its 16 × kWarpN
      // f32 piece, then stores it by rows (SplitK::store_piece: 8 consecutive columns per lane,
      // where the fragments alone would scatter 8 rows × 8 bytes), one rolled loop for the
      // epilogue. Accumulator piece (i, j): d0, d1 at row lane / 4, columns 2 · (lane % 4) +
      // {0, 1}; d2, d3 eight rows further down.
      float* const piece = reinterpret_cast<float*>(smem_chunks) + warp * 16 * Tl::kPieceLd;
#pragma unroll
      for (int i = 0; i < Tl::kFragsM; ++i) {
#pragma unroll
        for (int j = 0; j < Tl::kFragsN; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float* const at = piece + (lane / 4 + h * 8) * Tl::kPieceLd + j * 8 + (lane % 4) * 2;
            at[0] = acc[i][j][2 * h];
            at[1] = acc[i][j][2 * h + 1];
          }
        __syncwarp();
        split.store_piece(ep, p, s, b, piece, Tl::kPieceLd, 16, Tl::kWarpN, m0 + warp_m + i * 16, n0 + warp_n, lane);
        __syncwarp();  // read before the next piece overwrites it
      }
      __syncthreads();  // the staging is the next tile's first stage
    }
#endif  // DING_GPU_NVIDIA_MMA
}

}  // namespace mma

#if defined(DING_GPU_NVIDIA)
// Whether the tensor-core core can take a product of T = x's = w's dtype: 16-byte copies need
// every row of x and w to start on a 16-byte boundary.
inline bool gemm_mma_fits(const Props& props, const GemmShape& p) {
  return props.has_mma_sync() && p.K > 0 && p.K % 8 == 0 && aligned_to(p.x, 16) && aligned_to(p.w, 16);
}

// A tile shape and K split for one product, as mma_plan chooses it.
enum class MmaTile { large, tall, wide, small };
struct MmaPlan {
  MmaTile tile = MmaTile::large;
  int splits = 1;
};

// The host's estimate of a plan's time, in units of one 128 × 128 × 32 slice computed at a full
// SM's mma.sync rate (~0.2 µs on an H100). Not measured per shape: a model with named guesses,
// meant to rank plans, and overridable (MatmulTuning) for sweeps on the device.
//   - An SM runs the blocks it is given one after another in effect: the busiest SM (ceil of
//     blocks / SMs) sets the time (wave quantisation), each block costing its slices (plus
//     kFillSlices for its prologue and epilogue) × its area, divided by the tile's efficiency.
//   - A block alone on its SM cannot go faster than kLoneSliceTime per slice (memory latency
//     over the Stages - 1 slices in flight); co-resident blocks overlap those waits.
//   - A split adds the reduce kernel: its launch, and partials written and read once (f32).
namespace mma_model {
constexpr double kFillSlices = 3;
constexpr double kLoneSliceTime = 0.5;
constexpr double kReduceLaunch = 5;
constexpr double kPartialBytesPerUnit = 1.8e6;  // ~8 TB/s of L2 for 0.22 µs
constexpr int kMaxSplits = 8;
constexpr int64_t kMinSlicesPerSplit = 4;

struct TileTraits {
  MmaTile tile;
  int bm, bn;
  double efficiency;  // relative to 128 × 128: loads and ldmatrix per MMA grow as the tile shrinks
  int resident;       // blocks per SM the launch bounds allow (registers); shared memory checked apart
  int smem_bytes;
};
}  // namespace mma_model

inline double mma_plan_cost(const Props& props, const GemmShape& p, const mma_model::TileTraits& t, int splits) {
  using namespace mma_model;
  const int64_t k_tiles = ceil_div(p.K, mma::kBK);
  const int64_t per = ceil_div(k_tiles, splits);
  const int64_t used_splits = ceil_div(k_tiles, per);
  const int64_t blocks = ceil_div(p.M, t.bm) * ceil_div(p.N, t.bn) * p.batches * used_splits;
  const int64_t sms = std::max(props.sm_count, 1);
  const int64_t per_sm = ceil_div(blocks, sms);
  const int64_t fit = std::max<int64_t>(1, std::min<int64_t>(t.resident, int64_t(props.shared_per_sm) / (t.smem_bytes + 1024)));
  const double slices = double(per) + kFillSlices;
  const double area = double(t.bm) * t.bn / (128.0 * 128.0);
  const double throughput = double(per_sm) * slices * area / t.efficiency;
  const double latency = double(ceil_div(per_sm, fit)) * slices * kLoneSliceTime;
  double cost = std::max(throughput, latency);
  if (used_splits > 1)
    cost += kReduceLaunch + double(p.batches * p.M * p.N * used_splits) * 8.0 / kPartialBytesPerUnit;
  return cost;
}

// The cheapest plan by mma_plan_cost, or the one MatmulTuning forces (tile and/or splits; 0: auto).
inline MmaPlan mma_plan(const Props& props, const GemmShape& p, const MatmulTuning& tuning) {
  using namespace mma_model;
  const TileTraits tiles[] = {
      {MmaTile::large, 128, 128, 1.0, mma::TileLarge4::kMinBlocks, mma::TileLarge3::kSmemBytes},
      {MmaTile::tall, 128, 64, 0.85, mma::TileTall::kMinBlocks, mma::TileTall::kSmemBytes},
      {MmaTile::wide, 64, 128, 0.85, mma::TileWide::kMinBlocks, mma::TileWide::kSmemBytes},
      {MmaTile::small, 64, 64, 0.7, mma::TileSmall::kMinBlocks, mma::TileSmall::kSmemBytes},
  };
  const int64_t k_tiles = ceil_div(p.K, mma::kBK);
  MmaPlan best;
  double best_cost = -1;
  for (const TileTraits& t : tiles) {
    if (tuning.tile_m && (tuning.tile_m != t.bm || tuning.tile_n != t.bn)) continue;
    for (int splits = 1; splits <= kMaxSplits; ++splits) {
      if (tuning.splits && splits != tuning.splits) continue;
      if (splits > 1 && (k_tiles / splits < kMinSlicesPerSplit ||
                         size_t(p.batches * p.M * p.N) * splits * sizeof(float) > kMaxPartialBytes))
        continue;
      const double cost = mma_plan_cost(props, p, t, splits);
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = {t.tile, splits};
      }
    }
  }
  return best;  // a forced tile or split that no product could use falls back to large, unsplit
}

// One tile's kernel over the product (and its split, which the caller reduces). Its own template
// so that each tile's kernels compile in a unit of their own (matmul_cores.h).
// Segmented (segments.offsets set): p.M = P and p.w_batch the elements between segments' w; one
// block row per row tile that P rows can make, unsplit.
template <class T, class Tl>
void launch_gemm_mma_tile(GpuStream& s, const GemmShape& p, const Epilogue& ep, const SplitK& split,
                          const RowSegments& segments) {
  const GemmShape product = product_shape(p, ep);
  const auto kernel = mma::gemm_mma_kernel<T, Tl>;
  if (Tl::kSmemBytes > 48 * 1024)
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), Tl::kSmemBytes));
  const int64_t row_blocks =
      segments.offsets ? max_row_tiles(segments.rows, segments.count, Tl::BM) : ceil_div(p.M, Tl::BM);
  const dim3 grid(unsigned(row_blocks), unsigned(std::min(ceil_div(product.N, Tl::BN), kMaxGridYZ)),
                  unsigned(std::min(p.batches * split.splits, kMaxGridYZ)));
  kernel<<<grid, Tl::kThreads, Tl::kSmemBytes, s.handle()>>>(p, ep, split, segments);
  DING_GPU_CHECK_LAUNCH("gemm_mma_kernel");
}

// The plan's tile (large: four stages where two blocks of them fit an SM, else three).
template <class T>
void launch_gemm_mma_plan(GpuStream& s, const GemmShape& p, const Epilogue& ep, MmaTile tile, const SplitK& split,
                          const RowSegments& segments) {
  using namespace mma;
  const Props& props = s.props();
  switch (tile) {
    case MmaTile::large:
      if (props.shared_per_sm >= 2 * size_t(TileLarge4::kSmemBytes + 1024) &&
          props.shared_per_block_optin >= size_t(TileLarge4::kSmemBytes))
        launch_gemm_mma_tile<T, TileLarge4>(s, p, ep, split, segments);
      else
        launch_gemm_mma_tile<T, TileLarge3>(s, p, ep, split, segments);
      break;
    case MmaTile::tall: launch_gemm_mma_tile<T, TileTall>(s, p, ep, split, segments); break;
    case MmaTile::wide: launch_gemm_mma_tile<T, TileWide>(s, p, ep, split, segments); break;
    case MmaTile::small: launch_gemm_mma_tile<T, TileSmall>(s, p, ep, split, segments); break;
  }
}

template <class T>
void launch_gemm_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace mma;
  const Props& props = s.props();
  const GemmShape product = product_shape(p, ep);
  const MmaPlan plan = mma_plan(props, product, s.matmul_tuning());
  const SplitK split = make_split(s, product, ceil_div(p.K, kBK), plan.splits);
  launch_gemm_mma_plan<T>(s, p, ep, plan.tile, split, {});
  if (split.splits > 1) launch_gemm_split_reduce(s, p, split, ep);
}

// out[rows of segment e] = epilogue(x[those rows] · w[e]ᵀ) for the segments' rows (row_tiles.cuh):
// p.M = P, p.w_batch the elements between segments' w. Tiles of 128 rows where segments average
// that many, else of 64 (a segment's last tile is partly empty: the smaller, the less is wasted).
template <class T>
void launch_gemm_mma_segments(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets, int E,
                              int P) {
  const MmaTile tile = P >= 128 * int64_t(E) ? MmaTile::large : MmaTile::wide;
  const SplitK unsplit = make_split(s, product_shape(p, ep), ceil_div(p.K, mma::kBK), 1);
  launch_gemm_mma_plan<T>(s, p, ep, tile, unsplit, RowSegments{offsets, E, P});
}
#endif  // DING_GPU_NVIDIA

DING_GPU_END
