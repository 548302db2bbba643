// CPU sampling: one row per OpenMP iteration. argmax is one vector pass; top_k keeps a k-heap
// behind a vector threshold test, O(V + k log k · log(V/k)) for random logits; sample never
// sorts more of the vocabulary than its filters can reach (see sample_row).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels.h"
#include "simd.h"

namespace ding::cpu {

namespace {

struct Candidate {
  float value;
  int32_t index;
};

// The one order of ops/sampling.h: larger value first, ties by lower index.
inline bool precedes(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

inline float widen(float v) { return v; }
inline float widen(f16 v) { return f16_to_f32(v); }
inline float widen(bf16 v) { return bf16_to_f32(v); }

#ifdef DING_CPU_AVX2
// e^x for x ≤ 0 (Cephes expf: x = n·ln2 + r, |r| ≤ ln2/2, degree-6 polynomial; ~2 ulp).
inline __m256 exp8_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));  // keeps 2^n a normal float
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split in two for an exact n·ln2_hi
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(two_n));
}
#endif

// The first index of the row's maximum.
template <class Elem>
int64_t row_argmax(const Elem* x, int64_t V) {
  float best = widen(x[0]);
  int64_t best_index = 0, i = 1;
#ifdef DING_CPU_AVX2
  if (V >= 16) {
    // Each lane keeps the first maximum of its own column (strict >), so the lowest index
    // among lanes holding the maximum is the row's first maximum.
    __m256 lane_best = load8(x);
    __m256i lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), index = lane_index;
    const __m256i step = _mm256_set1_epi32(8);
    for (i = 8; i + 8 <= V; i += 8) {
      index = _mm256_add_epi32(index, step);
      const __m256 v = load8(x + i);
      const __m256 better = _mm256_cmp_ps(v, lane_best, _CMP_GT_OQ);
      lane_best = _mm256_blendv_ps(lane_best, v, better);
      lane_index = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(lane_index), _mm256_castsi256_ps(index), better));
    }
    alignas(32) float values[8];
    alignas(32) int32_t indices[8];
    _mm256_store_ps(values, lane_best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(indices), lane_index);
    best = values[0];
    best_index = indices[0];
    for (int l = 1; l < 8; ++l)
      if (values[l] > best || (values[l] == best && indices[l] < best_index)) best = values[l], best_index = indices[l];
  }
#endif
  for (; i < V; ++i)
    if (widen(x[i]) > best) best = widen(x[i]), best_index = i;
  return best_index;
}

// The k first tokens of the order, best first, into `out` (k ≤ V). A heap keyed by `precedes`
// holds the k best so far with the worst on top; a later token can only displace it with a
// strictly larger value (it loses ties by index), which the vector pre-test checks 8 at a time.
template <class Elem>
void select_top_k(const Elem* x, int64_t V, int64_t k, std::vector<Candidate>& out) {
  out.clear();
  for (int64_t i = 0; i < k; ++i) out.push_back({widen(x[i]), int32_t(i)});
  std::make_heap(out.begin(), out.end(), precedes);
  float worst = out.front().value;
  auto offer = [&](int64_t i, float v) {
    if (!(v > worst)) return;
    std::pop_heap(out.begin(), out.end(), precedes);
    out.back() = {v, int32_t(i)};
    std::push_heap(out.begin(), out.end(), precedes);
    worst = out.front().value;
  };
  int64_t i = k;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= V; i += 8) {
    const __m256 v = load8(x + i);
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(worst), _CMP_GT_OQ));
    if (mask == 0) continue;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (; mask != 0; mask &= mask - 1) {
      const int l = __builtin_ctz(unsigned(mask));
      offer(i + l, lanes[l]);
    }
  }
#endif
  for (; i < V; ++i) offer(i, widen(x[i]));
  std::sort_heap(out.begin(), out.end(), precedes);
}

// Every token with value ≥ threshold, in order: a prefix of the full order.
template <class Elem>
void gather_at_least(const Elem* x, int64_t V, float threshold, std::vector<Candidate>& out) {
  out.clear();
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= V; i += 8) {
    const __m256 v = load8(x + i);
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(threshold), _CMP_GE_OQ));
    if (mask == 0) continue;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (; mask != 0; mask &= mask - 1) {
      const int l = __builtin_ctz(unsigned(mask));
      out.push_back({lanes[l], int32_t(i + l)});
    }
  }
#endif
  for (; i < V; ++i)
    if (widen(x[i]) >= threshold) out.push_back({widen(x[i]), int32_t(i)});
  std::sort(out.begin(), out.end(), precedes);
}

// Σ_v exp((x_v − x_max) / temperature): the softmax denominator over the whole row. f32 exps
// (relative error ~1e-7), summed in double; the only approximate quantity in sample_row.
template <class Elem>
double total_weight(const Elem* x, int64_t V, float x_max, float temperature) {
  const float inv_t = 1.0f / temperature;
  double total = 0;
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  const __m256 max8 = _mm256_set1_ps(x_max), inv_t8 = _mm256_set1_ps(inv_t);
  for (; i + 8 <= V; i += 8) {
    const __m256 w = exp8_nonpositive(_mm256_mul_ps(_mm256_sub_ps(load8(x + i), max8), inv_t8));
    sum_lo = _mm256_add_pd(sum_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
    sum_hi = _mm256_add_pd(sum_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum_lo, sum_hi));
  total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; i < V; ++i) total += std::exp(double(widen(x[i]) - x_max) * inv_t);
  return total;
}

