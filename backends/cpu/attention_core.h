// The online-softmax attention core of the CPU backend, shared by attention (attention.cpp) and
// multi-head latent attention (mla.cpp, where the keys are the cached latent and rope key and the
// values the latent). Online softmax over blocks of keys (FlashAttention, Dao et al.
// 2022): each query row keeps a running max m, denominator l and unnormalised output acc,
// rescaled when m grows, so no Tq×Tk score matrix exists. The rows of one call (RowBlock) read
// the same block of keys, so it comes from memory once and from cache for the rest.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {

constexpr int64_t kKeyBlock = 32;       // keys scored per step: every row's block of scores stays in L1
constexpr int64_t kPrefillRows = 16;    // query rows per prefill task (group heads × positions)
constexpr int64_t kKeysPerSplit = 64;  // decode chunk; fixed, so results do not depend on the thread count
constexpr int64_t kPrefetchKeys = 8;   // how far ahead of the scores the key rows are asked for

// Scores of 4 consecutive keys (rows k_step apart): four independent FMA chains hide the FMA
// latency, and one horizontal reduction serves all four.
template <class T>
[[gnu::always_inline]] inline void dot4(const float* q, const T* k, int64_t k_step, int64_t D, float* score) {
  const T *k0 = k, *k1 = k + k_step, *k2 = k + 2 * k_step, *k3 = k + 3 * k_step;
  int64_t d = 0;
  float s[4] = {0, 0, 0, 0};
#ifdef DING_CPU_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; d + 8 <= D; d += 8) {
    const __m256 qd = load8(q + d);
    a0 = _mm256_fmadd_ps(qd, load8(k0 + d), a0);
    a1 = _mm256_fmadd_ps(qd, load8(k1 + d), a1);
    a2 = _mm256_fmadd_ps(qd, load8(k2 + d), a2);
    a3 = _mm256_fmadd_ps(qd, load8(k3 + d), a3);
  }
  // [a0 a1 a2 a3] lane sums: two rounds of pairwise adds, then the two 128-bit halves.
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  if (d == D) {  // the usual head widths: no scalar tail, and the sums go straight out
    _mm_storeu_ps(score, sums);
    return;
  }
  _mm_storeu_ps(s, sums);
#endif
  for (; d < D; ++d) {
    s[0] += q[d] * widen(k0[d]);
    s[1] += q[d] * widen(k1[d]);
    s[2] += q[d] * widen(k2[d]);
    s[3] += q[d] * widen(k3[d]);
  }
  for (int i = 0; i < 4; ++i) score[i] = s[i];
}

// acc += Σ_i p[i] · v_i over 4 consecutive value rows: acc crosses the load/store ports once.
template <class T>
[[gnu::always_inline]] inline void axpy4(float* acc, const float* p, const T* v, int64_t v_step, int64_t D) {
  const T *v0 = v, *v1 = v + v_step, *v2 = v + 2 * v_step, *v3 = v + 3 * v_step;
  int64_t d = 0;
#ifdef DING_CPU_AVX2
  const __m256 p0 = _mm256_set1_ps(p[0]), p1 = _mm256_set1_ps(p[1]), p2 = _mm256_set1_ps(p[2]),
               p3 = _mm256_set1_ps(p[3]);
  for (; d + 8 <= D; d += 8) {
    __m256 a = _mm256_fmadd_ps(p0, load8(v0 + d), load8(acc + d));
    a = _mm256_fmadd_ps(p1, load8(v1 + d), a);
    a = _mm256_fmadd_ps(p2, load8(v2 + d), a);
    store8(acc + d, _mm256_fmadd_ps(p3, load8(v3 + d), a));
  }
#endif
  for (; d < D; ++d)
    acc[d] += p[0] * widen(v0[d]) + p[1] * widen(v1[d]) + p[2] * widen(v2[d]) + p[3] * widen(v3[d]);
}

