// The wgmma matmul core's kernel (declared in ../gemm_wgmma.h), compiled for sm_90a only.
//
// A block of two warpgroups (256 threads) computes a 128 × BN tile of out, warpgroup g rows
// 64g … 64g + 63, with m64nBNk16 wgmma instructions that read both operands from shared memory.
// K advances in 64-deep slices (one 128-byte row of 16-bit elements per tile row) through a ring
// of Stages shared-memory stages filled by 16-byte cp.async copies from every thread.
//
// Shared layout, the one wgmma's 128-byte-swizzle descriptors expect (the same that TMA's
// SWIZZLE_128B writes): a stage's A part (128 rows of x) and B part (BN rows of w [N, K], which
// is K-major, wgmma's "col" operand, no transpose) are arrays of 128-byte rows, each part
// 1024-byte aligned; 16-byte chunk c of row r lives at r · 128 + ((c ^ (r % 8)) · 16). A
// descriptor names the start address, 1024 bytes between 8-row groups (stride byte offset) and
// the swizzle mode; the k16 step kk starts 32 · kk bytes into the rows (the hardware applies the
// XOR to the address it forms, so a start inside the swizzle atom is how k advances).
//
// Pipeline: slice kt waits in stage kt % Stages; Stages - 2 slices are in flight behind
// it and one wgmma group stays in flight after it (wait_group 1), so the stage refilled at step kt
// is that of slice kt - 2, whose wgmma group every warpgroup has retired before the step's
// barrier. cp.async writes through the generic proxy and wgmma reads through the async proxy:
// each thread's fence.proxy.async between its landed copies and the barrier orders the two.
//
// Edges as in the mma.sync core: rows beyond M or N and chunks beyond K are zero-filled (source
// size 0), the epilogue checks m < M, n < N; the host sends only K % 8 == 0 with 16-byte-aligned
// x and w.
//
// swiglu as in the mma.sync core: the tile is BN columns of the product whose groups of 16 are 8
// outputs' gate sums and then their up sums (../gemm.cuh), so each warp's 16 × BN piece holds both
// sums of its outputs for the epilogue to combine (SplitK::store_piece, or the split reduce). The
// host plans tiles and splits over the product's columns (product_shape).
#pragma once
#include <algorithm>
#include <type_traits>

#include "../check.h"
#include "../cp_async.cuh"
#include "../gemm.cuh"
#include "../gemm_split.cuh"
#include "../gemm_wgmma.h"
#include "../stream.h"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_wgmma.cuh holds sm_90a code: compile it for sm_90a only (CMake target ding_gpu_sm90a)"
#endif

DING_GPU_BEGIN

