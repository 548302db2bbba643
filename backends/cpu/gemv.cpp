// The few-rows matmul core (decode): out[M, N] = epilogue(x[M, K] · w[N, K]ᵀ) for M ≤ kGemvMaxRows.
// With few rows there is ~1 FLOP per weight byte, so the roofline is memory bandwidth: the kernel
// reads w exactly once, in its stored dtype (16-bit and E4M3 weights widened in registers; i8
// weights against 16-bit x multiplied in integers, x rounded to int16 per row, on AVX2; a quantized
// row's scale applied to its sums), and applies
// each weight vector to every row of x before moving on. Threads split the output channels
// (static), so each streams its own contiguous slab of w strictly in address order, one row after
// the other: the hardware prefetcher follows that at full bandwidth (interleaving several rows, or
// software prefetch on top, measured slower).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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
    // E4M3 weights are summed at 2^-8 of their value and the sums scaled once (exact: a power of
    // two), which saves a multiply per 8 weights in the widening that bounds this loop.
    auto load_w = [](const W* p) {
      if constexpr (std::is_same_v<W, f8e4m3>)
        return load8_over_256(p);
      else
        return load8(p);
    };
    for (; k + 8 * Unroll <= K; k += 8 * Unroll) {
      for (int u = 0; u < Unroll; ++u) {
        const __m256 wv = load_w(w + k + 8 * u);
        for (int m = 0; m < Rows; ++m) sum[u][m] = _mm256_fmadd_ps(wv, load8(x + m * K + k + 8 * u), sum[u][m]);
      }
    }
    for (; k + 8 <= K; k += 8) {
      const __m256 wv = load_w(w + k);
      for (int m = 0; m < Rows; ++m) sum[0][m] = _mm256_fmadd_ps(wv, load8(x + m * K + k), sum[0][m]);
    }
  }
  for (int m = 0; m < Rows; ++m) {
    for (int u = 1; u < Unroll; ++u) sum[0][m] = _mm256_add_ps(sum[0][m], sum[u][m]);
    acc[m] = hsum(sum[0][m]) * (std::is_same_v<W, f8e4m3> ? 256.0f : 1.0f);
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
// x rounded to int16 per row for i8 weights: x[m, k] ≈ q[m·K + k] · scale[m], |q| ≤ 32767.
struct Int16Rows {
  const int16_t* q = nullptr;
  float scale[kGemvMaxRows] = {};
};

Int16Rows round_to_int16(int16_t* q, const float* x, int64_t M, int64_t K) {
  Int16Rows r;
  r.q = q;
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    float peak = 0.0f;
    for (int64_t k = 0; k < K; ++k) peak = std::max(peak, std::fabs(row[k]));
    // A non-finite row stays non-finite: its sums are NaN, as the f32 products would make them.
    r.scale[m] = std::isfinite(peak) ? peak / 32767.0f : std::numeric_limits<float>::quiet_NaN();
    const float inverse = peak > 0.0f && std::isfinite(peak) ? 32767.0f / peak : 0.0f;
    for (int64_t k = 0; k < K; ++k) q[m * K + k] = int16_t(std::nearbyint(row[k] * inverse));
  }
  return r;
}