#ifdef DING_CPU_AVX2
// Scores of 8 consecutive keys (k_step apart) for one query row: q's chunk loaded once for 8
// keys and one reduction tree for all eight. D a multiple of 8.
template <class T>
[[gnu::always_inline]] inline void dot8(const float* q, const T* k, int64_t k_step, int64_t D, float* score) {
  __m256 a[8];
  for (__m256& x : a) x = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qd = load8(q + d);
    for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(qd, load8(k + i * k_step + d), a[i]);
  }
  _mm256_storeu_ps(score, hsum8(a));
}

// acc += Σ_i p[i] · v_i over 8 consecutive value rows: acc crosses the load/store ports once for 8.
template <class T>
[[gnu::always_inline]] inline void axpy8(float* acc, const float* p, const T* v, int64_t v_step, int64_t D) {
  __m256 pb[8];
  for (int i = 0; i < 8; ++i) pb[i] = _mm256_broadcast_ss(p + i);
  for (int64_t d = 0; d < D; d += 8) {
    __m256 a0 = _mm256_fmadd_ps(pb[0], load8(v + d), load8(acc + d));
    __m256 a1 = _mm256_mul_ps(pb[1], load8(v + v_step + d));
    for (int i = 2; i < 8; i += 2) {
      a0 = _mm256_fmadd_ps(pb[i], load8(v + i * v_step + d), a0);
      a1 = _mm256_fmadd_ps(pb[i + 1], load8(v + (i + 1) * v_step + d), a1);
    }
    store8(acc + d, _mm256_add_ps(a0, a1));
  }
}

// Scores of 2 consecutive keys (k_step apart) for 4 query rows (q_step apart) that read the same
// keys, as the heads of one kv head do: each 8-element chunk of a key is widened once for the 4
// rows, where dot4 widens it once a row (the widening, not the FMA, bounded GQA decode).
// score[h·score_step + i] for row h, key i. D a multiple of 8.
template <class T>
[[gnu::always_inline]] inline void dot_shared4x2(const float* q, int64_t q_step, const T* k, int64_t k_step, int64_t D,
                                                 float* score, int64_t score_step) {
  __m256 a[8];
  for (__m256& x : a) x = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 k0 = load8(k + d), k1 = load8(k + k_step + d);
    for (int h = 0; h < 4; ++h) {
      const __m256 qd = load8(q + h * q_step + d);
      a[2 * h] = _mm256_fmadd_ps(qd, k0, a[2 * h]);
      a[2 * h + 1] = _mm256_fmadd_ps(qd, k1, a[2 * h + 1]);
    }
  }
  const __m256 s = hsum8(a);  // lane 2h + i: row h, key i
  const __m128 rows01 = _mm256_castps256_ps128(s), rows23 = _mm256_extractf128_ps(s, 1);
  _mm_storel_pi(reinterpret_cast<__m64*>(score), rows01);
  _mm_storeh_pi(reinterpret_cast<__m64*>(score + score_step), rows01);
  _mm_storel_pi(reinterpret_cast<__m64*>(score + 2 * score_step), rows23);
  _mm_storeh_pi(reinterpret_cast<__m64*>(score + 3 * score_step), rows23);
}

// acc_h += Σ_j p_h[j] · v_j over n value rows (v_step apart) for 4 rows (accumulators acc_step
// apart, weights p_step apart) that read the same values: each chunk of a value row is widened
// once for the 4 rows, and the accumulators stay in registers across the block. D a multiple of 8.
template <class T>
[[gnu::always_inline]] inline void axpy_shared4(float* acc, int64_t acc_step, const float* p, int64_t p_step, const T* v,
                                                int64_t v_step, int64_t n, int64_t D) {
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {  // two chunks at once: 8 independent FMA chains
    __m256 a[4][2];
    for (int h = 0; h < 4; ++h) a[h][0] = load8(acc + h * acc_step + d), a[h][1] = load8(acc + h * acc_step + d + 8);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 v0 = load8(v + j * v_step + d), v1 = load8(v + j * v_step + d + 8);
      for (int h = 0; h < 4; ++h) {
        const __m256 ph = _mm256_broadcast_ss(p + h * p_step + j);
        a[h][0] = _mm256_fmadd_ps(ph, v0, a[h][0]);
        a[h][1] = _mm256_fmadd_ps(ph, v1, a[h][1]);
      }
    }
    for (int h = 0; h < 4; ++h) store8(acc + h * acc_step + d, a[h][0]), store8(acc + h * acc_step + d + 8, a[h][1]);
  }
  for (; d < D; d += 8) {
    __m256 a[4];
    for (int h = 0; h < 4; ++h) a[h] = load8(acc + h * acc_step + d);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 vj = load8(v + j * v_step + d);
      for (int h = 0; h < 4; ++h) a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + h * p_step + j), vj, a[h]);
    }
    for (int h = 0; h < 4; ++h) store8(acc + h * acc_step + d, a[h]);
  }
}
#endif

