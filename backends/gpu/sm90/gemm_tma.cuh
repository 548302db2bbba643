// The persistent, warp-specialised matmul core (declared in ../gemm_tma.h), compiled for sm_90a
// only: TMA loads into 128-byte-swizzled stages, an mbarrier pipeline, wgmma from shared memory.
//
// Roles. A block of three warpgroups (384 threads) stays on its SM for the whole product and
// walks a fixed list of tiles. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one of its threads issues every TMA load. Warpgroups 1 and 2 are the
// consumers (setmaxnreg.inc: the accumulators are 128 registers a thread): wgmma and the epilogue.
//
// Pipeline. K advances in 64-deep slices (a 128-byte row of 16-bit elements per tile row),
// numbered g = 0, 1, … over all the block's tiles in order; slice g lives in stage g % Stages of a
// ring. Each stage has two mbarriers: full (one arrival, the producer's arrive.expect_tx of the
// stage's bytes; the TMA loads complete the transaction) and empty (one arrival per consumer warp
// that reads the stage, made after that warp's wgmma_wait has retired the MMAs reading it). Use u
// = g / Stages of a stage is phase u of both barriers: the consumers wait full with parity u & 1,
// the producer waits empty with parity (u & 1) ^ 1 before the fill for use u (a new barrier
// counts the phase before phase 0 as complete, so the first Stages fills go straight through).
// TMA counts the whole box in the transaction bytes, zero-filled parts included, so every fill
// expects (BM + BN) · 128 bytes whatever the edges.
//
// Why no wait below can hang or pass early. Producer and consumers derive the same slice sequence
// from blockIdx, gridDim and the shape alone. The fill of slice g waits for the release of slice
// g - Stages. A consumer releases slice g after issuing slice g + 1's MMAs (wait_group 1) when g + 1
// is in the same tile, and right after wait_group 0 when g ends its tile, before its epilogue. In
// ping-pong a warpgroup starts a tile's MMAs only once the other has finished the MMAs of the tile
// before (the turn barriers). So every wait is for an event of a smaller slice (g - Stages, g + 1 -
// Stages for the fill of g + 1, the previous tile's last slice for a turn), and by induction on g
// every fill, release and turn happens. A parity test needs its barrier to be at most one phase
// away from the awaited one: a waiter for the fill of slice g has seen slice g - Stages consumed
// (its own slice, or the previous tile's, finished before its turn), and the fill of slice g +
// Stages needs its own release of g first; the producer's empty waits likewise. (Without the turns
// a warpgroup that skips the other's tile could wait on a stage two uses ahead of its fills, and
// the parity test would pass at once: that is what the turns are for.) setmaxnreg.inc waits for
// registers that the producer's dec returns to the block's pool; the host refuses to launch a
// build whose register count would leave the pool short (check_register_pool).
//
// Consumers, two ways (Tile::kCoop):
//  - ping-pong (128 × 128 and 64 × 128 tiles): the warpgroups take the block's tiles in turn, each
//    a whole WM × BN tile (WM = 128: two m64 halves). A warpgroup starts a tile's MMAs when the
//    other has finished the previous tile's (a turn mbarrier per warpgroup, one phase per tile), so
//    the tensor cores work on one tile at a time and each epilogue runs under the other's MMAs;
//    the producer has the next tile's first slices loaded by then.
//  - cooperative (128 × 256 tiles): both take every tile, rows 64c … 64c + 63 each. The epilogue
//    has no MMAs under it, but the producer loads the next tile's first Stages slices meanwhile.
//    This tile moves the least from L2 per MMA (48 KB per 2 M MACs, against 32 KB per 1 M for
//    128 × 128), which is what bounds large products.
//
// Shared layout: the one gemm_wgmma.cu's descriptors read (same descriptor fields). TMA's
// SWIZZLE_128B writes a box of 64 K-elements × R rows as 128-byte rows, 16-byte chunk c of row r
// at r · 128 + ((c ^ (r % 8)) · 16) for a box that starts on a 1024-byte boundary, which every box
// here does (stages are multiples of 1024 bytes from a 1024-aligned base, boxes start on multiples
// of 8 rows). A stage holds the A part (BM rows of x), then the B part (BN rows of w).
//
// Tile order. z = batch · splits + split varies slowest; within a z, groups of kGroupM m-tiles,
// m fastest within a group, then n. So the ~SM-count tiles in flight at once cover a few m panels
// of x and a run of n panels of w, and the blocks that share a panel read it while it is in L2.
// Block i takes tiles i, i + grid, i + 2 · grid, …
//
// Edges: the tensor maps are 3-D (K, rows, batch), so TMA zero-fills rows past M or N (instead
// of reading the next batch's) and K past its end; only the epilogue checks m < M, n < N
// (SplitK::store_piece).
//
// swiglu. The product's columns come in groups of 16, 8 outputs' gate sums then their up sums
// (../gemm.cuh); a TMA box is a run of consecutive rows, so the B part of a tile of product
// columns n0 … n0 + BN - 1 is two boxes of BN/2 rows: gate rows j0 … j0 + BN/2 - 1 (j0 = n0 / 2)
// from a map of w's first N rows, up rows j0 … from a map of its last N rows (each zero-filled
// past N). Accumulator column c < BN/2 is output j0 + c's gate sum, BN/2 + c its up sum; the
// epilogue stages them at product columns 16 · (c / 8) + c % 8 and 8 further, the layout that
// SplitK::store_piece and the split reduce pair up.
//
// Epilogue: each consumer warp stages its 16-row piece 32 columns at a time in a buffer of its own
// (outside the ring: a warpgroup's epilogue never waits for stages) and stores it with
// SplitK::store_piece (the fused epilogue, or split-K partials).
#pragma once
#include <cuda.h>  // CUtensorMap and the encode function's types; the function itself comes from
                   // the runtime's driver entry point, so nothing links libcuda
