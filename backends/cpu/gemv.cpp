// The few-rows matmul core (decode): out[M, N] = epilogue(x[M, K] · w[N, K]ᵀ) for M ≤ kGemvMaxRows.
// With few rows there is ~1 FLOP per weight byte, so the roofline is memory bandwidth: the kernel
// reads w exactly once, in its stored dtype (16-bit and E4M3 weights widened in registers; i8
// weights against 16-bit x multiplied in integers, x rounded to int16 per row, on AVX2, and on
// AVX-512 VNNI with one row of x held in registers where K ≤ 768; a quantized row's scale applied
// to its sums), and applies each weight vector to every row of x before moving on. Threads split
// the output channels (static), so each streams its own contiguous slab of w strictly in address
// order, one row after the other: the hardware prefetcher follows that at full bandwidth
// (interleaving several rows, or software prefetch on top, measured slower).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
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
// sums[r] = Σ_k w[r·K + k] · q[k] for `rows` consecutive i8 weight rows of K elements against one
// int16 row of x (a row of w at a time, in address order).
using I8RowsDot = void (*)(const int8_t* w, int64_t rows, const int16_t* q, float* sums);

// x rounded to int16 per row for i8 weights: x[m, k] ≈ q[m·K + k] · scale[m], |q| ≤ 32767.
struct Int16Rows {
  const int16_t* q = nullptr;
  float scale[kGemvMaxRows] = {};
  I8RowsDot held_x = nullptr;  // one row of x, held in registers (dot_rows_i8_held_x), where it applies
};

Int16Rows round_to_int16(int16_t* q, const float* x, int64_t M, int64_t K) {
  Int16Rows r;
  r.q = q;
  const __m256i magnitude_bits = _mm256_set1_epi32(0x7fffffff);
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * K;
    int16_t* q_row = q + m * K;
    // The largest |x| compared as bits, where a float max would pass a NaN over: with the sign
    // cleared, finite values order as their bits do and inf and NaN above all of them.
    __m256i peak8 = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
      peak8 = _mm256_max_epi32(peak8, _mm256_and_si256(_mm256_castps_si256(load8(row + k)), magnitude_bits));
    uint32_t lanes[8], peak_bits = 0;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), peak8);
    for (uint32_t lane : lanes) peak_bits = std::max(peak_bits, lane);
    for (; k < K; ++k) {
      uint32_t bits;
      std::memcpy(&bits, row + k, 4);
      peak_bits = std::max(peak_bits, bits & 0x7fffffffu);
    }
    float peak;
    std::memcpy(&peak, &peak_bits, 4);
    // A non-finite row stays non-finite: its sums are NaN, as the f32 products would make them.
    if (!std::isfinite(peak)) {
      r.scale[m] = std::numeric_limits<float>::quiet_NaN();
      std::fill_n(q_row, K, int16_t(0));
      continue;
    }
    r.scale[m] = peak / 32767.0f;
    const float inverse = peak > 0.0f ? 32767.0f / peak : 0.0f;
    // cvtps rounds to nearest even, as nearbyint does in the default rounding mode; packs works
    // within 128-bit halves, so the 64-bit quarters are put back in order.
    const __m256 inverse8 = _mm256_set1_ps(inverse);
    for (k = 0; k + 16 <= K; k += 16) {
      const __m256i low = _mm256_cvtps_epi32(_mm256_mul_ps(load8(row + k), inverse8));
      const __m256i high = _mm256_cvtps_epi32(_mm256_mul_ps(load8(row + k + 8), inverse8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q_row + k),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(low, high), 0xd8));
    }
    for (; k < K; ++k) q_row[k] = int16_t(std::nearbyint(row[k] * inverse));
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