// Asks for 4 rows of D elements, `step` elements apart, into L2.
template <class T>
void prefetch4(const T* p, int64_t step, int64_t D) {
  const int64_t bytes = D * int64_t(sizeof(T));
  for (int i = 0; i < 4; ++i)
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(p + i * step) + b, 0, 2);
}

inline void scale_in_place(float* x, float a, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  const __m256 av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) store8(x + i, _mm256_mul_ps(av, load8(x + i)));
#endif
  for (; i < n; ++i) x[i] *= a;
}

// max_i x[i] (n ≥ 1). A NaN score may or may not win, but either way it reaches the row's
// output through e^(s − m), as the scalar max would have it.
inline float max_of(const float* x, int64_t n) {
  int64_t i = 0;
  float best = x[0];
#ifdef DING_CPU_AVX2
  if (n >= 8) {
    __m256 m8 = load8(x);
    for (i = 8; i + 8 <= n; i += 8) m8 = _mm256_max_ps(m8, load8(x + i));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    best = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
  }
#endif
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// x[i] = e^(x[i] - shift); returns Σ x[i].
inline float exp_shifted_sum(float* x, float shift, int64_t n) {
  int64_t i = 0;
  float sum = 0;
#ifdef DING_CPU_AVX2
  const __m256 sv = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(load8(x + i), sv));
    store8(x + i, e);
    total = _mm256_add_ps(total, e);
  }
  sum = hsum(total);
#endif
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - shift);
  return sum;
}

// The query rows of one task, all reading the same block of keys (of one kv head or of a run of
// them), each with its online-softmax state.
struct RowBlock {
  int64_t count = 0, Dk = 0, Dv = 0;  // query and key width, value width
  float* q = nullptr;        // [count, Dk], pre-multiplied by the scale
  int64_t* first = nullptr;  // [count]: row r sees keys [first[r], keys[r])
  int64_t* keys = nullptr;   // [count]
  int64_t* k_at = nullptr;   // [count]: element offset of row r's kv head from the k passed to attend_keys
  int64_t* v_at = nullptr;   // [count]: the same into v
  int64_t* run = nullptr;    // [count]: set by attend_keys: 4 where rows [r, r + 4) share their keys and values, else 1 (0 inside such a run)
  float* score = nullptr;    // [count, kKeyBlock]: the current block's scores, then weights
  float* m = nullptr;        // [count] running max of the scores seen
  float* l = nullptr;        // [count] Σ e^(s - m)
  float* acc = nullptr;      // [count, Dv] Σ e^(s - m) · v
};

// Per-thread scratch, grown to the largest task seen and then reused: nothing allocated per row.
struct Scratch {
  std::vector<float> floats;
  std::vector<int64_t> keys;
};

// Carves every array of `count` rows from `s`.
inline RowBlock row_block(Scratch& s, int64_t count, int64_t Dk, int64_t Dv) {
  const size_t need = size_t(count * (Dk + kKeyBlock + Dv + 2));
  if (s.floats.size() < need) s.floats.resize(need);
  if (s.keys.size() < size_t(5 * count)) s.keys.resize(size_t(5 * count));
  RowBlock rows;
  rows.count = count;
  rows.Dk = Dk;
  rows.Dv = Dv;
  rows.q = s.floats.data();
  rows.score = rows.q + count * Dk;
  rows.first = s.keys.data();
  rows.keys = rows.first + count;
  rows.k_at = rows.keys + count;
  rows.v_at = rows.k_at + count;
  rows.run = rows.v_at + count;
  rows.m = rows.score + count * kKeyBlock;
  rows.l = rows.m + count;
  rows.acc = rows.l + count;
  return rows;
}

