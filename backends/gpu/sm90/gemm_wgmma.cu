// The wgmma matmul core (declared in ../gemm_wgmma.h), compiled for sm_90a only.
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
#include <algorithm>
#include <type_traits>

#include "../check.h"
#include "../cp_async.cuh"
#include "../gemm.cuh"
#include "../gemm_split.cuh"
#include "../gemm_wgmma.h"
#include "../stream.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_wgmma.cu holds sm_90a code: compile it for sm_90a only (CMake target ding_gpu_sm90a)"
#endif

namespace ding::gpu {

namespace wgmma {

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

#if defined(__CUDA_ARCH__)
// Makes this thread's generic-proxy writes to shared memory (the landed cp.async copies) visible
// to the async proxy that wgmma reads through.
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the accumulators in place around the asynchronous MMAs: the compiler may not move reads
// or writes of v across this point (so the epilogue reads them after wgmma_wait<0>).
__device__ inline void fence_operand(float& v) { asm volatile("" : "+f"(v)::"memory"); }

// Shared-memory matrix descriptor: start address / 16 (bits 0-13), leading byte offset / 16
// (bits 16-29; unused by K-major swizzled operands, 1 by convention), stride byte offset / 16
// (bits 32-45: 1024, eight 128-byte rows), swizzle mode (bits 62-63: 1 = 128-byte).
__device__ inline uint64_t smem_descriptor(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// One wgmma k16 step, d (f32) += a · b, for a and b shared-memory descriptors: the instruction text
// and the accumulator operands of each shape written once, the operand type the only difference
// between the bf16 and f16 forms.
#define DING_WGMMA(SHAPE, AB, REGS, DESCRIPTORS, SCALE_D, ACCUMULATORS)                           \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D ", 0;\n"                                \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." AB "." AB " {" REGS "}, " DESCRIPTORS \
               ", p, 1, 1, 0, 0;\n}\n"                                                           \
               : ACCUMULATORS                                                                     \
               : "l"(a), "l"(b), "r"(1))

#define DING_WGMMA_N128_REGS \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DING_WGMMA_N128_ACC \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define DING_WGMMA_N256_REGS \
    DING_WGMMA_N128_REGS ", " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define DING_WGMMA_N256_ACC \
    DING_WGMMA_N128_ACC, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

template <class T>
__device__ inline void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, ding::bf16>)
    DING_WGMMA("m64n128k16", "bf16", DING_WGMMA_N128_REGS, "%64, %65", "%66", DING_WGMMA_N128_ACC);
  else
    DING_WGMMA("m64n128k16", "f16", DING_WGMMA_N128_REGS, "%64, %65", "%66", DING_WGMMA_N128_ACC);
}

template <class T>
__device__ inline void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, ding::bf16>)
    DING_WGMMA("m64n256k16", "bf16", DING_WGMMA_N256_REGS, "%128, %129", "%130", DING_WGMMA_N256_ACC);
  else
    DING_WGMMA("m64n256k16", "f16", DING_WGMMA_N256_REGS, "%128, %129", "%130", DING_WGMMA_N256_ACC);
}

#undef DING_WGMMA
#undef DING_WGMMA_N128_REGS
#undef DING_WGMMA_N128_ACC
#undef DING_WGMMA_N256_REGS
#undef DING_WGMMA_N256_ACC

template <class T, int BN>
__device__ inline void wgmma_k16(float (&d)[BN / 2], uint64_t a, uint64_t b) {
  if constexpr (BN == 128)
    wgmma_m64n128k16<T>(d, a, b);
  else
    wgmma_m64n256k16<T>(d, a, b);
}
#endif  // __CUDA_ARCH__

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

// Tiles of 128 × BN over the product, in waves of one block per SM.
inline int64_t waves(const Props& props, const GemmShape& p, int bn) {
  return ceil_div(ceil_div(p.M, kBM) * ceil_div(p.N, bn) * p.batches, std::max(props.sm_count, 1));
}

// Products with fewer 128 × 128 tiles than half the SMs split K so that the blocks come near one
// per SM, each split at least kMinSlicesPerSplit deep, the partials within kMaxPartialBytes.
constexpr int kMaxSplits = 8;
constexpr int64_t kMinSlicesPerSplit = 4;

inline int wanted_splits(const Props& props, const GemmShape& p) {
  const int64_t tiles = ceil_div(p.M, kBM) * ceil_div(p.N, 128) * p.batches;
  if (2 * tiles >= props.sm_count) return 1;
  int64_t splits = std::min<int64_t>({kMaxSplits, props.sm_count / tiles, ceil_div(p.K, kBK) / kMinSlicesPerSplit});
  while (splits > 1 && size_t(splits * p.batches * p.M * p.N) * sizeof(float) > kMaxPartialBytes) --splits;
  return int(std::max<int64_t>(splits, 1));
}

}  // namespace wgmma

// p: the product's shape (product_shape), as the tile counts need it.
bool gemm_wgmma_takes(const Props& props, const GemmShape& p) {
  using namespace wgmma;
  const bool fits = props.cc_major == 9 && props.cc_minor == 0 && p.K > 0 && p.K % 8 == 0 && aligned_to(p.x, 16) &&
                    aligned_to(p.w, 16) && props.shared_per_block_optin >= size_t(Tile256::kSmemBytes);
  if (!fits) return false;
  const int64_t tiles = ceil_div(p.M, kBM) * ceil_div(p.N, 128) * p.batches;
  return 2 * tiles >= props.sm_count || wanted_splits(props, p) > 1;
}

template <class T>
void launch_gemm_wgmma(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace wgmma;
  const Props& props = s.props();
  const MatmulTuning& tuning = s.matmul_tuning();
  const GemmShape product = product_shape(p, ep);
  const SplitK split =
      make_split(s, product, ceil_div(p.K, kBK), tuning.splits ? tuning.splits : wanted_splits(props, product));
  auto launch = [&](auto tile) {
    using Tl = decltype(tile);
    const auto kernel = gemm_wgmma_kernel<T, Tl>;
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), Tl::kSmemBytes));
    const dim3 grid(unsigned(ceil_div(p.M, kBM)), unsigned(std::min(ceil_div(product.N, Tl::BN), kMaxGridYZ)),
                    unsigned(std::min(p.batches * split.splits, kMaxGridYZ)));
    kernel<<<grid, kThreads, Tl::kSmemBytes, s.handle()>>>(p, ep, split);
    DING_GPU_CHECK_LAUNCH("gemm_wgmma_kernel");
  };
  // Wave quantisation: a 128 × 256 block takes about twice as long as a 128 × 128 one and loads
  // less per MMA (kWideGain); take the wide tile when its waves cost less. Split products keep
  // 128 × 128 (their point is more blocks).
  constexpr double kWideGain = 1.1;
  const double cost128 = double(waves(props, product, 128));
  const double cost256 = 2.0 * double(waves(props, product, 256)) / kWideGain;
  const int forced = tuning.tile_m == kBM ? tuning.tile_n : 0;
  if (forced == 256 || (forced != 128 && split.splits == 1 && cost256 < cost128))
    launch(Tile256{});
  else
    launch(Tile128{});
  if (split.splits > 1) launch_gemm_split_reduce(s, p, split, ep);
}

template void launch_gemm_wgmma<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_wgmma<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&);

}  // namespace ding::gpu