#include <cudaTypedefs.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <type_traits>

#include "../check.h"
#include "../cp_async.cuh"
#include "../gemm.cuh"
#include "../gemm_split.cuh"
#include "../gemm_tma.h"
#include "../stream.h"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_tma.cuh holds sm_90a code: compile it for sm_90a only (CMake target ding_gpu_sm90a)"
#endif

DING_GPU_BEGIN

namespace tma {

using namespace sm90;

constexpr int kBK = 64;  // one 128-byte swizzle row of 16-bit elements
constexpr int kRowBytes = kBK * 2;
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kConsumerWarps = 8;
// 40 · 128 + 232 · 256 = 64512 = 168 · 384: what the block holds at launch when ptxas gives the
// kernel 168 registers, the most __launch_bounds__(384, 1) allows.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kRingBytes = 192 * 1024;
// A consumer warp's staged piece: 16 rows × 32 columns, rows padded by 4 floats (float2 stores
// of a quad's 8 columns then fall in distinct bank pairs for half the rows).
constexpr int kPieceCols = 32, kPieceLd = kPieceCols + 4;
constexpr int kPieceBytes = 16 * kPieceLd * 4;
constexpr int64_t kGroupM = 16;  // m-tiles per group of the tile order

// WM rows per consumer warpgroup, BN columns of the product; cooperative: both warpgroups on one
// 2·WM × BN tile, else each on its own WM × BN tile.
template <int WM_, int BN_, bool Coop_>
struct Tile {
  static constexpr int WM = WM_, BN = BN_;
  static constexpr bool kCoop = Coop_;
  static constexpr int BM = kCoop ? 2 * WM : WM;  // rows of x per tile
  static constexpr int kHalves = WM / 64;         // m64 wgmma rows per warpgroup
  static constexpr int kAccs = BN / 2;            // f32 accumulators per thread of an m64nBN tile
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static constexpr int Stages = kRingBytes / kStageBytes;
  static constexpr int kReaders = kCoop ? 2 * 4 : 4;  // consumer warps that release each stage
  static constexpr int kPiecesOffset = Stages * kStageBytes;
  static constexpr int kBarriersOffset = kPiecesOffset + kConsumerWarps * kPieceBytes;
  // + 1024: the dynamic shared memory base is rounded up to the 1024-byte swizzle atom.
  // full and empty per stage, then a turn barrier per consumer warpgroup (ping-pong).
  static constexpr int kSmemBytes = kBarriersOffset + (2 * Stages + 2) * 8 + 1024;
  static_assert(WM == 64 || WM == 128, "m64 wgmma rows");
  static_assert(!kCoop || WM == 64, "a cooperative tile is two warpgroups of 64 rows");
  static_assert(BN == 128 || BN == 256, "wgmma n128 or n256");
  static_assert(kHalves * kAccs <= 128, "accumulators within the consumers' registers");
  static_assert(BM <= 256 && BN <= 256, "a TMA box has at most 256 rows");
  static_assert(Stages >= 3, "the pipeline needs 2 (see the top), performance a few more");
  static_assert(kStageBytes % 1024 == 0 && (BN / 2) % 8 == 0, "boxes on 1024-byte boundaries");
};
using Tile128x256 = Tile<64, 256, true>;   // 4 stages of 48 KB
using Tile128x128 = Tile<128, 128, false>; // 6 stages of 32 KB
using Tile64x128 = Tile<64, 128, false>;   // 8 stages of 24 KB

// The tile list: tile t's m-tile, n-tile and z (see the top for the order).
struct TileOrder {
  int64_t m_tiles = 0, n_tiles = 0, zs = 0;
  __host__ __device__ int64_t count() const { return m_tiles * n_tiles * zs; }
  __device__ void at(int64_t t, int64_t& mt, int64_t& nt, int64_t& z) const {
    const int64_t per_z = m_tiles * n_tiles;
    z = t / per_z;
    const int64_t r = t - z * per_z;
    const int64_t group = r / (kGroupM * n_tiles), first_m = group * kGroupM;
    const int64_t rows = m_tiles - first_m < kGroupM ? m_tiles - first_m : kGroupM;
    const int64_t in_group = r - first_m * n_tiles;
    mt = first_m + in_group % rows;
    nt = in_group / rows;
  }
};

#if defined(__CUDA_ARCH__)
// (mbarriers, fence_mbarrier_init and mbar_expect_tx: cp_async.cuh)

// ---- TMA ------------------------------------------------------------------------------------------
__device__ inline void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// The box at (k, row, batch) of `map` into shared memory at dst, completing on `bar`. A CTA's own
// shared::cta address is a valid shared::cluster address.
__device__ inline void tma_load(uint32_t dst, const CUtensorMap* map, int k, int row, int batch, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(row), "r"(batch), "r"(bar)
      : "memory");
}