inline void reset_state(RowBlock& rows) {
  std::fill_n(rows.m, rows.count, -std::numeric_limits<float>::infinity());
  std::fill_n(rows.l, rows.count, 0.0f);
  std::fill_n(rows.acc, rows.count * rows.Dv, 0.0f);
}

// Row r's online-softmax state takes the n scores of its current block (rows.score): the running
// max moves up to theirs (rescaling what was summed under the old max, 0 on the first block), and
// the scores become their weights e^(s − m), summed into l.
inline void fold_scores(RowBlock& rows, int64_t r, int64_t n) {
  float* s = rows.score + r * kKeyBlock;
  const float m_new = std::max(rows.m[r], max_of(s, n));
  if (m_new > rows.m[r]) {
    const float rescale = std::exp(rows.m[r] - m_new);
    scale_in_place(rows.acc + r * rows.Dv, rescale, rows.Dv);
    rows.l[r] *= rescale;
    rows.m[r] = m_new;
  }
  rows.l[r] += exp_shifted_sum(s, m_new, n);
}

// Folds keys [j0, j0 + n) into every row's state where each row sees all of them (decode, and
// prefill rows past the block); key j0 is at slot slot0 and the block's slots are consecutive.
// The three passes run key by key across the rows: the rows are heads of consecutive kv heads,
// so each pass walks the block's cache rows in address order, where row by row it would take
// each head's 2 or 4 cache lines a whole cache row ([Hkv, D]) apart (16-bit MHA decode ran at a
// fifth of the bandwidth). The hardware prefetchers alone left a cold cache's rows arriving while
// the core waited (decode at 40–50 % of a core pair's read bandwidth), so the score pass asks for
// its keys kPrefetchKeys ahead and for the block's value rows, which the next pass reads; once
// per kv head, as the rows of one head read the same cache rows.
// Runs (rows.run, when some rows form them) of 4 rows over one kv head take each chunk of a key
// and of a value widened once for the 4 (dot_shared4x2, axpy_shared4). The two cases are
// compiled apart: where no run forms (MHA decode), no row checks for one.
template <bool Runs, class KT, class VT>
void attend_whole_block(RowBlock& rows, const KT* k, int64_t k_step, const VT* v, int64_t v_step, int64_t slots,
                        int64_t slot0, int64_t n) {
  const int64_t Dk = rows.Dk, Dv = rows.Dv;
  auto next_row = [&](int64_t r) { return Runs ? r + rows.run[r] : r + 1; };
  int64_t j = 0;
#ifdef DING_CPU_AVX2
  // Without runs (MHA decode), rows take 8 keys a step where the widths allow: q's chunk and the
  // accumulator cross the load/store ports once for 8 keys instead of 4.
  const bool eight = !Runs && Dk % 8 == 0 && Dv % 8 == 0;
  if (eight)
    for (; j + 8 <= n; j += 8)
      for (int64_t r = 0; r < rows.count; ++r) {
        if (r == 0 || rows.k_at[r] != rows.k_at[r - 1]) {
          if (slot0 + j + kPrefetchKeys + 8 <= slots) {
            prefetch4(k + rows.k_at[r] + (slot0 + j + kPrefetchKeys) * k_step, k_step, Dk);
            prefetch4(k + rows.k_at[r] + (slot0 + j + kPrefetchKeys + 4) * k_step, k_step, Dk);
          }
          prefetch4(v + rows.v_at[r] + (slot0 + j) * v_step, v_step, Dv);
          prefetch4(v + rows.v_at[r] + (slot0 + j + 4) * v_step, v_step, Dv);
        }
        dot8(rows.q + r * Dk, k + rows.k_at[r] + (slot0 + j) * k_step, k_step, Dk, rows.score + r * kKeyBlock + j);
      }
#endif
  for (; j + 4 <= n; j += 4)
    for (int64_t r = 0; r < rows.count; r = next_row(r)) {
      if (r == 0 || rows.k_at[r] != rows.k_at[r - 1]) {
        if (slot0 + j + kPrefetchKeys + 4 <= slots)
          prefetch4(k + rows.k_at[r] + (slot0 + j + kPrefetchKeys) * k_step, k_step, Dk);
        prefetch4(v + rows.v_at[r] + (slot0 + j) * v_step, v_step, Dv);
      }
      const KT* kj = k + rows.k_at[r] + (slot0 + j) * k_step;
      float* score = rows.score + r * kKeyBlock + j;
#ifdef DING_CPU_AVX2
      if (Runs && rows.run[r] == 4) {
        dot_shared4x2(rows.q + r * Dk, Dk, kj, k_step, Dk, score, kKeyBlock);
        dot_shared4x2(rows.q + r * Dk, Dk, kj + 2 * k_step, k_step, Dk, score + 2, kKeyBlock);
        continue;
      }
#endif
      dot4(rows.q + r * Dk, kj, k_step, Dk, score);
    }
  for (; j < n; ++j)
    for (int64_t r = 0; r < rows.count; ++r)
      rows.score[r * kKeyBlock + j] = dot(rows.q + r * Dk, k + rows.k_at[r] + (slot0 + j) * k_step, Dk);
  for (int64_t r = 0; r < rows.count; ++r) fold_scores(rows, r, n);
#ifdef DING_CPU_AVX2
  if constexpr (Runs)
    for (int64_t r = 0; r < rows.count; r += rows.run[r])
      if (rows.run[r] == 4)
        axpy_shared4(rows.acc + r * Dv, Dv, rows.score + r * kKeyBlock, kKeyBlock, v + rows.v_at[r] + slot0 * v_step,
                     v_step, n, Dv);
#endif
  auto single = [&](int64_t r) { return !Runs || rows.run[r] == 1; };
  j = 0;
#ifdef DING_CPU_AVX2
  if (eight)
    for (; j + 8 <= n; j += 8)
      for (int64_t r = 0; r < rows.count; ++r)
        axpy8(rows.acc + r * Dv, rows.score + r * kKeyBlock + j, v + rows.v_at[r] + (slot0 + j) * v_step, v_step, Dv);
#endif
  for (; j + 4 <= n; j += 4)
    for (int64_t r = 0; r < rows.count; ++r)
      if (single(r))
        axpy4(rows.acc + r * Dv, rows.score + r * kKeyBlock + j, v + rows.v_at[r] + (slot0 + j) * v_step, v_step, Dv);
  for (; j < n; ++j)
    for (int64_t r = 0; r < rows.count; ++r)
      if (single(r)) axpy(rows.acc + r * Dv, rows.score[r * kKeyBlock + j], v + rows.v_at[r] + (slot0 + j) * v_step, Dv);
}