// One row of sample, given candidates = a prefix of the order (length m), and the softmax
// denominator over the support (the top_k, or all V). Returns the chosen index, or −1 when the
// answer may lie past the candidates and a longer prefix is needed. The arithmetic mirrors the
// reference (double, same operation order) so only `support_weight` can differ from it.
int64_t choose(const std::vector<Candidate>& candidates, bool whole_support, double support_weight,
               const ops::SampleParams& params, float u, std::vector<double>& p) {
  const int64_t m = int64_t(candidates.size());
  const double z_max = double(candidates[0].value) / params.temperature;
  p.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) p[i] = std::exp(double(candidates[i].value) / params.temperature - z_max) / support_weight;
  int64_t n = m;
  bool n_is_final = whole_support;
  if (params.top_p < 1) {
    double cumulative = 0;
    for (int64_t i = 0; i < m; ++i) {
      cumulative += p[i];
      if (cumulative >= params.top_p) {
        n = i + 1, n_is_final = true;
        break;
      }
    }
  }
  if (params.min_p > 0) {
    int64_t kept = 1;
    while (kept < n && p[kept] >= params.min_p * p[0]) ++kept;
    if (kept < m) n_is_final = true;  // a token failed the bound, so every later one does too
    n = kept;
  }
  double kept_sum;
  if (n_is_final) {
    kept_sum = 0;
    for (int64_t i = 0; i < n; ++i) kept_sum += p[i];
  } else if (params.top_p >= 1 && params.min_p <= 0) {
    kept_sum = 1;  // no filter: the kept set is the whole support, Σp = 1
  } else {
    return -1;
  }
  const double target = double(u) * kept_sum;
  double cumulative = 0;
  for (int64_t i = 0; i < n; ++i) {
    cumulative += p[i];
    if (cumulative > target) return candidates[i].index;
  }
  return n_is_final ? candidates[n - 1].index : -1;
}

// With top_k set, the support is its k tokens: select them, done. Without, the kept set is a
// prefix of the order that the filters end; candidates are gathered by a falling threshold
// z ≥ z_max − δ (δ = 4, 8, 12, 16, 24, 32, then everything) until `choose` can decide, so a
// peaked row sorts a few tokens and only a flat row with a far-tail draw sorts all V.
template <class Elem>
int64_t sample_row(const Elem* x, int64_t V, const ops::SampleParams& params, float u,
                   std::vector<Candidate>& candidates, std::vector<double>& p) {
  if (params.temperature == 0) return row_argmax(x, V);
  const int64_t support = params.top_k > 0 ? std::min<int64_t>(params.top_k, V) : V;
  if (support < V) {
    select_top_k(x, V, support, candidates);
    const double z_max = double(candidates[0].value) / params.temperature;
    double weight = 0;
    for (const Candidate& c : candidates) weight += std::exp(double(c.value) / params.temperature - z_max);
    return choose(candidates, true, weight, params, u, p);
  }
  const float x_max = widen(x[row_argmax(x, V)]);
  const double weight = total_weight(x, V, x_max, params.temperature);
  for (float delta : {4.0f, 8.0f, 12.0f, 16.0f, 24.0f, 32.0f}) {
    gather_at_least(x, V, x_max - delta * params.temperature, candidates);
    if (int64_t(candidates.size()) == V) break;
    if (const int64_t chosen = choose(candidates, false, weight, params, u, p); chosen >= 0) return chosen;
  }
  if (int64_t(candidates.size()) != V) gather_at_least(x, V, -std::numeric_limits<float>::infinity(), candidates);
  return choose(candidates, true, weight, params, u, p);
}

template <class F>
void for_each_row(const Tensor& logits, F&& row_fn) {
  const int64_t B = logits.dim(0), V = logits.dim(1);
  with_float_type(logits.dtype, logits.data, [&](auto* base) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) row_fn(b, base + b * V, V);
  });
}

}  // namespace

void argmax(Stream&, const ops::ArgmaxArgs& a) {
  int32_t* out = a.out.ptr<int32_t>();
  for_each_row(a.logits, [&](int64_t b, const auto* x, int64_t V) { out[b] = int32_t(row_argmax(x, V)); });
}

void top_k(Stream&, const ops::TopKArgs& a) {
  const int64_t k = a.values.dim(1);
  float* values = a.values.ptr<float>();
  int32_t* indices = a.indices.ptr<int32_t>();
  for_each_row(a.logits, [&](int64_t b, const auto* x, int64_t V) {
    thread_local std::vector<Candidate> best;  // grows to k once per thread
    select_top_k(x, V, k, best);
    for (int64_t j = 0; j < k; ++j) values[b * k + j] = best[j].value, indices[b * k + j] = best[j].index;
  });
}

void sample(Stream&, const ops::SampleArgs& a) {
  int32_t* out = a.out.ptr<int32_t>();
  const float* uniforms = a.uniforms.ptr<float>();
  for_each_row(a.logits, [&](int64_t b, const auto* x, int64_t V) {
    thread_local std::vector<Candidate> candidates;  // scratch that grows once per thread
    thread_local std::vector<double> p;
    out[b] = int32_t(sample_row(x, V, a.params, uniforms[b], candidates, p));
  });
}

}  // namespace ding::cpu