// The i8 rows of a batch-1 decode against x held in registers, on AVX-512 VNNI (chosen at run
// time; builds target x86-64-v3): x's K/32 blocks of 32 int16 stay in zmm registers for all the
// rows, and each block of 32 weights takes one widening load and one vpdpwssd (pairs multiplied
// and added into 16 int32 lanes). Reading x from L1 beside the weights held a core to ~18 GB/s on
// 768-long rows where it streams them at ~24 with x in registers (the loads of x, not the
// multiply-adds, were the cost: the same loop with x from memory measured 18 GB/s on AVX-512
// too). 24 blocks (K ≤ 768) leave room for the 4 accumulators in the 32 registers. A lane of the
// four accumulators together holds at most 24 pair sums, each below 2^23 in magnitude, and the
// 16 lanes go to f32 before they are added together, so no int32 sum overflows.
constexpr int kHeldBlocks = 24;

template <int Blocks>
[[gnu::target("avx512f,avx512bw,avx512vnni")]] void dot_rows_i8_held_x(const int8_t* w, int64_t rows, const int16_t* q,
                                                                      float* sums) {
  __m512i x[Blocks];
#pragma GCC unroll 24
  for (int b = 0; b < Blocks; ++b) x[b] = _mm512_loadu_si512(q + 32 * b);
  for (int64_t r = 0; r < rows; ++r, w += 32 * Blocks) {
    __m512i sum[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 24
    for (int b = 0; b < Blocks; ++b) {
      const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * b)));
      sum[b % 4] = _mm512_dpwssd_epi32(sum[b % 4], wv, x[b]);
    }
    // The 16 lanes added by swapping halves, quarters, pairs and neighbours. The maskz forms
    // throughout: GCC 12 warns about the undefined pass-through operand of the plain ones.
    __m512 lanes = _mm512_maskz_cvtepi32_ps(
        0xffff, _mm512_add_epi32(_mm512_add_epi32(sum[0], sum[1]), _mm512_add_epi32(sum[2], sum[3])));
    lanes = _mm512_add_ps(lanes, _mm512_maskz_shuffle_f32x4(0xffff, lanes, lanes, 0x4e));
    lanes = _mm512_add_ps(lanes, _mm512_maskz_shuffle_f32x4(0xffff, lanes, lanes, 0xb1));
    lanes = _mm512_add_ps(lanes, _mm512_maskz_permute_ps(0xffff, lanes, 0x4e));
    lanes = _mm512_add_ps(lanes, _mm512_maskz_permute_ps(0xffff, lanes, 0xb1));
    sums[r] = _mm512_cvtss_f32(lanes);
  }
}

template <size_t... B>
constexpr std::array<I8RowsDot, sizeof...(B)> held_x_kernels(std::index_sequence<B...>) {
  return {&dot_rows_i8_held_x<int(B) + 1>...};
}

// The held-x kernel for rows of K elements, or null where it does not apply (K not a multiple of
// 32, or past 768) or the processor lacks AVX-512 VNNI.
I8RowsDot held_x_kernel(int64_t K) {
  static const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vnni");
  static constexpr auto kernels = held_x_kernels(std::make_index_sequence<kHeldBlocks>{});
  if (!vnni || K <= 0 || K % 32 != 0 || K > 32 * kHeldBlocks) return nullptr;
  return kernels[size_t(K / 32 - 1)];
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
#ifdef DING_CPU_AVX2
    if constexpr (Rows == 1 && std::is_same_v<W, int8_t>) {
      const auto* xi = static_cast<const Int16Rows*>(int16_x);
      if (xi && xi->held_x) {
        for (int64_t h = 0; h < halves; ++h) {
          xi->held_x(w + (h * N + n0) * K, count, xi->q, sums[h][0]);
          for (int64_t c = 0; c < count; ++c)
            sums[h][0][c] *= xi->scale[0] * (p.w_scales ? p.w_scales[h * N + n0 + c] : 1.0f);
        }
        p.ep.apply(0, n0, sums[0][0], count, p.ep.swiglu ? sums[1][0] : nullptr);
        continue;
      }
    }
#endif
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
    if (p.M == 1) rounded.held_x = held_x_kernel(p.K);
    int16_x = &rounded;
  }
#endif
  with_weight_type(p.w_dtype, p.w, [&](auto* w) { gemv_typed(p, w, x, int16_x); });
}

}  // namespace ding::cpu