// Folds keys [begin, end) (clipped to each row's visible range) into every row's state.
// k/v point at slot 0 of the kv head's cache of `slots` slots, key j at slot j mod slots (a rolling
// cache; j itself below `slots`); k_step/v_step are the element strides between slots. A block of
// keys never crosses a multiple of `slots`, so its rows stay consecutive in memory. Rows run inside
// a block of keys, so the block's K/V rows come from memory for the first row and from L1/L2 for
// the rest of the group.
template <class KT, class VT>
void attend_keys(RowBlock& rows, const KT* k, int64_t k_step, const VT* v, int64_t v_step, int64_t slots,
                 int64_t begin, int64_t end) {
  const int64_t Dk = rows.Dk, Dv = rows.Dv;
  // Runs: 4 consecutive rows over the same kv head (a GQA group's heads, MLA's heads, prefill
  // positions). Rows of one kv head are consecutive, so equal ends mean an equal run.
#ifdef DING_CPU_AVX2
  const bool share = Dk % 8 == 0 && Dv % 8 == 0;
#else
  const bool share = false;
#endif
  bool any_run = false;
  for (int64_t r = 0; r < rows.count;) {
    const bool run = share && r + 4 <= rows.count && rows.k_at[r + 3] == rows.k_at[r] && rows.v_at[r + 3] == rows.v_at[r];
    any_run |= run;
    rows.run[r] = run ? 4 : 1;
    for (int64_t i = 1; run && i < 4; ++i) rows.run[r + i] = 0;
    r += rows.run[r];
  }
  for (int64_t j0 = begin, j1; j0 < end; j0 = j1) {
    j1 = std::min({end, j0 + kKeyBlock, (j0 / slots + 1) * slots});
    const int64_t slot0 = j0 % slots;
    bool whole = true;
    for (int64_t r = 0; r < rows.count && whole; ++r) whole = rows.first[r] <= j0 && rows.keys[r] >= j1;
    if (whole) {
      if (any_run)
        attend_whole_block<true>(rows, k, k_step, v, v_step, slots, slot0, j1 - j0);
      else
        attend_whole_block<false>(rows, k, k_step, v, v_step, slots, slot0, j1 - j0);
      continue;
    }
    for (int64_t r = 0; r < rows.count; ++r) {
      // The keys [lo, lo + n) of this block that row r sees.
      const int64_t lo = std::max(j0, rows.first[r]), n = std::min(j1, rows.keys[r]) - lo;
      if (n <= 0) continue;
      const float* q = rows.q + r * Dk;
      float* s = rows.score + r * kKeyBlock;
      float* acc = rows.acc + r * Dv;
      const KT* kb = k + rows.k_at[r] + (slot0 + lo - j0) * k_step;
      const VT* vb = v + rows.v_at[r] + (slot0 + lo - j0) * v_step;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) dot4(q, kb + j * k_step, k_step, Dk, s + j);
      for (; j < n; ++j) s[j] = dot(q, kb + j * k_step, Dk);
      fold_scores(rows, r, n);
      for (j = 0; j + 4 <= n; j += 4) axpy4(acc, s + j, vb + j * v_step, v_step, Dv);
      for (; j < n; ++j) axpy(acc, s[j], vb + j * v_step, Dv);
    }
  }
}

