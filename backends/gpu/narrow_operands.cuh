// 8-bit operands of the tensor-core matmul cores (gemv_mma.cuh, gemm_mma.cuh), in registers:
//   - 8-bit weight values (i8, E4M3) widened to the 16-bit mma operand types, four bytes of a word
//     at a time, as f16x2 or bf16x2 words (the word's values 0, 1 and 2, 3; the lower in the low
//     half). Every i8 and E4M3 value is exact in f16 and in bf16 (i8: integers of magnitude ≤ 127;
//     E4M3: 4 significant bits, exponents 2^-9 … 2^8), so a product over the widened values is the
//     product of the stored ones;
//   - the 8-bit integer mma (sm_80+), for i8 w beside x rounded to int16 and split into bytes;
//   - the E4M3 × E4M3 mma (sm_89+), for a prefill whose x is rounded to E4M3 too.
// Device code only, inside DING_GPU_NVIDIA_MMA (vendor.h).
#pragma once
#include <cstdint>
#include <type_traits>

#include "elements.cuh"

#if defined(DING_GPU_NVIDIA_MMA)
DING_GPU_BEGIN

// Four i8 values as two f16x2 words, exact: each byte biased to q + 128 becomes the low mantissa
// byte of the half 1024 + q + 128, from which 1152 is taken.
__device__ inline void widen_i8x4(uint32_t word, uint32_t& lo, uint32_t& hi) {
  const uint32_t biased = word ^ 0x80808080u, exponent = 0x64646464u;
  const uint32_t a = __byte_perm(biased, exponent, 0x5140), b = __byte_perm(biased, exponent, 0x7362);
  asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(a), "r"(0x64806480u));
  asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(b), "r"(0x64806480u));
}

// Four E4M3 values as two f16x2 words, exact, each the value divided by kWidenedE4m3Unit:
//   sm_89+  the values themselves, by the conversion instruction (one per pair);
//   older   the values times 2^-8: a byte moved to its half's high byte keeps its sign there, and
//           its 7 magnitude bits one place right are an f16 exponent (E4M3's, biased 7 where
//           f16's is 15) and mantissa; E4M3's subnormals land on f16's.
#if __CUDA_ARCH__ >= 890
constexpr float kWidenedE4m3Unit = 1.0f;
__device__ inline void widen_e4m3x4(uint32_t word, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(word));
}
#else
constexpr float kWidenedE4m3Unit = 256.0f;
__device__ inline void widen_e4m3x4(uint32_t word, uint32_t& lo, uint32_t& hi) {
  const uint32_t a = __byte_perm(word, 0, 0x1404), b = __byte_perm(word, 0, 0x3424);
  lo = (a & 0x80008000u) | ((a >> 1) & 0x3F803F80u);
  hi = (b & 0x80008000u) | ((b >> 1) & 0x3F803F80u);
}
#endif

// Four 8-bit values W (int8_t or ding::f8e4m3) as two words of T (ding::f16 or ding::bf16) pairs
// holding the values themselves, exact:
//   f16  i8 as widen_i8x4; E4M3 as widen_e4m3x4, then times its unit where that is 2^8 (a power
//        of two: exact, f16 subnormals included).
//   bf16 i8: 128 + (q & 127) and 128 + 128·(q < 0) are bf16 words by bit placement (exponent 2^7,
//        the low 7 bits as mantissa; the sign bit lands on the exponent's lowest bit, making 256),
//        and their difference is q. E4M3: the magnitude's 7 bits four places right of a bf16's
//        sign are a bf16 exponent (biased 7 against 127) and mantissa, the value times 2^-120
//        (E4M3's subnormals land on bf16's); one multiplication by 2^120 restores it.
template <class T, class W>
__device__ inline void widen8x4(uint32_t word, uint32_t& lo, uint32_t& hi) {
  static_assert(sizeof(W) == 1 && sizeof(T) == 2, "8-bit values into 16-bit pairs");
  if constexpr (std::is_same_v<T, ding::f16>) {
    if constexpr (std::is_same_v<W, int8_t>) {
      widen_i8x4(word, lo, hi);
    } else {
      widen_e4m3x4(word, lo, hi);
      if constexpr (kWidenedE4m3Unit != 1.0f) {  // then 2^8, f16 0x5C00
        asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(lo) : "r"(0x5C005C00u));
        asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(hi) : "r"(0x5C005C00u));
      }
    }
  } else {
    static_assert(std::is_same_v<T, ding::bf16>, "f16 or bf16 operands");
    if constexpr (std::is_same_v<W, int8_t>) {
      const uint32_t a = __byte_perm(word, 0, 0x4140), b = __byte_perm(word, 0, 0x4342);  // a byte per half
      const auto pair = [](uint32_t bytes) {
        const uint32_t magnitude = (bytes & 0x007F007Fu) | 0x43004300u, offset = (bytes & 0x00800080u) | 0x43004300u;
        uint32_t r;  // magnitude − offset, as fma(offset, −1, magnitude): sm_80 has no bf16x2 subtraction
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(offset), "r"(0xBF80BF80u), "r"(magnitude));
        return r;
      };
      lo = pair(a);
      hi = pair(b);
    } else {
      const uint32_t a = __byte_perm(word, 0, 0x1404), b = __byte_perm(word, 0, 0x3424);  // a byte per high half
      const auto pair = [](uint32_t high_bytes) {
        const uint32_t bits = (high_bytes & 0x80008000u) | ((high_bytes >> 4) & 0x07F007F0u);
        uint32_t r;  // bits · 2^120 + (−0): the sign of zero kept
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(bits), "r"(0x7B807B80u), "r"(0x80008000u));
        return r;
      };
      lo = pair(a);
      hi = pair(b);
    }
  }
}

// d += a · b for one m16n8k32 tile of 8-bit integers, exact int32 sums (sm_80+): a signed (i8 w),
// b signed or unsigned as B says (int8_t, uint8_t). Lane (g, c) holds a: rows g (a0, a2) and g + 8
// (a1, a3), k 4c … 4c + 3 (a0, a1) and 16 + 4c … (a2, a3), four values per word, the lowest k in
// the low byte; b: column g, k 4c … (b0) and 16 + 4c … (b1); d as m16n8k16's (mma_sync.cuh).
template <class B>
__device__ inline void mma_16832_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<B, int8_t> || std::is_same_v<B, uint8_t>, "8-bit integer b");
  if constexpr (std::is_same_v<B, int8_t>)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if __CUDA_ARCH__ >= 890
#define DING_GPU_E4M3_MMA 1
// d += a · b for one m16n8k32 tile of E4M3 operands, f32 accumulation (sm_89+). Lane (g, c) =
// (lane / 4, lane % 4) holds a: rows g (a0, a2) and g + 8 (a1, a3), k 4c … 4c + 3 (a0, a1) and
// 16 + 4c … (a2, a3), four values per word, the lowest k in the low byte; b: column g, k 4c …
// (b0) and 16 + 4c … (b1). The accumulators are those of m16n8k16 (mma_sync.cuh).
__device__ inline void mma_16832_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as E4M3, rounded to nearest, saturating at ±448 (sm_89+): x0 in the low byte.
__device__ inline uint16_t to_e4m3x2(float x0, float x1) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(x1), "f"(x0));
  return r;
}
#endif

DING_GPU_END
#endif  // DING_GPU_NVIDIA_MMA
