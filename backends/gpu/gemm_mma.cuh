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
#include "narrow_operands.cuh"
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

// Element offset of chunk c of row r in a stage's A or B part of 16-bit elements (see the
// swizzle above).
__device__ inline int swizzle(int r, int c) { return r * kBK + ((c ^ ((r >> 1) & 3)) * 8); }

// How the operands sit in shared memory and reach the mma, by their element types: x as X, w as W.
//   X = W, 16-bit: the swizzled stages above, fragments by ldmatrix, m16n8k16.
//   X 16-bit, W 8-bit (i8 or E4M3 with row scales, Epilogue::w_scales): a row of w is 32 bytes a
//     slice, unswizzled. Lane (g, q) takes 8 contiguous elements [8q, 8q + 8) of the slice, from
//     rows g and g + 8 of each m16 piece of x (one 16-byte load each) and row g of each n8 piece of
//     w (one 8-byte load, widened in registers: narrow_operands.cuh), and feeds two m16n8k16 mmas,
//     elements 0–3 to the first (positions 2q, 2q + 1, 2q + 8, 2q + 9), 4–7 to the second. A and
//     B use the same map, so each mma sums 16 distinct elements of k and the two cover the slice
//     (the order of a sum over k is free). The loads are conflict-free: a quarter warp's 16-byte
//     loads cover two whole 64-byte rows of x, a half warp's 8-byte loads four 32-byte rows of w.
//   X = W = E4M3 (x rounded per row, Epilogue::x_scales; sm_89+): both parts 32 bytes a row,
//     unswizzled; lane (g, q)'s 8 bytes [8q, 8q + 8) of a row are one m16n8k32's k 4q … 4q + 3
//     (bytes 0–3) and 16 + 4q … (bytes 4–7), for x and w alike.
template <class X, class W>
struct Operands {
  static_assert(sizeof(X) == 2 ? (sizeof(W) == 1 || std::is_same_v<X, W>) : std::is_same_v<X, W>,
                "16-bit x with w of its type or 8 bits, or E4M3 × E4M3");
  static constexpr bool kLdmatrix = sizeof(W) == 2;
  static constexpr bool kWidenW = sizeof(X) == 2 && sizeof(W) == 1;
  static constexpr int kARowBytes = kBK * int(sizeof(X)), kBRowBytes = kBK * int(sizeof(W));  // per slice
  static constexpr int kAChunks = kARowBytes / 16, kBChunks = kBRowBytes / 16;
  static constexpr int kAChunkElems = 16 / int(sizeof(X)), kBChunkElems = 16 / int(sizeof(W));
  template <class Tl>
  static constexpr int kStageBytes = Tl::BM * kARowBytes + Tl::BN * kBRowBytes;
  template <class Tl>
  static constexpr int kSmemBytes = Tl::Stages * kStageBytes<Tl>;
  // Byte offset of 16-byte chunk c of row r in a stage's A part.
  __device__ static int a_offset(int r, int c) { return sizeof(X) == 2 ? swizzle(r, c) * 2 : r * kARowBytes + c * 16; }
  __device__ static int b_offset(int r, int c) { return sizeof(W) == 2 ? swizzle(r, c) * 2 : r * kBRowBytes + c * 16; }
};

// f(std::integral_constant<int, i>{}) for i = 0 … N − 1, each call its own code.
template <int N, int I = 0, class F>
__device__ __forceinline__ void unrolled(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    unrolled<N, I + 1>(f);
  }
}

