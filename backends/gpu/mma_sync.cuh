// The warp-level tensor-core instructions of NVIDIA sm_80+ that the mma.sync kernels share
// (gemm_mma.cuh, gemv_mma.cuh, attention_prefill.cu, attention_decode.cu, delta_rule.cu): ldmatrix,
// m16n8k16 with f32 accumulation for bf16 or f16 operands, and m16n8k8 for tf32 operands (f32
// values split into a tf32 head and tail where one rounding is too coarse). Device code only, inside
// DING_GPU_NVIDIA_MMA (vendor.h); a HIP build never sees it.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane (g, c) = (lane / 4,
// lane % 4) holds accumulator elements (row g, columns 2c, 2c + 1) and (row g + 8, same columns)
// of an m16n8 tile, in that order.
#pragma once
#include <cstdint>
#include <type_traits>

#include "cp_async.cuh"
#include "elements.cuh"

#if defined(DING_GPU_NVIDIA_MMA)
DING_GPU_BEGIN

// Four 8 × 8 matrices of 16-bit elements from shared memory; lane i names row i % 8 of matrix i / 8.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_address(row)); }

// The same, each matrix transposed (a row-major [k, n] tile as the "col" B operand).
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
}

// A pair of B fragments by one ldmatrix.x4: n tiles 0 and 1 (n 0 … 7, 8 … 15) of one k step of
// 16, from the tile at `tile` (n 0, k 0) whose rows are n (the keys of Q·Kᵀ), `pitch` elements
// apart. Lanes 8i … 8i + 7 name the rows of matrix i: r[0], r[1] are n tile 0's k halves, r[2],
// r[3] n tile 1's.
template <class T>
__device__ inline void load_b_pair(uint32_t (&r)[4], const T* tile, int pitch, int lane) {
  ldmatrix_x4(r, tile + (8 * (lane / 16) + lane % 8) * pitch + 8 * ((lane / 8) % 2));
}

// The same pair from a tile whose rows are k (the values of P·V), transposed by ldmatrix.trans.
template <class T>
__device__ inline void load_b_pair_trans(uint32_t (&r)[4], const T* tile, int pitch, int lane) {
  ldmatrix_x4_trans(r, tile + (8 * ((lane / 8) % 2) + lane % 8) * pitch + 8 * (lane / 16));
}

// The A fragments of the k-steps of a 16-row tile stored row-major in shared memory, rows `pitch`
// elements apart: fragment kk covers columns 16·kk … 16·kk + 15.
template <int kSteps, class T>
__device__ inline void load_a_fragments(uint32_t (&a)[kSteps][4], const T* tile, int pitch, int lane) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) ldmatrix_x4(a[kk], tile + (lane % 16) * pitch + kk * 16 + (lane / 16) * 8);
}

// d += a · b for one m16n8k16 tile, T = ding::bf16 or ding::f16.
template <class T>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, ding::bf16> || std::is_same_v<T, ding::f16>, "16-bit operands only");
  if constexpr (std::is_same_v<T, ding::bf16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
template <class T>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_16816<T>(d, a, b[0], b[1]);
}

// x0, x1 as N pairs of T (x0 in the low half: the lower column) that sum to them: part 0 is
// round(x), each next part rounds what the previous ones left (exactly, in f32). How the
// attention kernels feed f32 probabilities to a 16-bit mma without rounding them once.
// Each part is one paired conversion (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32).
template <class T, int N>
__device__ inline void split_pair(float x0, float x1, uint32_t (&part)[N][4], int reg) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if constexpr (std::is_same_v<T, ding::bf16>) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);  // .x = x0: the low half
      part[n][reg] = *reinterpret_cast<const uint32_t*>(&h);
      x0 -= __low2float(h);
      x1 -= __high2float(h);
    } else {
      const __half2 h = __floats2half2_rn(x0, x1);
      part[n][reg] = *reinterpret_cast<const uint32_t*>(&h);
      x0 -= __low2float(h);
      x1 -= __high2float(h);
    }
  }
}

// The transpose of an 8 × 8 matrix of 16-bit elements across the warp: lane (g, c) holds row g,
// columns 2c and 2c + 1 (the lower column in the low half), before and after. Half an accumulator
// tile's row pairs, transposed, are a B operand's register of that tile's rows as its k.
__device__ inline uint32_t transpose_8x8(uint32_t x) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

// d += a · b for one m16n8k8 tile of tf32 operands (f32 bit patterns; the unit reads the top 19
// bits). Lane (g, c) holds a: (g, c), (g + 8, c), (g, c + 4), (g + 8, c + 4); b: (c, g), (c + 4, g).
__device__ inline void mma_1688_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// x rounded to tf32 (to nearest, ties away), as a tf32 operand.
__device__ inline uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// x as head + tail, both tf32 (head = x rounded, tail = what it left, rounded): a product of two
// such splits without the tail × tail term is good to about 2^-21 relative, against 2^-11 for one
// rounding ("3xTF32").
__device__ inline void split_tf32(float x, uint32_t& head, uint32_t& tail) {
  head = to_tf32(x);
  tail = to_tf32(x - __uint_as_float(head));
}

DING_GPU_END
#endif  // DING_GPU_NVIDIA_MMA
