// The 16-key steps that both tensor-core attention kernels (attention_prefill.cu, attention_decode.cu)
// are built from, for a warp that owns 16 query rows as m16n8k16 A fragments and reads K and V
// rows from shared memory as stored ([key][d], rows `pitch` elements apart). NVIDIA sm_80+ only.
//
// Accumulator element e of n-tile nt is row quad_row + 8·(e / 2), key (or d) 8·nt + 2·quad_col
// + e % 2, with (quad_row, quad_col) = (lane / 4, lane % 4) (mma_sync.cuh).
#pragma once
#include <cstdint>
#include <type_traits>

#include "mma_sync.cuh"

DING_GPU_BEGIN
namespace attn {

// P enters the mma as a sum of 16-bit parts (split_pair): three for bf16 (remainder 2^-27), two
// for f16 (2^-24); the precision argument is in attention_prefill.cu. (Outside the device-only
// part: the host picks kernel instances by it.)
template <class T>
inline constexpr int kPParts = std::is_same_v<T, ding::bf16> ? 3 : 2;

}  // namespace attn
DING_GPU_END

#if defined(DING_GPU_NVIDIA_MMA)
DING_GPU_BEGIN
namespace attn {

// s0 += Q·Kᵀ for keys 0 … 7 and s1 for keys 8 … 15 of the 16 rows at `k`: each ldmatrix.x4
// brings both key halves × both d halves of one k-step.
template <class T, int kSteps>
__device__ inline void add_scores16(float (&s0)[4], float (&s1)[4], const uint32_t (&qa)[kSteps][4], const T* k,
                                    int pitch, int lane) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    uint32_t kb[4];
    load_b_pair(kb, k + kk * 16, pitch, lane);
    mma_16816<T>(s0, qa[kk], kb[0], kb[1]);
    mma_16816<T>(s1, qa[kk], kb[2], kb[3]);
  }
}

// o += P·V over 16 keys: p0 and p1 are the probabilities of keys 0 … 7 and 8 … 15 in accumulator
// layout, which is the A fragment of one k-step; V's 16 rows start at `v`. P enters as Parts
// 16-bit parts (1: rounded once, for a caller whose error budget already holds V's rounding).
template <class T, int DH, int Parts = kPParts<T>>
__device__ inline void add_pv16(float (&o)[DH / 8][4], const float (&p0)[4], const float (&p1)[4], const T* v,
                                int pitch, int lane) {
  uint32_t p[Parts][4];
  split_pair<T>(p0[0], p0[1], p, 0);
  split_pair<T>(p0[2], p0[3], p, 1);
  split_pair<T>(p1[0], p1[1], p, 2);
  split_pair<T>(p1[2], p1[3], p, 3);
#pragma unroll
  for (int dtp = 0; dtp < DH / 16; ++dtp) {
    // d tiles 2·dtp and 2·dtp + 1 over keys 0 … 15.
    uint32_t vb[4];
    load_b_pair_trans(vb, v + dtp * 16, pitch, lane);
#pragma unroll
    for (int n = 0; n < Parts; ++n) {
      mma_16816<T>(o[2 * dtp], p[n], vb[0], vb[1]);
      mma_16816<T>(o[2 * dtp + 1], p[n], vb[2], vb[3]);
    }
  }
}

}  // namespace attn
DING_GPU_END
#endif  // DING_GPU_NVIDIA_MMA