template <int Regs>
__device__ inline void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ inline void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}


// Columns q · 32 … q · 32 + 31 of the product, of a warp's 16 rows of an m64nBN accumulator, into
// its piece. Accumulator i of a thread: row lane / 4 + 8 · ((i / 2) % 2), column 8 · (i / 4) + 2 ·
// (lane % 4) + i % 2; i and i + 1 are neighbours, one float2.
template <int BN, int Q>
__device__ __forceinline__ void stage_piece(float* piece, const float (&acc)[BN / 2], bool swiglu, int lane) {
  const int row = lane / 4, col = 2 * (lane % 4);
  if (swiglu) {
    // Gate column c = 8 · (i / 4) + col (i < BN / 4) goes to product column 16 · (i / 4) + col;
    // its up sum, accumulator i + BN / 4 (column BN / 2 + c), 8 further.
#pragma unroll
    for (int i = 8 * Q; i < 8 * Q + 8; i += 2) {
      float* const at = piece + (row + 8 * ((i / 2) % 2)) * kPieceLd + 16 * (i / 4) - 32 * Q + col;
      *reinterpret_cast<float2*>(at) = make_float2(acc[i], acc[i + 1]);
      *reinterpret_cast<float2*>(at + 8) = make_float2(acc[i + BN / 4], acc[i + 1 + BN / 4]);
    }
  } else {
#pragma unroll
    for (int i = 16 * Q; i < 16 * Q + 16; i += 2) {
      float* const at = piece + (row + 8 * ((i / 2) % 2)) * kPieceLd + 8 * (i / 4) - 32 * Q + col;
      *reinterpret_cast<float2*>(at) = make_float2(acc[i], acc[i + 1]);
    }
  }
}