// Where the keys and values of sequence b, slot j, kv head g sit: k + b·k_batch + j·k_slot +
// g·k_head (elements), v likewise; a rolling cache of `slots` slots holds key j at slot j mod slots.
struct KvLayout {
  int64_t slots = 0;
  int64_t k_batch = 0, k_slot = 0, k_head = 0;
  int64_t v_batch = 0, v_slot = 0, v_head = 0;
};

// Prefill attention of B sequences' Tq queries, the last Tq of Tk key positions, each of H heads
// over Hkv kv heads (head h reads kv head h / (H / Hkv)). causal: query i (key position
// i + Tk − Tq) sees the keys up to its own; window > 0 (with causal) narrows that to the last
// `window`. load_query(b, i, h, q) writes the query, pre-multiplied by the scale, into q[0, Dk);
// store_out(b, i, h, o) takes its output o[0, Dv), normalised (scratch it may overwrite).
//
// A task: the `group` heads of one kv head × `positions` consecutive queries, so a block of K/V
// rows is fetched from memory once and reused from cache by all of them.
template <class KT, class VT, class LoadQuery, class StoreOut>
void prefill_attention(const KT* k, const VT* v, const KvLayout& cache, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                       int64_t Hkv, int64_t Dk, int64_t Dv, bool causal, int64_t window, LoadQuery&& load_query,
                       StoreOut&& store_out) {
  const int64_t group = H / Hkv;
  const int64_t positions = std::max<int64_t>(1, kPrefillRows / group);
  const int64_t position_blocks = (Tq + positions - 1) / positions;
  const int64_t tasks = B * position_blocks * Hkv;
  // Round-robin (static, 1): causal tasks grow with the position block, so interleave them.
#pragma omp parallel for schedule(static, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t hk = t % Hkv, block = (t / Hkv) % position_blocks, b = t / (Hkv * position_blocks);
    const int64_t i0 = block * positions, i1 = std::min(Tq, i0 + positions);
    thread_local Scratch scratch;
    RowBlock rows = row_block(scratch, (i1 - i0) * group, Dk, Dv);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = (i - i0) * group + g;
        load_query(b, i, hk * group + g, rows.q + r * Dk);
        rows.first[r] = window > 0 ? std::max<int64_t>(0, i + (Tk - Tq) - window + 1) : 0;
        rows.keys[r] = causal ? i + (Tk - Tq) + 1 : Tk;
        rows.k_at[r] = rows.v_at[r] = 0;
      }
    reset_state(rows);
    // Keys from the first that the task's first row sees to the last that its last row sees.
    const int64_t kv_begin = rows.first[0], kv_end = causal ? i1 + (Tk - Tq) : Tk;
    attend_keys(rows, k + b * cache.k_batch + hk * cache.k_head, cache.k_slot, v + b * cache.v_batch + hk * cache.v_head,
                cache.v_slot, cache.slots, kv_begin, kv_end);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = (i - i0) * group + g;
        float* o = rows.acc + r * Dv;
        scale_in_place(o, 1.0f / rows.l[r], Dv);
        store_out(b, i, hk * group + g, o);
      }
  }
}

