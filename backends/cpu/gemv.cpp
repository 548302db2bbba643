// The few-rows matmul core (decode): out[M, N] = epilogue(x[M, K] · w[N, K]ᵀ) for M ≤ kGemvMaxRows.
// With few rows there is ~1 FLOP per weight byte, so the roofline is memory bandwidth: the kernel
// reads w exactly once, in its stored dtype (16-bit and quantized 8-bit weights widened in
// registers, a quantized row's scale applied to its sums), and applies
// each weight vector to every row of x before moving on. Threads split the output channels
// (static), so each streams its own contiguous slab of w strictly in address order, one row after
// the other: the hardware prefetcher follows that at full bandwidth (interleaving several rows, or
// software prefetch on top, measured slower).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "scratch.h"
#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

// acc[m] = Σ_k w[k] · x[m, k] for one row of w and each of the `Rows` rows of x (f32).
// Unroll × Rows independent accumulators (≤ 8, all in ymm registers) hide the FMA latency;
// a multi-row step reuses each weight vector for every row of x.
template <int Rows, class W>
void dot_row(const W* w, const float* x, int64_t K, float (&acc)[Rows]) {
  int64_t k = 0;
#ifdef DING_CPU_AVX2
  constexpr int Unroll = std::max(1, std::min(4, 8 / Rows));
  __m256 sum[Unroll][Rows];
  for (int u = 0; u < Unroll; ++u)
    for (int m = 0; m < Rows; ++m) sum[u][m] = _mm256_setzero_ps();
  if constexpr (std::is_same_v<W, bf16>) {
    // 16 bf16 weights per 32-byte load: shifting each 32-bit pair left by 16 gives the even
    // elements as f32, masking the low half gives the odd ones; no shuffles. x was laid out to
    // match (bf16_pair_order), so the products pair up.
    const __m256i high_half = _mm256_set1_epi32(int32_t(0xffff0000u));
    for (; k + 16 * Unroll <= K; k += 16 * Unroll) {
      for (int u = 0; u < Unroll; ++u) {
        const int64_t ku = k + 16 * u;
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + ku));
        const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
        const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(raw, high_half));
        for (int m = 0; m < Rows; ++m) {
          sum[u][m] = _mm256_fmadd_ps(even, load8(x + m * K + ku), sum[u][m]);
          sum[u][m] = _mm256_fmadd_ps(odd, load8(x + m * K + ku + 8), sum[u][m]);
        }
      }
    }
    // Full blocks of 16 that the unrolled loop left (x is paired for every full block); the last
    // K mod 16 elements are in natural order and go to the scalar tail.
    for (; k + 16 <= K; k += 16) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(raw, high_half));
      for (int m = 0; m < Rows; ++m) {
        sum[0][m] = _mm256_fmadd_ps(even, load8(x + m * K + k), sum[0][m]);
        sum[0][m] = _mm256_fmadd_ps(odd, load8(x + m * K + k + 8), sum[0][m]);
      }
    }
  } else {
    for (; k + 8 * Unroll <= K; k += 8 * Unroll) {
      for (int u = 0; u < Unroll; ++u) {
        const __m256 wv = load8(w + k + 8 * u);
        for (int m = 0; m < Rows; ++m) sum[u][m] = _mm256_fmadd_ps(wv, load8(x + m * K + k + 8 * u), sum[u][m]);
      }
    }
    for (; k + 8 <= K; k += 8) {
      const __m256 wv = load8(w + k);
      for (int m = 0; m < Rows; ++m) sum[0][m] = _mm256_fmadd_ps(wv, load8(x + m * K + k), sum[0][m]);
    }
  }
  for (int m = 0; m < Rows; ++m) {
    for (int u = 1; u < Unroll; ++u) sum[0][m] = _mm256_add_ps(sum[0][m], sum[u][m]);
    acc[m] = hsum(sum[0][m]);
  }
#else
  for (int m = 0; m < Rows; ++m) acc[m] = 0.0f;
#endif
  for (; k < K; ++k) {
    const float wk = widen(w[k]);
    for (int m = 0; m < Rows; ++m) acc[m] += wk * x[m * K + k];
  }
}

#ifdef DING_CPU_AVX2
// Reorders each row of x [M, K] so every full block of 16 reads as its 8 even then its 8 odd
// elements: the order in which dot_row unpacks 16 bf16 weights. The tail (K mod 16) stays.
void bf16_pair_order(float* out_rows, const float* x, int64_t M, int64_t K) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    float* out = out_rows + m * K;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
      for (int i = 0; i < 8; ++i) {
        out[k + i] = row[k + 2 * i];
        out[k + 8 + i] = row[k + 2 * i + 1];
      }
    for (; k < K; ++k) out[k] = row[k];
  }
}
#endif

template <int Rows, class W>
void gemv_rows(const GemmProblem& p, const W* w, const float* x) {
  const int64_t N = p.N, K = p.K;
  // Channels in groups of 8 so the epilogue works on whole vectors; static, so each thread
  // streams one contiguous slab of w.
  constexpr int64_t kGroup = 8;
  const int64_t groups = (N + kGroup - 1) / kGroup;
  // swiglu: a group's gate rows n0 … and then its up rows N + n0 …, so the thread's slab is two
  // address-ordered runs and the epilogue finds both sums of each output in registers.
  const int64_t halves = p.ep.swiglu ? 2 : 1;
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n0 = g * kGroup, count = std::min(kGroup, N - n0);
    float sums[2][Rows][kGroup];
    for (int64_t h = 0; h < halves; ++h)
      for (int64_t c = 0; c < count; ++c) {
        float acc[Rows];
        const int64_t row = h * N + n0 + c;
        dot_row<Rows>(w + row * K, x, K, acc);
        const float scale = p.w_scales ? p.w_scales[row] : 1.0f;
        for (int m = 0; m < Rows; ++m) sums[h][m][c] = acc[m] * scale;
      }
    for (int m = 0; m < Rows; ++m) p.ep.apply(m, n0, sums[0][m], count, p.ep.swiglu ? sums[1][m] : nullptr);
  }
}

template <class W>
void gemv_typed(const GemmProblem& p, const W* w, const float* x) {
  switch (p.M) {
    case 1: return gemv_rows<1>(p, w, x);
    case 2: return gemv_rows<2>(p, w, x);
    case 3: return gemv_rows<3>(p, w, x);
    case 4: return gemv_rows<4>(p, w, x);
    case 5: return gemv_rows<5>(p, w, x);
    case 6: return gemv_rows<6>(p, w, x);
  }
}

}  // namespace

void gemv(const GemmProblem& p) {
  static_assert(kGemvMaxRows == 6, "gemv_typed instantiates Rows = 1..6");
  // x is tiny next to w (M·K vs N·K): widen it once so the inner loop converts only w.
  const float* x = static_cast<const float*>(p.x);
  if (p.x_dtype != DType::f32) {
    float* x_f32 = thread_scratch(ScratchSlot::first, size_t(p.M * p.K));
    load_row(x_f32, p.x, p.x_dtype, p.M * p.K);
    x = x_f32;
  }
#ifdef DING_CPU_AVX2  // only the AVX2 dot_row unpacks bf16 in pairs
  if (p.w_dtype == DType::bf16) {
    float* paired = thread_scratch(ScratchSlot::second, size_t(p.M * p.K));
    bf16_pair_order(paired, x, p.M, p.K);
    x = paired;
  }
#endif
  with_weight_type(p.w_dtype, p.w, [&](auto* w) { gemv_typed(p, w, x); });
}

}  // namespace ding::cpu
