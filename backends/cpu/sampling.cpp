// CPU sampling: one row per OpenMP iteration. argmax is one vector pass; top_k keeps a k-heap
// behind a vector threshold test, O(V + k log k · log(V/k)) for random logits; sample never
// sorts the vocabulary: it gathers candidates band by band and finds each cut with a quickselect
// weighted by probability (see sample_row), sorting only the last few dozen tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels.h"
#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

struct Candidate {
  float value;
  int32_t index;
};

// The one order of ops/sampling.h: larger value first, ties by lower index.
constexpr auto precedes = [](const auto& a, const auto& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
};


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

// A candidate of sample: a token and its probability p = exp(z − z_max) / Σ.
struct Weighted {
  float value;
  int32_t index;
  double p;
};

// Appends every token with lower ≤ value < upper (unordered): one band of the order.
template <class Elem>
void gather_band(const Elem* x, int64_t V, float lower, float upper, std::vector<Weighted>& out) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  const __m256 lo = _mm256_set1_ps(lower), hi = _mm256_set1_ps(upper);
  for (; i + 8 <= V; i += 8) {
    const __m256 v = load8(x + i);
    int mask = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ), _mm256_cmp_ps(v, hi, _CMP_LT_OQ)));
    if (mask == 0) continue;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, v);
    for (; mask != 0; mask &= mask - 1) {
      const int l = __builtin_ctz(unsigned(mask));
      out.push_back({lanes[l], int32_t(i + l), 0.0});
    }
  }
#endif
  for (; i < V; ++i)
    if (widen(x[i]) >= lower && widen(x[i]) < upper) out.push_back({widen(x[i]), int32_t(i), 0.0});
}