namespace wgmma {

using namespace sm90;

constexpr int kBM = 128;  // two warpgroups of 64 rows
constexpr int kBK = 64;   // one 128-byte swizzle row of 16-bit elements
constexpr int kThreads = 256;
constexpr int kRowBytes = kBK * 2;

template <int BN_, int Stages_>
struct Tile {
  static constexpr int BN = BN_, Stages = Stages_;
  static constexpr int kAccs = BN / 2;  // f32 accumulators per thread of an m64nBN warpgroup tile
  static constexpr int kStageBytes = (kBM + BN) * kRowBytes;
  // The epilogue stages one 16 × BN f32 piece per warp in the (then idle) stages; rows padded by
  // 4 floats against bank conflicts.
  static constexpr int kPieceLd = BN + 4;
  static constexpr int kEpilogueBytes = (kThreads / 32) * 16 * kPieceLd * 4;
  // + 1024: the dynamic shared memory base is rounded up to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = std::max(Stages * kStageBytes, kEpilogueBytes) + 1024;
  static_assert(Stages >= 3, "two slices behind the math: one in flight, one being retired");
  static_assert(BN % 32 == 0 && (BN * 8) % kThreads == 0, "whole chunks per thread");
};
// 128 × 128: five 32 KB stages (161 KB); 128 × 256: four 48 KB stages (193 KB). H100: 227 KB per block.
using Tile128 = Tile<128, 5>;
using Tile256 = Tile<256, 4>;


template <class T, class Tl>
__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_kernel(const GemmShape p, const Epilogue ep, const SplitK split) {
#if defined(__CUDA_ARCH__)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_address(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - raw);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, group = warp / 4;
  const int64_t m0 = int64_t(blockIdx.x) * kBM;
  const int64_t k_tiles_all = (p.K + kBK - 1) / kBK;

  // Copies: thread t moves chunk t % 8 of rows t / 8 + 32 · i of x (i < 4) and of w (i < BN / 32)
  // every slice; rows 32 apart share the swizzle term r % 8, so their offsets differ by 32 rows.
  const int chunk = tid % 8, row0 = tid / 8;
  const uint32_t dst0 = uint32_t(row0 * kRowBytes + ((chunk ^ (row0 % 8)) * 16));
  constexpr int kCopiesA = kBM / 32, kCopiesB = Tl::BN / 32;

  // n0: the tile's first column of the product (for swiglu, of its 2N-wide form: ../gemm.cuh).
  for (int64_t n0 = int64_t(blockIdx.y) * Tl::BN; n0 < split.product_n; n0 += int64_t(gridDim.y) * Tl::BN)
    for (int64_t z = blockIdx.z; z < p.batches * split.splits; z += gridDim.z) {
      // Batch b, K slices [k_first, k_first + k_tiles) (gemm_split.cuh; every split non-empty).
      const int64_t b = z / split.splits, s = z % split.splits;
      const int64_t k_first = split.first_tile(s), k_tiles = split.tile_count(s, k_tiles_all);
      const T* const x = static_cast<const T*>(p.x) + b * p.x_batch;
      const T* const w = static_cast<const T*>(p.w) + b * p.w_batch;
      // The sources of this thread's copies at the split's first slice, formed once per tile: a
      // slice then costs one add per copy. Formed per slice from m, n and k, the 64-bit address
      // arithmetic took ~280 instructions per warp and slice (ncu, 256 × 4800 × 1600, 2 warps per
      // scheduler); formed once, the M = 2048 products ran 14–16 % faster (ding-bench ops, H100).
      const int64_t k0 = k_first * kBK + chunk * 8;  // this thread's element of K in slice 0
      const T* a_src[kCopiesA];
      const T* b_src[kCopiesB];
      bool a_ok[kCopiesA], b_ok[kCopiesB];
#pragma unroll
      for (int i = 0; i < kCopiesA; ++i) {
        const int64_t m = m0 + row0 + 32 * i;
        a_ok[i] = m < p.M;
        a_src[i] = x + (a_ok[i] ? m * p.K : 0) + k0;
      }
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i) {
        const int64_t w_row = product_w_row(n0 + row0 + 32 * i, p.N, ep.swiglu);
        b_ok[i] = w_row >= 0;
        b_src[i] = w + (b_ok[i] ? w_row * p.K : 0) + k0;
      }
      auto load_stage = [&](int stage, int64_t kt) {  // this block's slice kt
        const uint32_t a_dst = base + uint32_t(stage * Tl::kStageBytes) + dst0;
        const uint32_t b_dst = a_dst + kBM * kRowBytes;
        const int64_t dk = kt * kBK;
        const bool k_ok = k0 + dk < p.K;
#pragma unroll
        for (int i = 0; i < kCopiesA; ++i) {
          const bool ok = k_ok && a_ok[i];
          cp_async_16(a_dst + uint32_t(i * 32 * kRowBytes), ok ? a_src[i] + dk : x, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < kCopiesB; ++i) {
          const bool ok = k_ok && b_ok[i];
          cp_async_16(b_dst + uint32_t(i * 32 * kRowBytes), ok ? b_src[i] + dk : w, ok ? 16 : 0);
        }
      };

      float acc[Tl::kAccs];
#pragma unroll
      for (int i = 0; i < Tl::kAccs; ++i) {
        acc[i] = 0.0f;
        fence_operand(acc[i]);
      }
      // Prologue: slices 0 … Stages-3 in flight, one commit per slice (empty ones too) so that
      // group g holds slice g for the waits below.
#pragma unroll
      for (int st = 0; st < Tl::Stages - 2; ++st) {
        if (st < k_tiles) load_stage(st, st);
        cp_async_commit();
      }
      int read_stage = 0, write_stage = Tl::Stages - 2;  // slice kt's stage; slice kt + Stages-2's
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        // Committed: groups 0 … kt + Stages-3; leaving Stages-3 in flight means slice kt landed.
        cp_async_wait<Tl::Stages - 3>();
        fence_proxy_async();
        // Publishes every thread's copies of slice kt; and every warpgroup has passed its
        // wgmma_wait<1> of step kt-1, so slice kt-2's stage is free to refill.
        __syncthreads();
        if (kt + Tl::Stages - 2 < k_tiles) load_stage(write_stage, kt + Tl::Stages - 2);
        cp_async_commit();

        const uint32_t stage_base = base + uint32_t(read_stage * Tl::kStageBytes);
        const uint32_t a_base = stage_base + uint32_t(group * 64 * kRowBytes);
        const uint32_t b_base = stage_base + uint32_t(kBM * kRowBytes);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)
          wgmma_k16<T, Tl::BN>(acc, smem_descriptor(a_base + kk * 32), smem_descriptor(b_base + kk * 32));
        wgmma_commit();
        wgmma_wait<1>();
        read_stage = read_stage + 1 == Tl::Stages ? 0 : read_stage + 1;
        write_stage = write_stage + 1 == Tl::Stages ? 0 : write_stage + 1;
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < Tl::kAccs; ++i) fence_operand(acc[i]);
      cp_async_wait<0>();  // only empty groups remain; nothing may land after the stages are reused
      __syncthreads();     // every warpgroup is done with the stages: they become the epilogue's staging