// A warp's 16 × BN rows of the tile through its piece, 32 columns at a time: m0, n0 its first row
// and product column. Forced inline: acc must stay in registers (a call would take its address).
template <int BN, int Q = 0>
__device__ __forceinline__ void store_rows(const Epilogue& ep, const GemmShape& p, const SplitK& split, int64_t s,
                                  int64_t b, float* piece, const float (&acc)[BN / 2], int64_t m0, int64_t n0,
                                  int lane) {
  if constexpr (Q < BN / kPieceCols) {
    stage_piece<BN, Q>(piece, acc, ep.swiglu, lane);
    __syncwarp();
    split.store_piece(ep, p, s, b, piece, kPieceLd, 16, kPieceCols, m0, n0 + Q * kPieceCols, lane);
    __syncwarp();  // every lane has read the piece before the next columns overwrite it
    store_rows<BN, Q + 1>(ep, p, split, s, b, piece, acc, m0, n0, lane);
  }
}
#endif  // __CUDA_ARCH__

template <class T, class Tl>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_tma_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap w_map,
                    const __grid_constant__ CUtensorMap w_up_map, const GemmShape p, const Epilogue ep,
                    const SplitK split, const TileOrder order) {
#if defined(__CUDA_ARCH__)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t ring = (raw + 1023u) & ~1023u;
  float* const pieces = reinterpret_cast<float*>(smem_raw + (ring - raw) + Tl::kPiecesOffset);
  const uint32_t full = ring + Tl::kBarriersOffset;  // stage s: full + 8s, empty + 8s
  const uint32_t empty = full + 8 * Tl::Stages;
  const uint32_t turn = empty + 8 * Tl::Stages;  // warpgroup c's finished mainloops: turn + 8c
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, group = warp / 4;
  const int64_t k_tiles_all = (p.K + kBK - 1) / kBK, tiles = order.count();

  if (tid == 0) {
    for (int s = 0; s < Tl::Stages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, Tl::kReaders);
    }
    mbar_init(turn, 4);
    mbar_init(turn + 8, 4);
    fence_mbarrier_init();
  }
  __syncthreads();  // the last block-wide barrier: the producer's idle warps leave after it

  if (group == 0) {
    release_registers<kProducerRegs>();
    if (warp != 0 || lane != 0) return;
    prefetch_tensor_map(&x_map);
    prefetch_tensor_map(&w_map);
    if (ep.swiglu) prefetch_tensor_map(&w_up_map);
    int stage = 0;
    uint32_t phase = 0;  // of the stage's current use
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      int64_t mt, nt, z;
      order.at(t, mt, nt, z);
      const int64_t b = z / split.splits, s = z % split.splits;
      const int64_t k_first = split.first_tile(s), k_tiles = split.tile_count(s, k_tiles_all);
      const int x_batch = int(b), w_batch = p.w_batch ? int(b) : 0;  // a shared w's map has one batch
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(empty + 8 * stage, phase ^ 1);  // the consumers have released its previous use
        const uint32_t bar = full + 8 * stage;
        mbar_expect_tx(bar, Tl::kStageBytes);
        const uint32_t a_dst = ring + uint32_t(stage * Tl::kStageBytes), b_dst = a_dst + Tl::BM * kRowBytes;
        const int k = int((k_first + kt) * kBK);
        tma_load(a_dst, &x_map, k, int(mt * Tl::BM), x_batch, bar);
        if (ep.swiglu) {
          const int j0 = int(nt * (Tl::BN / 2));
          tma_load(b_dst, &w_map, k, j0, w_batch, bar);
          tma_load(b_dst + (Tl::BN / 2) * kRowBytes, &w_up_map, k, j0, w_batch, bar);
        } else {
          tma_load(b_dst, &w_map, k, int(nt * Tl::BN), w_batch, bar);
        }
        if (++stage == Tl::Stages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  claim_registers<kConsumerRegs>();
  const int consumer = group - 1, warp_in_group = warp % 4;
  float* const piece = pieces + (warp - 4) * 16 * kPieceLd;
  int stage = 0;
  uint32_t phase = 0;
  int64_t local = 0;  // the tile's place in this block's list
  uint32_t own = 0;   // tiles of this warpgroup's done so far
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
    int64_t mt, nt, z;
    order.at(t, mt, nt, z);
    const int64_t b = z / split.splits, s = z % split.splits;
    const int64_t k_tiles = split.tile_count(s, k_tiles_all);
    if (!Tl::kCoop && local % 2 != consumer) {  // the other warpgroup's tile: skip its slices
      const int64_t to = stage + k_tiles;
      stage = int(to % Tl::Stages);
      phase ^= uint32_t((to / Tl::Stages) & 1);
      continue;
    }

    float acc[Tl::kHalves][Tl::kAccs];
#pragma unroll
    for (int h = 0; h < Tl::kHalves; ++h)
#pragma unroll
      for (int i = 0; i < Tl::kAccs; ++i) {
        acc[h][i] = 0.0f;
        fence_operand(acc[h][i]);
      }
    if (!Tl::kCoop && local > 0) {
      // The other warpgroup's previous tile (local - 1) is its tile number own - consumer (it
      // started first when consumer = 1): wait for that phase of its turn barrier.
      const uint32_t other_tile = own + uint32_t(consumer) - 1u;
      mbar_wait(turn + 8 * (1 - consumer), other_tile & 1);
    }
    const uint32_t a_rows = Tl::kCoop ? uint32_t(consumer * 64 * kRowBytes) : 0u;
    int previous = 0;  // the stage of the slice before
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      mbar_wait(full + 8 * stage, phase);
      const uint32_t a_base = ring + uint32_t(stage * Tl::kStageBytes) + a_rows;
      const uint32_t b_base = ring + uint32_t(stage * Tl::kStageBytes) + Tl::BM * kRowBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)
#pragma unroll
        for (int h = 0; h < Tl::kHalves; ++h)
          wgmma_k16<T, Tl::BN>(acc[h], smem_descriptor(a_base + h * 64 * kRowBytes + kk * 32),
                               smem_descriptor(b_base + kk * 32));
      wgmma_commit();
      wgmma_wait<1>();  // the slice before's MMAs have retired: its stage may be refilled
      if (kt > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + 8 * previous);
      }
      previous = stage;
      if (++stage == Tl::Stages) stage = 0, phase ^= 1;
    }
    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < Tl::kHalves; ++h)