// Decode attention of B sequences' H query heads over Hkv kv heads (head h reads kv head
// h / (H / Hkv)); sequence b sees keys [max(0, seq_lens[b] − window), seq_lens[b]) (window 0: all).
// load_query(b, h, q) writes head h's query, pre-multiplied by the scale, into q[0, Dk);
// store_out(b, h, o) takes its output o[0, Dv), normalised (o is scratch it may overwrite).
//
// Tasks: (b, split, a run of kv heads); rows = the query heads of those kv heads. Putting many
// heads in one task makes a block of keys read whole [Hkv, D] cache rows, contiguous memory,
// instead of one head's D-slice a cache row apart. The runs only shape the work: a row's result
// depends on the split boundaries alone, which are fixed, so threads never change the output.
// Split s covers keys [first + 64·s, first + 64·(s + 1)) of sequence b's visible keys
// [first, seq_len): the splits span the longest sequence's visible keys (the lengths are on the
// host), and those past a shorter sequence's end stay empty. Sized by the cache instead, a short
// context's few busy splits would all land on the first thread. The splits' partial (m, l, acc)
// are combined afterwards (flash-decoding), so batch 1 still fills every core.
template <class KT, class VT, class LoadQuery, class StoreOut>
void decode_attention(const KT* k, const VT* v, const KvLayout& cache, int64_t B, int64_t H, int64_t Hkv,
                      int64_t Dk, int64_t Dv, const int32_t* seq_lens, int64_t window, LoadQuery&& load_query,
                      StoreOut&& store_out) {
  const int64_t group = H / Hkv;
  auto first_key = [&](int64_t b) { return window > 0 ? std::max<int64_t>(0, seq_lens[b] - window) : int64_t(0); };
  int64_t span = 1;
  for (int64_t b = 0; b < B; ++b) span = std::max<int64_t>(span, seq_lens[b] - first_key(b));
  const int64_t splits = (span + kKeysPerSplit - 1) / kKeysPerSplit;
#ifdef _OPENMP
  const int64_t threads = omp_get_max_threads();
#else
  const int64_t threads = 1;
#endif
  const int64_t head_runs = std::clamp<int64_t>((4 * threads + B * splits - 1) / (B * splits), 1, Hkv);
  const int64_t kv_per_run = (Hkv + head_runs - 1) / head_runs;
  const int64_t tasks = B * splits * head_runs;
  // Partial states [B, splits, H]: m, l and acc [.., Dv]. A split past a sequence's end stays empty (l = 0).
  const int64_t states = B * splits * H;
  thread_local std::vector<float> partial;  // grown once, then reused every step
  partial.resize(size_t(states * (Dv + 2)));
  float* const part_m = partial.data();
  float* const part_l = part_m + states;
  float* const part_acc = part_l + states;

  // Task t: sequence b, split, and the run of kv heads [hk0, hk1) (empty past Hkv); keys [begin, end).
  struct Task {
    int64_t b, split, hk0, hk1, begin, end;
  };
  auto task_of = [&](int64_t t) {
    const int64_t run = t % head_runs, split = (t / head_runs) % splits, b = t / (head_runs * splits);
    const int64_t hk0 = run * kv_per_run, begin = first_key(b) + split * kKeysPerSplit;
    return Task{b, split, hk0, std::min(Hkv, hk0 + kv_per_run), begin, std::min<int64_t>(seq_lens[b], begin + kKeysPerSplit)};
  };
  // Each thread takes one contiguous run of tasks holding an equal share of the cache rows to
  // read (kv heads × keys; a split past a shorter sequence's end holds none). The task order is
  // the cache's, so a thread streams its share of it in address order; taken round-robin, each
  // thread read every other split, or half of every cache row where the heads form two runs, and
  // gpt2-xl's 25 heads over 256–512 keys now take 18–28 % less time (docs/PERFORMANCE.md). Task t goes
  // to the thread whose share holds the middle of its work.
  thread_local std::vector<int64_t> work_before;  // work_before[t]: the work of tasks [0, t)
  work_before.assign(size_t(tasks + 1), 0);
  for (int64_t t = 0; t < tasks; ++t) {
    const Task task = task_of(t);
    const int64_t rows = std::max<int64_t>(0, task.hk1 - task.hk0) * std::max<int64_t>(0, task.end - task.begin);
    work_before[size_t(t + 1)] = work_before[size_t(t)] + rows;
  }
  // Through a pointer: inside the parallel region the name would be each thread's own (empty) vector.
  const int64_t* const work = work_before.data();
  const int64_t total_work = std::max<int64_t>(1, work[tasks]);
  auto owner = [&](int64_t t, int64_t team) { return std::min(team - 1, (work[t] + work[t + 1]) * team / (2 * total_work)); };

  auto run_task = [&](const Task& task) {
    const auto [b, split, hk0, hk1, begin, end] = task;
    if (hk0 >= hk1) return;
    const int64_t h0 = hk0 * group, first_state = (b * splits + split) * H + h0;
    // The running state lives in this thread's scratch and is published to `partial` once at
    // the end: updating the shared arrays per key block made threads fight over cache lines
    // (two threads ran 3× slower than one).
    thread_local Scratch scratch;
    RowBlock rows = row_block(scratch, (hk1 - hk0) * group, Dk, Dv);
    reset_state(rows);
    auto publish = [&] {
      std::copy_n(rows.m, rows.count, part_m + first_state);
      std::copy_n(rows.l, rows.count, part_l + first_state);
      std::copy_n(rows.acc, rows.count * Dv, part_acc + first_state * Dv);
    };
    if (begin >= end) {
      publish();
      return;
    }
    for (int64_t r = 0; r < rows.count; ++r) {
      const int64_t h = h0 + r;
      load_query(b, h, rows.q + r * Dk);
      rows.first[r] = begin;
      rows.keys[r] = end;
      rows.k_at[r] = (h / group) * cache.k_head;
      rows.v_at[r] = (h / group) * cache.v_head;
    }
    attend_keys(rows, k + b * cache.k_batch, cache.k_slot, v + b * cache.v_batch, cache.v_slot, cache.slots, begin, end);
    publish();
  };
#pragma omp parallel
  {
#ifdef _OPENMP
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
#else
    const int64_t team = 1, me = 0;
#endif
    for (int64_t t = 0; t < tasks; ++t)
      if (owner(t, team) == me) run_task(task_of(t));
  }

  // Combine the splits of each (b, h): o = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s, M = max_s m_s.
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    auto state_of = [&](int64_t split) { return (b * splits + split) * H + h; };
    float M = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < splits; ++s)
      if (part_l[state_of(s)] > 0) M = std::max(M, part_m[state_of(s)]);
    thread_local std::vector<float> o;
    o.assign(size_t(Dv), 0.0f);
    float L = 0;
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t state = state_of(s);
      if (part_l[state] == 0) continue;
      const float w = std::exp(part_m[state] - M);
      L += w * part_l[state];
      axpy(o.data(), w, part_acc + state * Dv, Dv);
    }
    scale_in_place(o.data(), 1.0f / L, Dv);
    store_out(b, h, o.data());
  }
}

}  // namespace ding::cpu
