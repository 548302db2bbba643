// Reference sampling primitives: plain loops in double, a full sort per row.
// The sampler is the composition HF transformers' generate() applies as logits processors
// (TemperatureLogitsWarper → TopKLogitsWarper → TopPLogitsWarper → MinPLogitsWarper, then a
// draw from the categorical), made a pure function of the caller's uniform u as in gpt-fast.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "reference.h"

namespace ding::reference {

namespace {

std::vector<double> load_row(const Tensor& logits, int64_t b) {
  std::vector<double> x(size_t(logits.dim(1)));
  for (int64_t v = 0; v < logits.dim(1); ++v) x[v] = load(logits, offset(logits, {b, v}));
  return x;
}

// Token ids by value descending, ties by lower id first: the one order every backend uses.
std::vector<int64_t> descending_order(const std::vector<double>& x) {
  std::vector<int64_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return x[i] > x[j] || (x[i] == x[j] && i < j); });
  return order;
}

int64_t argmax_of(const std::vector<double>& x) {
  int64_t best = 0;
  for (int64_t v = 1; v < int64_t(x.size()); ++v)
    if (x[v] > x[best]) best = v;  // strict: the first of equal maxima wins
  return best;
}

}  // namespace

void argmax(Stream&, const ops::ArgmaxArgs& a) {
  for (int64_t b = 0; b < a.logits.dim(0); ++b)
    store(a.out, offset(a.out, {b}), double(argmax_of(load_row(a.logits, b))));
}

void count_nonfinite(Stream&, const ops::CountNonfiniteArgs& a) {
  for (int64_t b = 0; b < a.x.dim(0); ++b) {
    int64_t count = 0;
    for (double v : load_row(a.x, b)) count += std::isfinite(v) ? 0 : 1;
    store(a.out, offset(a.out, {b}), double(count));
  }
}

void top_k(Stream&, const ops::TopKArgs& a) {
  const int64_t k = a.values.dim(1);
  for (int64_t b = 0; b < a.logits.dim(0); ++b) {
    const std::vector<double> x = load_row(a.logits, b);
    const std::vector<int64_t> order = descending_order(x);
    for (int64_t j = 0; j < k; ++j) {
      store(a.values, offset(a.values, {b, j}), x[order[j]]);
      store(a.indices, offset(a.indices, {b, j}), double(order[j]));
    }
  }
}

// Per row, with z = logits / temperature in descending order z_(0) ≥ z_(1) ≥ …:
//   n = V, or top_k if 0 < top_k < V
//   p_i = exp(z_(i) − z_(0)) / Σ_{i<n} exp(z_(i) − z_(0))
//   top_p < 1: n = the least m with Σ_{i<m} p_i ≥ top_p
//   min_p > 0: n = the number of i < n with p_i ≥ min_p · p_0 (a prefix, p being descending)
//   token = order[the least i < n with Σ_{i'≤i} p_i' > u · Σ_{i<n} p_i], or order[n − 1] if none.
void sample(Stream&, const ops::SampleArgs& a) {
  const ops::SampleParams& params = a.params;
  const int64_t V = a.logits.dim(1);
  for (int64_t b = 0; b < a.logits.dim(0); ++b) {
    const std::vector<double> x = load_row(a.logits, b);
    if (params.temperature == 0) {
      store(a.out, offset(a.out, {b}), double(argmax_of(x)));
      continue;
    }
    const std::vector<int64_t> order = descending_order(x);
    int64_t n = params.top_k > 0 ? std::min<int64_t>(params.top_k, V) : V;
    const double z_max = x[order[0]] / params.temperature;
    std::vector<double> p(static_cast<size_t>(n));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += p[i] = std::exp(x[order[i]] / params.temperature - z_max);
    for (double& pi : p) pi /= sum;
    if (params.top_p < 1) {
      double cumulative = 0;
      for (int64_t i = 0; i < n; ++i) {
        cumulative += p[i];
        if (cumulative >= params.top_p) {
          n = i + 1;
          break;
        }
      }
    }
    if (params.min_p > 0) {
      int64_t kept = 1;
      while (kept < n && p[kept] >= params.min_p * p[0]) ++kept;
      n = kept;
    }
    double kept_sum = 0;
    for (int64_t i = 0; i < n; ++i) kept_sum += p[i];
    const double target = double(load(a.uniforms, offset(a.uniforms, {b}))) * kept_sum;
    int64_t chosen = n - 1;
    double cumulative = 0;
    for (int64_t i = 0; i < n; ++i) {
      cumulative += p[i];
      if (cumulative > target) {
        chosen = i;
        break;
      }
    }
    store(a.out, offset(a.out, {b}), double(order[chosen]));
  }
}

}  // namespace ding::reference