// acc[m] = Σ_k w[k] · q[m, k] for one row of i8 weights and each int16 row of x, exactly in
// integers: _mm256_madd_epi16 multiplies 16 pairs and adds neighbours into 8 int32 lanes, one
// instruction where widening to f32 and an FMA take three per 8 weights (which made the f32
// path issue-bound at 62 % of its byte roofline). Unroll × Rows independent accumulators, as in
// dot_row: with one, the loop ran a block of 16 weights per ~2 cycles, 27 GB/s on one core
// from L2, below what memory delivers to it. A pair sum is below 2^23 in magnitude, so the
// accumulators' lanes, added together, are moved into f32 every 2^7 pairs (kFlush weights),
// long before 2^31.
template <int Rows>
void dot_row_i8(const int8_t* w, const int16_t* q, int64_t K, float (&acc)[Rows]) {
  constexpr int Unroll = std::max(1, std::min(4, 8 / Rows));
  constexpr int64_t kFlush = 16 * 128;
  __m256 total[Rows];
  for (int m = 0; m < Rows; ++m) total[m] = _mm256_setzero_ps();
  auto widened = [&](int64_t k) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k))); };
  auto x16 = [&](int m, int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + m * K + k)); };
  int64_t k = 0;
  while (k + 16 <= K) {
    const int64_t end = std::min(K / 16 * 16, k + kFlush);
    __m256i sum[Unroll][Rows];
    for (int u = 0; u < Unroll; ++u)
      for (int m = 0; m < Rows; ++m) sum[u][m] = _mm256_setzero_si256();
    for (; k + 16 * Unroll <= end; k += 16 * Unroll)
      for (int u = 0; u < Unroll; ++u) {
        const __m256i wv = widened(k + 16 * u);
        for (int m = 0; m < Rows; ++m) sum[u][m] = _mm256_add_epi32(sum[u][m], _mm256_madd_epi16(wv, x16(m, k + 16 * u)));
      }
    for (; k < end; k += 16) {
      const __m256i wv = widened(k);
      for (int m = 0; m < Rows; ++m) sum[0][m] = _mm256_add_epi32(sum[0][m], _mm256_madd_epi16(wv, x16(m, k)));
    }
    for (int m = 0; m < Rows; ++m) {
      for (int u = 1; u < Unroll; ++u) sum[0][m] = _mm256_add_epi32(sum[0][m], sum[u][m]);
      total[m] = _mm256_add_ps(total[m], _mm256_cvtepi32_ps(sum[0][m]));
    }
  }
  for (int m = 0; m < Rows; ++m) acc[m] = hsum(total[m]);
  for (; k < K; ++k)
    for (int m = 0; m < Rows; ++m) acc[m] += float(int32_t(w[k]) * int32_t(q[m * K + k]));
}

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

// int16_x: for i8 weights on AVX2, x rounded to int16 (dot_row_i8); null: x as f32 (dot_row).
template <int Rows, class W>
void gemv_rows(const GemmProblem& p, const W* w, const float* x, const void* int16_x) {
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
        const float scale = p.w_scales ? p.w_scales[row] : 1.0f;
#ifdef DING_CPU_AVX2
        if constexpr (std::is_same_v<W, int8_t>) {
          if (int16_x) {
            const auto& xi = *static_cast<const Int16Rows*>(int16_x);
            dot_row_i8<Rows>(w + row * K, xi.q, K, acc);
            for (int m = 0; m < Rows; ++m) sums[h][m][c] = acc[m] * xi.scale[m] * scale;
            continue;
          }
        }
#endif
        dot_row<Rows>(w + row * K, x, K, acc);
        for (int m = 0; m < Rows; ++m) sums[h][m][c] = acc[m] * scale;
      }
    for (int m = 0; m < Rows; ++m) p.ep.apply(m, n0, sums[0][m], count, p.ep.swiglu ? sums[1][m] : nullptr);
  }
}

template <class W>
void gemv_typed(const GemmProblem& p, const W* w, const float* x, const void* int16_x) {
  switch (p.M) {
    case 1: return gemv_rows<1>(p, w, x, int16_x);
    case 2: return gemv_rows<2>(p, w, x, int16_x);
    case 3: return gemv_rows<3>(p, w, x, int16_x);
    case 4: return gemv_rows<4>(p, w, x, int16_x);
    case 5: return gemv_rows<5>(p, w, x, int16_x);
    case 6: return gemv_rows<6>(p, w, x, int16_x);
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
  const void* int16_x = nullptr;
#ifdef DING_CPU_AVX2  // only the AVX2 dot_row unpacks bf16 in pairs, and only AVX2 has dot_row_i8
  if (p.w_dtype == DType::bf16) {
    float* paired = thread_scratch(ScratchSlot::second, size_t(p.M * p.K));
    bf16_pair_order(paired, x, p.M, p.K);
    x = paired;
  }
  // Only for 16-bit activations: their own rounding (2^-9 or 2^-12 of each value) is far coarser
  // than int16's (2^-16 of the row's largest), while an f32 x keeps the op's one f32 rounding.
  Int16Rows rounded;
  if (p.w_dtype == DType::i8 && (p.x_dtype == DType::f16 || p.x_dtype == DType::bf16)) {
    auto* q = reinterpret_cast<int16_t*>(thread_scratch(ScratchSlot::second, size_t(p.M * p.K + 1) / 2));
    rounded = round_to_int16(q, x, p.M, p.K);
    int16_x = &rounded;
  }
#endif
  with_weight_type(p.w_dtype, p.w, [&](auto* w) { gemv_typed(p, w, x, int16_x); });
}

}  // namespace ding::cpu