// Σ_v exp(x_v / temperature − z_max): the softmax denominator over the whole row, each term
// formed as the reference forms it, in double (a draw lands within the difference of two sums
// of a boundary with probability ~that difference: f32 exps, ~1e-7, moved ~1 row in 10⁵).
template <class Elem>
double total_weight(const Elem* x, int64_t V, double z_max, float temperature) {
  const double t = temperature;
  double total = 0;
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  __m256d sum_lo = _mm256_setzero_pd(), sum_hi = _mm256_setzero_pd();
  // x·(1/t) instead of x/t: ~1e-16 apart, like the summation order, and no division per lane.
  const __m256d inv_t4 = _mm256_set1_pd(1.0 / t), z_max4 = _mm256_set1_pd(z_max);
  auto weight = [&](__m128 v) { return exp4d(_mm256_fmsub_pd(_mm256_cvtps_pd(v), inv_t4, z_max4)); };
  for (; i + 8 <= V; i += 8) {
    const __m256 v = load8(x + i);
    sum_lo = _mm256_add_pd(sum_lo, weight(_mm256_castps256_ps128(v)));
    sum_hi = _mm256_add_pd(sum_hi, weight(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(sum_lo, sum_hi));
  total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
  for (; i < V; ++i) total += std::exp(double(widen(x[i])) / t - z_max);
  return total;
}

// The first token, in order, at which the running Σp over [first, last) passes `target`
// (≥ when inclusive, else >), or `last` if the total does not. A quickselect weighted by p: the
// mass of the tokens before a pivot is a plain sum, so only the final small range is sorted,
// O(m) expected instead of O(m log m). On return every token left of the result precedes it.
Weighted* first_passing(Weighted* first, Weighted* last, double target, bool inclusive) {
  auto passes = [&](double cumulative) { return inclusive ? cumulative >= target : cumulative > target; };
  double before = 0;
  while (last - first > 32) {
    Weighted a = *first, b = first[(last - first) / 2], c = last[-1];
    if (precedes(b, a)) std::swap(a, b);
    if (precedes(c, b)) b = precedes(c, a) ? a : c;  // b = the median of three, in order
    const Weighted pivot = b;
    Weighted* split = std::partition(first, last, [&](const Weighted& w) { return precedes(w, pivot); });
    double mass = 0;
    for (const Weighted* w = first; w != split; ++w) mass += w->p;
    if (passes(before + mass)) {
      last = split;
      continue;
    }
    before += mass;
    std::iter_swap(split, std::find_if(split, last, [&](const Weighted& w) { return w.index == pivot.index; }));
    before += split->p;
    if (passes(before)) return split;
    first = split + 1;
  }
  std::sort(first, last, precedes);
  for (; first != last; ++first)
    if (passes(before += first->p)) return first;
  return last;
}

// One row of sample over candidates = the first m tokens of the order, in any arrangement, with
// p set from the support's softmax denominator (the top_k's, or all V's). Returns the chosen
// token, or −1 when the kept set may reach past the candidates. Decisions mirror the reference;
// only the summation order differs (~1e-16 relative).
int64_t choose(std::vector<Weighted>& candidates, bool whole_support, double p_max, const ops::SampleParams& params,
               float u) {
  Weighted* begin = candidates.data();
  Weighted* end = begin + candidates.size();
  Weighted* kept_end = end;
  bool kept_is_known = whole_support;
  if (params.top_p < 1) {
    if (Weighted* cut = first_passing(begin, end, params.top_p, true); cut != end) kept_end = cut + 1, kept_is_known = true;
  }
  if (params.min_p > 0) {
    const double bound = params.min_p * p_max;
    Weighted* kept = std::partition(begin, kept_end, [&](const Weighted& w) { return w.p >= bound; });
    // p falls along the order, so once one candidate fails, every token past the candidates fails too.
    if (kept != kept_end) kept_is_known = true;
    kept_end = kept;
  }
  double kept_sum = 0;
  if (kept_is_known) {
    for (const Weighted* w = begin; w != kept_end; ++w) kept_sum += w->p;
  } else if (params.top_p >= 1 && params.min_p <= 0) {
    kept_sum = 1;  // nothing filtered: the kept set is the whole support
  } else {
    return -1;
  }
  if (Weighted* chosen = first_passing(begin, kept_end, double(u) * kept_sum, false); chosen != kept_end) return chosen->index;
  if (!kept_is_known) return -1;
  return std::max_element(begin, kept_end, precedes)->index;  // none passed (rounding): the last kept
}

// With top_k set, the support is its k tokens: select them, done. Without, the kept set is a
// prefix of the order that the filters end: candidates grow band by band, z ≥ z_max − δ for
// δ = 4, 8, 12, 16, 24, 32, then everything, until `choose` can decide, so no row is ever fully
// sorted and a peaked row touches a few tokens past the gathering passes.
template <class Elem>
int64_t sample_row(const Elem* x, int64_t V, const ops::SampleParams& params, float u,
                   std::vector<Candidate>& top, std::vector<Weighted>& candidates) {
  if (params.temperature == 0) return row_argmax(x, V);
  const int64_t support = params.top_k > 0 ? std::min<int64_t>(params.top_k, V) : V;
  candidates.clear();
  if (support < V) {
    select_top_k(x, V, support, top);
    const double z_max = double(top[0].value) / params.temperature;
    double sum = 0;  // in order, as the reference sums
    for (const Candidate& c : top) {
      candidates.push_back({c.value, c.index, std::exp(double(c.value) / params.temperature - z_max)});
      sum += candidates.back().p;
    }
    for (Weighted& w : candidates) w.p /= sum;
    return choose(candidates, true, 1.0 / sum, params, u);
  }
  const float x_max = widen(x[row_argmax(x, V)]);
  const double z_max = double(x_max) / params.temperature;
  const double sum = total_weight(x, V, z_max, params.temperature);
  float upper = std::numeric_limits<float>::infinity();
  for (float delta : {4.0f, 8.0f, 12.0f, 16.0f, 24.0f, 32.0f, std::numeric_limits<float>::infinity()}) {
    const float lower = x_max - delta * params.temperature;
    const size_t old_size = candidates.size();
    gather_band(x, V, lower, upper, candidates);
    upper = lower;
    for (size_t i = old_size; i < candidates.size(); ++i)
      candidates[i].p = std::exp(double(candidates[i].value) / params.temperature - z_max) / sum;
    const bool whole = int64_t(candidates.size()) == V;
    if (const int64_t chosen = choose(candidates, whole, 1.0 / sum, params, u); chosen >= 0 || whole) return chosen;
  }
  return -1;  // unreachable: the last band holds every remaining token
}

template <class F>
void for_each_row(const Tensor& logits, F&& row_fn) {
  const int64_t B = logits.dim(0), V = logits.dim(1);
  with_float_type(logits.dtype, logits.data, [&](auto* base) {
    // One row (decode at batch 1) stays on the calling thread: waking a team costs more than
    // the row's ~10 µs and gains nothing.
#pragma omp parallel for schedule(static) if (B > 1)
    for (int64_t b = 0; b < B; ++b) row_fn(b, base + b * V, V);
  });
}

}  // namespace

void argmax(Stream&, const ops::ArgmaxArgs& a) {
  int32_t* out = a.out.ptr<int32_t>();
  for_each_row(a.logits, [&](int64_t b, const auto* x, int64_t V) { out[b] = int32_t(row_argmax(x, V)); });
}

void count_nonfinite(Stream&, const ops::CountNonfiniteArgs& a) {
  int32_t* out = a.out.ptr<int32_t>();
  for_each_row(a.x, [&](int64_t b, const auto* x, int64_t N) {
    int32_t count = 0;
    for (int64_t i = 0; i < N; ++i) count += std::isfinite(widen(x[i])) ? 0 : 1;
    out[b] = count;
  });
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
    thread_local std::vector<Candidate> top;  // scratch that grows once per thread
    thread_local std::vector<Weighted> candidates;
    out[b] = int32_t(sample_row(x, V, a.params, uniforms[b], top, candidates));
  });
}

}  // namespace ding::cpu