#pragma unroll
      for (int i = 0; i < Tl::kAccs; ++i) fence_operand(acc[h][i]);
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(empty + 8 * previous);  // before the epilogue: see the top
      if (!Tl::kCoop) mbar_arrive(turn + 8 * consumer);  // the other warpgroup's MMAs may start
    }
    ++own;

    // The halves written out one by one, not by a loop: nvcc left a loop around this much inlined
    // code rolled, which put acc in local memory (and serialised the wgmma).
    const int64_t n0 = nt * Tl::BN, m0 = mt * Tl::BM + (Tl::kCoop ? consumer * 64 : 0) + warp_in_group * 16;
    store_rows<Tl::BN>(ep, p, split, s, b, piece, acc[0], m0, n0, lane);
    if constexpr (Tl::kHalves == 2) store_rows<Tl::BN>(ep, p, split, s, b, piece, acc[1], m0 + 64, n0, lane);
  }
#endif  // __CUDA_ARCH__
}

// ---- host side: tensor maps, the register pool, a tile's launch ---------------------------------

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    DING_GPU_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw Error(ErrorCode::device_failure, "gpu: the driver has no cuTensorMapEncodeTiled (gemm_tma needs a CUDA 12+ driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A map of `rows` × K elements of type T at base (rows K apart) in `batches` batches batch_stride
// elements apart (0: one batch), read as boxes of 64 × box_rows into 128-byte-swizzled rows;
// whatever lies outside reads as zeros.
template <class T>
CUtensorMap make_tensor_map(const void* base, int64_t rows, int64_t K, int64_t batches, int64_t batch_stride,
                            int box_rows) {
  const CUtensorMapDataType dtype =
      std::is_same_v<T, ding::bf16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[3] = {cuuint64_t(K), cuuint64_t(rows), cuuint64_t(batch_stride ? batches : 1)};
  const cuuint64_t strides[2] = {cuuint64_t(K) * 2, cuuint64_t(batch_stride ? batch_stride : rows * K) * 2};
  const cuuint32_t box[3] = {cuuint32_t(kBK), cuuint32_t(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = encode_tiled()(&map, dtype, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorCode::device_failure,
                "gpu: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ") for " +
                    std::to_string(batches) + " × " + std::to_string(rows) + " × " + std::to_string(K) +
                    " elements, boxes of " + std::to_string(box_rows) + " rows (gemm_tma.cuh)");
  return map;
}

// setmaxnreg.inc blocks until the block's pool has the registers: the consumers' claim must fit
// what the block got at launch (its compiled count × 384) less what the producer keeps, or the
// kernel would hang. ptxas gives a kernel with setmaxnreg the __launch_bounds__ maximum (168);
// a toolchain that gave fewer is refused here instead.
template <class Kernel>
void check_register_pool(Kernel kernel, const char* name) {
  cudaFuncAttributes attributes{};
  DING_GPU_CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)));
  const int need = kProducerRegs * 128 + kConsumerRegs * 256;
  if (attributes.numRegs * kThreads < need)
    throw Error(ErrorCode::internal, std::string("gpu: ") + name + " compiled to " +
                                         std::to_string(attributes.numRegs) + " registers a thread; its warpgroups' " +
                                         "setmaxnreg needs " + std::to_string(need / kThreads) + " (gemm_tma.cuh)");
}


