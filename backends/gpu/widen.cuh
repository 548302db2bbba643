// 8-bit weight values (i8, f8e4m3) widened to a 16-bit float type in memory, for the tensor-core
// GEMMs of prefill-sized products: every such value is exact in f16 and in bf16 (i8: integers of
// magnitude ≤ 127; E4M3: 4 significant bits, exponents 2^-9 … 2^8), so the GEMM over the copy,
// with each sum times its row's scale in the epilogue (Epilogue::w_scales), is the product the op
// defines: the scales are applied to f32 sums, never folded into 16-bit values.
// One segment (dense w) or several (moe_matmul's experts): segment e's values are skipped when
// the segment owns no rows (offsets[e] = offsets[e+1]), so a prefill chunk widens only the
// experts its tokens chose. The copy is bounded (widen_budget): a weight larger than the budget is
// widened and multiplied a part at a time.
#pragma once
#include <algorithm>
#include <cstdint>

#include "check.h"
#include "elements.cuh"
#include "gemm.cuh"
#include "stream.h"

DING_GPU_BEGIN

namespace widening {

constexpr int kThreads = 256;
constexpr int kVec = 16;  // values per thread-step: one 16-byte load, two 16-byte stores

// Grid (chunks of a segment, segments): out[e·n + i] = T(q[e·n + i]). Vec: 16 values per step
// through 16-byte words (q and out 16-byte aligned, n a multiple of 16); else one at a time.
template <class T, class W, bool Vec>
__global__ void __launch_bounds__(kThreads) widen_segments_kernel(T* out, const W* q, int64_t n, const int32_t* offsets) {
  const int64_t e = blockIdx.y;
  if (offsets && offsets[e] == offsets[e + 1]) return;  // an expert no row chose: never read
  const W* const src = q + e * n;
  T* const dst = out + e * n;
  const int64_t step = int64_t(gridDim.x) * kThreads * kVec;
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < n; i += step) {
    if constexpr (Vec) {
      // Through uint4 words: a Pack copied as a struct compiles to 4-byte loads and 2-byte stores.
      Pack<W, kVec> q16;
      *reinterpret_cast<uint4*>(q16.v) = *reinterpret_cast<const uint4*>(src + i);
      float v[kVec];
      widen(q16, v);
      uint32_t bits[kVec / 2];
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j)
        bits[j] = uint32_t(from_float<T>(v[2 * j]).bits) | uint32_t(from_float<T>(v[2 * j + 1]).bits) << 16;
      uint4* const out4 = reinterpret_cast<uint4*>(dst + i);
      const uint4 lo = make_uint4(bits[0], bits[1], bits[2], bits[3]), hi = make_uint4(bits[4], bits[5], bits[6], bits[7]);
#if defined(DING_GPU_NVIDIA)
      __stcg(out4, lo);  // one 16-byte store each (plain assignments split the first into four)
      __stcg(out4 + 1, hi);
#else
      out4[0] = lo;
      out4[1] = hi;
#endif
    } else {
      for (int64_t j = i; j < i + kVec && j < n; ++j) dst[j] = from_float<T>(to_float(src[j]));
    }
  }
}

constexpr size_t kDefaultBudget = size_t(256) << 20;

}  // namespace widening

// Bytes of scratch a prefill GEMM may widen 8-bit weights into: MatmulTuning::widen_bytes, else 256 MiB.
inline size_t widen_budget(const GpuStream& s) {
  return s.matmul_tuning().widen_bytes ? s.matmul_tuning().widen_bytes : widening::kDefaultBudget;
}

// out[e·n + i] = q[e·n + i] as T for the `segments` segments (at most 65535) of n values each,
// skipping those whose offsets[e] = offsets[e+1] (offsets null: every segment). 16 values per
// thread-step where q and out are 16-byte aligned and n a multiple of 16 (a weight's rows with
// K % 16 == 0), else one value at a time.
template <class T, class W>
void widen_segments(GpuStream& s, T* out, const W* q, int64_t n, int segments, const int32_t* offsets) {
  using namespace widening;
  if (n == 0 || segments == 0) return;
  const int64_t chunks = std::min<int64_t>(ceil_div(n, int64_t(kThreads) * kVec),
                                           std::max<int64_t>(1, int64_t(s.props().sm_count) * 8 / segments));
  const dim3 grid(unsigned(std::max<int64_t>(chunks, 1)), unsigned(segments));
  if (aligned_to(q, 16) && aligned_to(out, 16) && n % kVec == 0)
    widen_segments_kernel<T, W, true><<<grid, kThreads, 0, s.handle()>>>(out, q, n, offsets);
  else
    widen_segments_kernel<T, W, false><<<grid, kThreads, 0, s.handle()>>>(out, q, n, offsets);
  DING_GPU_CHECK_LAUNCH("widen_segments_kernel");
}

DING_GPU_END