__device__ inline uint4 load_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ inline uint2 load_shared8(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

// Blocks per SM the launch bounds ask for. 16-bit operands: kMinBlocks, which caps registers at
// 128 per thread (two 256-thread blocks or four 128-thread ones per SM). 8-bit ones hold a lane's
// 8 elements of each m16 piece of x whole (Operands): the 32 × 64 warp tile spilled 632 bytes a
// thread at 128 registers (sm_89, ptxas -v), 344 at 168, so its 128-thread blocks ask for three per
// SM there.
template <class X, class W, class Tl>
constexpr int kBlocksPerSm = Operands<X, W>::kLdmatrix || Tl::kThreads > 128 ? Tl::kMinBlocks : 3;

// X, W: the operands' element types (Operands above); the sums are f32 either way.
template <class X, class W, class Tl>
__global__ void __launch_bounds__(Tl::kThreads, (kBlocksPerSm<X, W, Tl>))
    gemm_mma_kernel(const GemmShape shape, const Epilogue segment_ep, const SplitK split, const RowSegments segments) {
#if defined(DING_GPU_NVIDIA_MMA)
  using Ops = Operands<X, W>;
  extern __shared__ uint4 smem_chunks[];  // dynamic: Stages × (A: BM rows, B: BN rows) × kBK
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
    p.w = static_cast<const W*>(shape.w) + int64_t(tile.segment) * shape.w_batch;
    p.batches = 1;
    // 8-bit experts (moe_matmul.cu): the segment's row scales follow its rows of w.
    if (ep.w_scales) ep.w_scales += int64_t(tile.segment) * (shape.w_batch / shape.K);
  }
  const int64_t k_tiles_all = (p.K + kBK - 1) / kBK;

  // n0: the tile's first column of the product (for swiglu, of its 2N-wide form: gemm.cuh).
  for (int64_t n0 = int64_t(blockIdx.y) * Tl::BN; n0 < split.product_n; n0 += int64_t(gridDim.y) * Tl::BN)
    for (int64_t z = blockIdx.z; z < p.batches * split.splits; z += gridDim.z) {
      const int64_t b = z / split.splits, s = z % split.splits;
      // This block's K slices: [k_first, k_first + k_tiles).
      const int64_t k_first = split.first_tile(s), k_tiles = split.tile_count(s, k_tiles_all);
      const X* const x = static_cast<const X*>(p.x) + b * p.x_batch;
      const W* const w = static_cast<const W*>(p.w) + b * p.w_batch;

      // Copies: thread t moves chunk t % chunks of rows t / chunks + it · step of x and of w, every
      // slice. K is a multiple of a chunk's elements, so a chunk is all in range or all out;
      // out-of-range chunks name the (valid) base pointer and copy 0 bytes.
      constexpr int kRowStepA = Tl::kThreads / Ops::kAChunks, kRowStepB = Tl::kThreads / Ops::kBChunks;
      constexpr int kCopiesA = Tl::BM / kRowStepA, kCopiesB = Tl::BN / kRowStepB;
      static_assert(Tl::BM % kRowStepA == 0 && Tl::BN % kRowStepB == 0, "whole chunks per thread");
      const int a_chunk = tid % Ops::kAChunks, b_chunk = tid % Ops::kBChunks;
      const uint32_t smem_base = smem_address(smem_chunks);
      const X* a_src[kCopiesA];
      const W* b_src[kCopiesB];
      bool a_ok[kCopiesA], b_ok[kCopiesB];
      uint32_t a_dst[kCopiesA], b_dst[kCopiesB];
#pragma unroll
      for (int it = 0; it < kCopiesA; ++it) {
        const int r = tid / Ops::kAChunks + it * kRowStepA;
        a_ok[it] = m0 + r < p.M;
        a_src[it] = x + (a_ok[it] ? (m0 + r) * p.K : 0) + a_chunk * Ops::kAChunkElems;
        a_dst[it] = smem_base + uint32_t(Ops::a_offset(r, a_chunk));
      }
#pragma unroll
      for (int it = 0; it < kCopiesB; ++it) {
        const int r = tid / Ops::kBChunks + it * kRowStepB;
        const int64_t w_row = product_w_row(n0 + r, p.N, ep.swiglu);
        b_ok[it] = w_row >= 0;
        b_src[it] = w + (b_ok[it] ? w_row * p.K : 0) + b_chunk * Ops::kBChunkElems;
        b_dst[it] = smem_base + uint32_t(Tl::BM * Ops::kARowBytes + Ops::b_offset(r, b_chunk));
      }
      auto load_stage = [&](int stage, int64_t local_kt) {
        const int64_t kt = k_first + local_kt;
        const uint32_t stage_bytes = uint32_t(stage * Ops::template kStageBytes<Tl>);
        const bool a_k_ok = kt * kBK + a_chunk * Ops::kAChunkElems < p.K;
        const bool b_k_ok = kt * kBK + b_chunk * Ops::kBChunkElems < p.K;
#pragma unroll
        for (int it = 0; it < kCopiesA; ++it) {
          const bool ok = a_ok[it] && a_k_ok;
          cp_async_16(a_dst[it] + stage_bytes, ok ? a_src[it] + kt * kBK : x, ok ? 16 : 0);
        }
#pragma unroll
        for (int it = 0; it < kCopiesB; ++it) {
          const bool ok = b_ok[it] && b_k_ok;
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
      // The 8-bit maps' addresses of lane (g, q) in stage 0: its 8 elements of row g of the warp's
      // first m16 piece of x, and of row g of its first n8 piece of w. Row g + 8 and piece i (j)
      // are constant offsets: rows g, g + 8 and g + 16i share the swizzle term (r / 2) % 4.
      const int g = lane / 4, q = lane % 4;
      // (16-bit x: its 8 elements are chunk q of the row; E4M3 x: bytes 8q … 8q + 7.)
      const int x_offset = sizeof(X) == 2 ? Ops::a_offset(warp_m + g, q) : Ops::a_offset(warp_m + g, 0) + 8 * q;
      const uint32_t x_lane = smem_base + uint32_t(x_offset);
      const uint32_t w_lane = smem_base + uint32_t(Tl::BM * Ops::kARowBytes + (warp_n + g) * Ops::kBRowBytes + 8 * q);

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

        const uint32_t stage_bytes = uint32_t(read_stage * Ops::template kStageBytes<Tl>);
        if constexpr (Ops::kLdmatrix) {
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
              for (int j = 0; j < Tl::kFragsN; ++j) mma_16816<X>(acc[i][j], a[i], bfrag[j]);
          }
        } else {
          constexpr uint32_t kXPiece = 16 * Ops::kARowBytes, kWPiece = 8 * Ops::kBRowBytes;
          constexpr int kWWords = Ops::kWidenW ? 4 : 2, kXWords = Ops::kWidenW ? 8 : 4;
          // Lane's operands: of n8 piece j of w, widened pairs (0, 1) … (6, 7), or E4M3 bytes 0–3
          // and 4–7; of m16 piece i of x, rows g and g + 8 in the mma's order (first mma's a0–a3,
          // then the second's for 16-bit x).
          auto load_w = [&](int j, uint32_t (&wv)[kWWords]) {
            const uint2 v = load_shared8(w_lane + stage_bytes + j * kWPiece);
            if constexpr (Ops::kWidenW) {
              widen8x4<X, W>(v.x, wv[0], wv[1]);
              widen8x4<X, W>(v.y, wv[2], wv[3]);
            } else {
              wv[0] = v.x;
              wv[1] = v.y;
            }
          };
          auto load_x = [&](int i, uint32_t (&xv)[kXWords]) {
            const uint32_t row_g = x_lane + stage_bytes + i * kXPiece, row_g8 = row_g + kXPiece / 2;
            if constexpr (Ops::kWidenW) {
              const uint4 lo = load_shared16(row_g), hi = load_shared16(row_g8);
              const uint32_t v[8] = {lo.x, hi.x, lo.y, hi.y, lo.z, hi.z, lo.w, hi.w};
#pragma unroll
              for (int e = 0; e < 8; ++e) xv[e] = v[e];
            } else {
              const uint2 lo = load_shared8(row_g), hi = load_shared8(row_g8);
              xv[0] = lo.x, xv[1] = hi.x, xv[2] = lo.y, xv[3] = hi.y;
            }
          };
          auto multiply = [&](float (&d)[4], const uint32_t (&xv)[kXWords], const uint32_t (&wv)[kWWords]) {
            if constexpr (Ops::kWidenW) {
              const uint32_t first[4] = {xv[0], xv[1], xv[2], xv[3]}, second[4] = {xv[4], xv[5], xv[6], xv[7]};
              mma_16816<X>(d, first, wv[0], wv[1]);
              mma_16816<X>(d, second, wv[2], wv[3]);
            } else {
#if defined(DING_GPU_E4M3_MMA)
              mma_16832_e4m3(d, xv, wv[0], wv[1]);
#else
              __trap();  // the host launches E4M3 × E4M3 only where it was compiled for sm_89+
#endif
            }
          };
          // The side with fewer registers per warp tile is loaded whole, the other a piece at a
          // time (128 registers per thread: the 64 × 32 warp tile keeps w, the 32 × 64 one x).
          if constexpr (Tl::kFragsN * kWWords <= Tl::kFragsM * kXWords) {
            uint32_t wv[Tl::kFragsN][kWWords];
#pragma unroll
            for (int j = 0; j < Tl::kFragsN; ++j) load_w(j, wv[j]);
#pragma unroll
            for (int i = 0; i < Tl::kFragsM; ++i) {
              uint32_t xv[kXWords];
              load_x(i, xv);
#pragma unroll
              for (int j = 0; j < Tl::kFragsN; ++j) multiply(acc[i][j], xv, wv[j]);
            }
          } else {
            uint32_t xv[Tl::kFragsM][kXWords];
#pragma unroll
            for (int i = 0; i < Tl::kFragsM; ++i) load_x(i, xv[i]);
#pragma unroll
            for (int j = 0; j < Tl::kFragsN; ++j) {
              uint32_t wv[kWWords];
              load_w(j, wv);
#pragma unroll
              for (int i = 0; i < Tl::kFragsM; ++i) multiply(acc[i][j], xv[i], wv);
            }
          }
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
      static_assert(Tl::WarpsM * Tl::WarpsN * 16 * Tl::kPieceLd * 4 <= Ops::template kSmemBytes<Tl>,
                    "epilogue pieces fit in the stages");
      // The pieces one after another, unrolled by the template (acc indexed by constants only:
      // where the compiler kept `#pragma unroll` rolled here, acc went to local memory), so each
      // piece's accumulators are dead once it is stored.
      float* const piece = reinterpret_cast<float*>(smem_chunks) + warp * 16 * Tl::kPieceLd;
      unrolled<Tl::kFragsM>([&](auto piece_index) {
        constexpr int i = decltype(piece_index)::value;
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
      });
      __syncthreads();  // the staging is the next tile's first stage
    }
#endif  // DING_GPU_NVIDIA_MMA
}

}  // namespace mma

#if defined(DING_GPU_NVIDIA)
// Whether the tensor-core core can take a product of x and w (16-bit, or 8-bit w: `narrow`): 16-byte
// copies need every row of x and w to start on a 16-byte boundary, and K to be whole 16-byte
// chunks of each.
inline bool gemm_mma_fits(const Props& props, const GemmShape& p, bool narrow = false) {
  return props.has_mma_sync() && p.K > 0 && p.K % (narrow ? 16 : 8) == 0 && aligned_to(p.x, 16) && aligned_to(p.w, 16);
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
// 8-bit operands have the large and wide tiles only (matmul_cores.h: each instance is compile time
// in CI), the large one always in four stages (its stages are a half or a third smaller).
template <class X, class W>
inline MmaPlan mma_plan(const Props& props, const GemmShape& p, const MatmulTuning& tuning) {
  using namespace mma_model;
  using Ops = mma::Operands<X, W>;
  constexpr bool kEveryTile = Ops::kLdmatrix;
  const TileTraits tiles[] = {
      {MmaTile::large, 128, 128, 1.0, mma::TileLarge4::kMinBlocks,
       kEveryTile ? Ops::template kSmemBytes<mma::TileLarge3> : Ops::template kSmemBytes<mma::TileLarge4>},
      {MmaTile::tall, 128, 64, 0.85, mma::TileTall::kMinBlocks, Ops::template kSmemBytes<mma::TileTall>},
      {MmaTile::wide, 64, 128, 0.85, mma::TileWide::kMinBlocks, Ops::template kSmemBytes<mma::TileWide>},
      {MmaTile::small, 64, 64, 0.7, mma::TileSmall::kMinBlocks, Ops::template kSmemBytes<mma::TileSmall>},
  };
  const int64_t k_tiles = ceil_div(p.K, mma::kBK);
  MmaPlan best;
  double best_cost = -1;
  for (const TileTraits& t : tiles) {
    if (!kEveryTile && (t.tile == MmaTile::tall || t.tile == MmaTile::small)) continue;
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
template <class X, class W, class Tl>
void launch_gemm_mma_tile(GpuStream& s, const GemmShape& p, const Epilogue& ep, const SplitK& split,
                          const RowSegments& segments) {
  constexpr int kSmemBytes = mma::Operands<X, W>::template kSmemBytes<Tl>;
  const GemmShape product = product_shape(p, ep);
  const auto kernel = mma::gemm_mma_kernel<X, W, Tl>;
  if (kSmemBytes > 48 * 1024)
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), kSmemBytes));
  const int64_t row_blocks =
      segments.offsets ? max_row_tiles(segments.rows, segments.count, Tl::BM) : ceil_div(p.M, Tl::BM);
  const dim3 grid(unsigned(row_blocks), unsigned(std::min(ceil_div(product.N, Tl::BN), kMaxGridYZ)),
                  unsigned(std::min(p.batches * split.splits, kMaxGridYZ)));
  kernel<<<grid, Tl::kThreads, kSmemBytes, s.handle()>>>(p, ep, split, segments);
  DING_GPU_CHECK_LAUNCH("gemm_mma_kernel");
}

// The plan's tile (large: four stages where two blocks of them fit an SM, else three).
template <class X, class W>
void launch_gemm_mma_plan(GpuStream& s, const GemmShape& p, const Epilogue& ep, MmaTile tile, const SplitK& split,
                          const RowSegments& segments) {
  using namespace mma;
  if constexpr (!Operands<X, W>::kLdmatrix) {  // mma_plan's two tiles for 8-bit operands
    if (tile == MmaTile::wide)
      launch_gemm_mma_tile<X, W, TileWide>(s, p, ep, split, segments);
    else
      launch_gemm_mma_tile<X, W, TileLarge4>(s, p, ep, split, segments);
  } else {
    const Props& props = s.props();
    switch (tile) {
      case MmaTile::large:
        if (props.shared_per_sm >= 2 * size_t(TileLarge4::kSmemBytes + 1024) &&
            props.shared_per_block_optin >= size_t(TileLarge4::kSmemBytes))
          launch_gemm_mma_tile<X, W, TileLarge4>(s, p, ep, split, segments);
        else
          launch_gemm_mma_tile<X, W, TileLarge3>(s, p, ep, split, segments);
        break;
      case MmaTile::tall: launch_gemm_mma_tile<X, W, TileTall>(s, p, ep, split, segments); break;
      case MmaTile::wide: launch_gemm_mma_tile<X, W, TileWide>(s, p, ep, split, segments); break;
      case MmaTile::small: launch_gemm_mma_tile<X, W, TileSmall>(s, p, ep, split, segments); break;
    }
  }
}

// out = epilogue(x · wᵀ) for x of type X and w of type W (mma::Operands): 16-bit x and w of one
// type, 16-bit x and 8-bit w with ep.w_scales, or E4M3 x and w with ep.x_scales and ep.w_scales.
template <class X, class W = X>
void launch_gemm_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace mma;
  const Props& props = s.props();
  const GemmShape product = product_shape(p, ep);
  const MmaPlan plan = mma_plan<X, W>(props, product, s.matmul_tuning());
  const SplitK split = make_split(s, product, ceil_div(p.K, kBK), plan.splits);
  launch_gemm_mma_plan<X, W>(s, p, ep, plan.tile, split, {});
  if (split.splits > 1) launch_gemm_split_reduce(s, p, split, ep);
}

// out[rows of segment e] = epilogue(x[those rows] · w[e]ᵀ) for the segments' rows (row_tiles.cuh):
// p.M = P, p.w_batch the elements between segments' w. Tiles of 128 rows where segments average
// that many, else of 64 (a segment's last tile is partly empty: the smaller, the less is wasted).
template <class X, class W = X>
void launch_gemm_mma_segments(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets, int E,
                              int P) {
  const MmaTile tile = P >= 128 * int64_t(E) ? MmaTile::large : MmaTile::wide;
  const SplitK unsplit = make_split(s, product_shape(p, ep), ceil_div(p.K, mma::kBK), 1);
  launch_gemm_mma_plan<X, W>(s, p, ep, tile, unsplit, RowSegments{offsets, E, P});
}
#endif  // DING_GPU_NVIDIA

DING_GPU_END