// One tile's kernel over the product p (x, w of type T), K split as `split` says (the split
// reduce, if any, is the caller's).
template <class T, class Tl>
void launch_gemm_tma_tile(GpuStream& s, const GemmShape& p, const Epilogue& ep, const SplitK& split) {
  const Props& props = s.props();
  const GemmShape product = product_shape(p, ep);
  const auto kernel = gemm_tma_kernel<T, Tl>;
  static const bool pool_checked = (check_register_pool(kernel, "gemm_tma_kernel"), true);
  (void)pool_checked;
  // x: [batches][M][K]; w: [batches or 1][N or 2N][K]; for swiglu the gate and up halves are
  // two maps of N rows each, so that each is zero-filled past its own N.
  const int64_t w_rows = ep.swiglu ? p.N : product.N;
  const int box_w = ep.swiglu ? Tl::BN / 2 : Tl::BN;
  const CUtensorMap x_map = make_tensor_map<T>(p.x, p.M, p.K, p.batches, p.batches > 1 ? p.x_batch : 0, Tl::BM);
  const CUtensorMap w_map = make_tensor_map<T>(p.w, w_rows, p.K, p.batches, p.w_batch, box_w);
  const CUtensorMap w_up_map =
      ep.swiglu ? make_tensor_map<T>(static_cast<const T*>(p.w) + p.N * p.K, p.N, p.K, p.batches, p.w_batch, box_w)
                : w_map;
  TileOrder order;
  order.m_tiles = ceil_div(p.M, Tl::BM);
  order.n_tiles = ceil_div(product.N, Tl::BN);
  order.zs = p.batches * split.splits;
  const int64_t grid = std::min<int64_t>(order.count(), std::max(props.sm_count, 1));
  DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), Tl::kSmemBytes));
  kernel<<<unsigned(grid), kThreads, Tl::kSmemBytes, s.handle()>>>(x_map, w_map, w_up_map, p, ep, split, order);
  DING_GPU_CHECK_LAUNCH("gemm_tma_kernel");
}

// Each tile's kernel for each dtype is compiled in a unit of its own, gemm_tma_<tile>_<dtype>.cu
// (one such kernel takes over a minute to compile on a 2-core machine); includers compile none.
#define DING_TMA_TILE(T, Tl) \
  extern template void launch_gemm_tma_tile<T, Tl>(GpuStream&, const GemmShape&, const Epilogue&, const SplitK&);
DING_TMA_TILE(ding::bf16, Tile128x256)
DING_TMA_TILE(ding::bf16, Tile128x128)
DING_TMA_TILE(ding::bf16, Tile64x128)
DING_TMA_TILE(ding::f16, Tile128x256)
DING_TMA_TILE(ding::f16, Tile128x128)
DING_TMA_TILE(ding::f16, Tile64x128)
#undef DING_TMA_TILE

}  // namespace tma

DING_GPU_END