      // Accumulator i of a thread: row 16 · (warp % 4) + lane / 4 + 8 · ((i / 2) % 2) of its
      // warpgroup's 64, column 8 · (i / 4) + 2 · (lane % 4) + i % 2 (m16n8 pieces side by side).
      // Each warp stages its 16 × BN piece, then stores it by rows (SplitK::store_piece).
      float* const piece = reinterpret_cast<float*>(smem) + warp * 16 * Tl::kPieceLd;
#pragma unroll
      for (int i = 0; i < Tl::kAccs; ++i)
        piece[(lane / 4 + 8 * ((i / 2) % 2)) * Tl::kPieceLd + 8 * (i / 4) + 2 * (lane % 4) + i % 2] = acc[i];
      __syncwarp();
      split.store_piece(ep, p, s, b, piece, Tl::kPieceLd, 16, Tl::BN, m0 + group * 64 + (warp % 4) * 16, n0, lane);
      __syncthreads();  // the staging is the next tile's first stages
    }
#endif  // __CUDA_ARCH__
}

// One tile's kernel over the product p (x, w of type T), K split as `split` says (the split
// reduce, if any, is the caller's).
template <class T, class Tl>
void launch_gemm_wgmma_tile(GpuStream& s, const GemmShape& p, const Epilogue& ep, const SplitK& split) {
  const GemmShape product = product_shape(p, ep);
  const auto kernel = gemm_wgmma_kernel<T, Tl>;
  DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), Tl::kSmemBytes));
  const dim3 grid(unsigned(ceil_div(p.M, kBM)), unsigned(std::min(ceil_div(product.N, Tl::BN), kMaxGridYZ)),
                  unsigned(std::min(p.batches * split.splits, kMaxGridYZ)));
  kernel<<<grid, kThreads, Tl::kSmemBytes, s.handle()>>>(p, ep, split);
  DING_GPU_CHECK_LAUNCH("gemm_wgmma_kernel");
}

// Each tile's kernel for each dtype is compiled in a unit of its own, gemm_wgmma_<tile>_<dtype>.cu;
// includers compile none.
#define DING_WGMMA_TILE(T, Tl) \
  extern template void launch_gemm_wgmma_tile<T, Tl>(GpuStream&, const GemmShape&, const Epilogue&, const SplitK&);
DING_WGMMA_TILE(ding::bf16, Tile128)
DING_WGMMA_TILE(ding::bf16, Tile256)
DING_WGMMA_TILE(ding::f16, Tile128)
DING_WGMMA_TILE(ding::f16, Tile256)
#undef DING_WGMMA_TILE

}  // namespace wgmma

DING_GPU_END
