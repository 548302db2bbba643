// The wgmma instructions both Hopper matmul cores issue (gemm_wgmma.cu, gemm_tma.cu): sm_90a only.
// Operands come from shared memory through descriptors of 128-byte-swizzled, K-major tiles whose
// rows are 64 16-bit elements (one swizzle row), the layout TMA's SWIZZLE_128B writes.
#pragma once
#include <cstdint>
#include <type_traits>

#include "ding/dtype.h"
#include "../vendor.h"

DING_GPU_BEGIN
namespace sm90 {

#if defined(__CUDA_ARCH__)
// Makes this thread's generic-proxy writes to shared memory (landed cp.async copies) visible to
// the async proxy that wgmma reads through.
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
// (bits 32-45: 1024, eight 128-byte rows), swizzle mode (bits 62-63: 1 = 128-byte). The k16 step
// kk of a 64-deep slice starts 32 · kk bytes into the rows: the hardware applies the XOR to the
// address it forms, so a start inside the swizzle atom is how k advances.
__device__ inline uint64_t smem_descriptor(uint32_t addr) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// One wgmma k16 step, d (f32) += a · b, for a and b shared-memory descriptors: the instruction text
// and the accumulator operands of each shape written once, the operand type the only difference
// between the bf16 and f16 forms. scale-d is a predicate set from a register holding 1.
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

// d += a · b over one k16 step of an m64nBNk16 tile, T = ding::bf16 or ding::f16, BN = 128 or 256.
template <class T, int BN>
__device__ inline void wgmma_k16(float (&d)[BN / 2], uint64_t a, uint64_t b) {
  static_assert(BN == 128 || BN == 256, "m64n128k16 and m64n256k16 only");
  constexpr bool bf16 = std::is_same_v<T, ding::bf16>;
  if constexpr (BN == 128 && bf16)
    DING_WGMMA("m64n128k16", "bf16", DING_WGMMA_N128_REGS, "%64, %65", "%66", DING_WGMMA_N128_ACC);
  else if constexpr (BN == 128)
    DING_WGMMA("m64n128k16", "f16", DING_WGMMA_N128_REGS, "%64, %65", "%66", DING_WGMMA_N128_ACC);
  else if constexpr (bf16)
    DING_WGMMA("m64n256k16", "bf16", DING_WGMMA_N256_REGS, "%128, %129", "%130", DING_WGMMA_N256_ACC);
  else
    DING_WGMMA("m64n256k16", "f16", DING_WGMMA_N256_REGS, "%128, %129", "%130", DING_WGMMA_N256_ACC);
}

#undef DING_WGMMA
#undef DING_WGMMA_N128_REGS
#undef DING_WGMMA_N128_ACC
#undef DING_WGMMA_N256_REGS
#undef DING_WGMMA_N256_ACC
#endif  // __CUDA_ARCH__

}  // namespace sm90
DING_GPU_END
