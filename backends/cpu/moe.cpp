// CPU MoE routing: tokens in parallel for route and combine; the counting sort of moe_group is
// one serial O(T·k + E) pass (a few µs at decode and prefill sizes), its row gather parallel.
// moe_matmul runs each expert that owns rows as one product of the matmul cores (gemm.h), which
// parallelise over output columns, so each expert's weights are streamed once.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ding/error.h"
#include "gemm.h"
#include "kernels.h"
#include "simd.h"

namespace ding::cpu {

namespace {

// The k largest of v[0, n) that `eligible` admits, best first, with their indices: insertion into
// the sorted k best, where strict > keeps the lower index first among equal values.
template <class Eligible>
void select_top(const float* v, int64_t n, int64_t k, float* best, int32_t* chosen, Eligible eligible) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!eligible(i)) continue;
    const float x = v[i];
    if (count == k && !(x > best[k - 1])) continue;
    int64_t j = count < k ? count++ : k - 1;
    for (; j > 0 && x > best[j - 1]; --j) best[j] = best[j - 1], chosen[j] = chosen[j - 1];
    best[j] = x, chosen[j] = int32_t(i);
  }
}

}  // namespace

void moe_route(Stream& stream, const ops::MoeRouteArgs& a) {
  if (ops::has_parts(a)) return ops::moe_route_in_parts(stream, a, {layer_norm, rms_norm, matmul, moe_route, moe_group});
  const int64_t T = a.logits.dim(0), E = a.logits.dim(1), k = a.params.k;
  const ops::MoeRouteParams params = a.params;
  const int64_t groups = params.groups, group_size = E / groups;
  float* weights = a.weights.ptr<float>();
  int32_t* experts = a.experts.ptr<int32_t>();
  const void* logits = a.logits.data;
  const DType dtype = a.logits.dtype;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    thread_local std::vector<float> logit, best;              // [E], [k]: grow once per thread
    thread_local std::vector<float> group_best, kept_best;    // [groups], [top_groups]
    thread_local std::vector<int32_t> kept_groups;            // [top_groups]
    thread_local std::vector<char> kept;                      // [groups]
    logit.resize(size_t(E));
    best.resize(size_t(k));
    load_row(logit.data(), static_cast<const char*>(logits) + t * E * int64_t(dtype_size(dtype)), dtype, E);
    // Group-limited routing: a group's score is its best expert's, and only the experts of the
    // top_groups best groups are candidates. Scores are increasing in the logit, so ranking
    // logits ranks scores, for groups as for experts.
    if (groups > 1) {
      group_best.resize(size_t(groups));
      kept_best.resize(size_t(params.top_groups));
      kept_groups.resize(size_t(params.top_groups));
      kept.assign(size_t(groups), 0);
      for (int64_t g = 0; g < groups; ++g) {
        float m = logit[g * group_size];
        for (int64_t e = g * group_size + 1; e < (g + 1) * group_size; ++e) m = logit[e] > m ? logit[e] : m;
        group_best[g] = m;
      }
      select_top(group_best.data(), groups, params.top_groups, kept_best.data(), kept_groups.data(),
                 [](int64_t) { return true; });
      for (int32_t g : kept_groups) kept[size_t(g)] = 1;
    }
    int32_t* chosen = experts + t * k;
    select_top(logit.data(), E, k, best.data(), chosen,
               [&](int64_t e) { return groups == 1 || kept[size_t(e / group_size)]; });
    // Per-weight exps in f32 (≤ 1 ulp each); the sums in double, as E-term f32 sums of equal
    // scores (tied logits) would otherwise drift by ~√E ulp.
    float* w = weights + t * k;
    double chosen_sum = 0;
    if (params.scoring == ops::MoeScoring::softmax) {
      // exp(logit − max) with max = best[0] (with groups too: the best group holds the best
      // expert); the full denominator is needed only without renormalisation (with it, it cancels).
      for (int64_t j = 0; j < k; ++j) chosen_sum += w[j] = std::exp(best[j] - best[0]);
      double denominator = chosen_sum;
      if (!params.renormalize) {
        denominator = 0;
        for (int64_t e = 0; e < E; ++e) denominator += std::exp(logit[e] - best[0]);
      }
      const double scale = params.routed_scaling / denominator;
      for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] * scale);
    } else {
      for (int64_t j = 0; j < k; ++j) chosen_sum += w[j] = 1.0f / (1.0f + std::exp(-best[j]));
      const double scale = params.renormalize ? params.routed_scaling / chosen_sum : params.routed_scaling;
      for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] * scale);
    }
  }
}

void moe_group(Stream&, const ops::MoeGroupArgs& a) {
  const int64_t k = a.experts.dim(1), S = a.experts.dim(0) * k, E = a.offsets.dim(0) - 1;
  const int32_t* expert = a.experts.ptr<int32_t>();
  int32_t* offsets = a.offsets.ptr<int32_t>();
  int32_t* slots = a.slots.ptr<int32_t>();
  int32_t* positions = a.positions.ptr<int32_t>();
  // Counting sort, stable in the slot index. Counts go in offsets[e + 1] so the prefix sum
  // turns them into offsets in place; every id is checked before anything is written.
  for (int64_t s = 0; s < S; ++s)
    if (expert[s] < 0 || expert[s] >= E)
      throw Error(ErrorCode::invalid_argument, fmt::format("moe_group: experts[{}, {}] = {} is outside [0, E = {})",
                                                           s / k, s % k, expert[s], E));
  std::memset(offsets, 0, size_t(E + 1) * sizeof(int32_t));
  for (int64_t s = 0; s < S; ++s) ++offsets[expert[s] + 1];
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  // Each expert's next free grouped row; slot s lands at offsets[e] + (earlier slots of e).
  std::vector<int32_t> next(offsets, offsets + E);
  for (int64_t s = 0; s < S; ++s) {
    const int32_t p = next[size_t(expert[s])]++;
    slots[p] = int32_t(s);
    positions[s] = p;
  }
  if (!a.x.defined()) return;
  const int64_t C = a.x.dim(1);
  const size_t in_row = size_t(C) * dtype_size(a.x.dtype), out_row = size_t(C) * dtype_size(a.x_grouped.dtype);
  const char* x = static_cast<const char*>(a.x.data);
  char* x_grouped = static_cast<char*>(a.x_grouped.data);
  const DType in_type = a.x.dtype, out_type = a.x_grouped.dtype;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < S; ++p) {
    const char* src = x + size_t(slots[p] / k) * in_row;
    if (in_type == out_type) {
      std::memcpy(x_grouped + size_t(p) * out_row, src, in_row);
    } else {
      thread_local std::vector<float> row;  // [C]
      row.resize(size_t(C));
      load_row(row.data(), src, in_type, C);
      store_row(x_grouped + size_t(p) * out_row, out_type, row.data(), C);
    }
  }
}

void moe_matmul(Stream&, const ops::MoeMatmulArgs& a) {
  const int64_t P = a.x.dim(0), K = a.x.dim(1), E = a.w.dim(0), N = a.out.dim(1), rows = a.w.dim(1);
  const int32_t* offsets = a.offsets.ptr<int32_t>();
  for (int64_t e = 0, previous = 0; e <= E; previous = offsets[e++]) {
    const int64_t o = offsets[e];
    if (e == 0 ? o != 0 : o < previous || o > P || (e == E && o != P))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("moe_matmul: offsets[{}] = {} breaks 0 = offsets[0] ≤ … ≤ offsets[E = {}] = P = {}", e,
                              offsets[e], E, P));
  }
  const size_t x_row = size_t(K) * dtype_size(a.x.dtype), out_row = size_t(N) * dtype_size(a.out.dtype);
  const size_t w_expert = size_t(rows * K) * dtype_size(a.w.dtype);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first = offsets[e], M = offsets[e + 1] - offsets[e];
    if (M == 0) continue;  // an expert no token chose is never read
    GemmProblem p;
    p.x = static_cast<const char*>(a.x.data) + size_t(first) * x_row;
    p.x_dtype = a.x.dtype;
    p.w = static_cast<const char*>(a.w.data) + size_t(e) * w_expert;
    p.w_dtype = a.w.dtype;
    p.w_scales = a.w.scales ? a.w.scales + e * rows : nullptr;
    p.M = M;
    p.N = N;
    p.K = K;
    p.ep.swiglu = a.activation == ops::Activation::swiglu;
    p.ep.out = static_cast<char*>(a.out.data) + size_t(first) * out_row;
    p.ep.out_dtype = a.out.dtype;
    p.ep.N = N;
    if (M <= kGemvMaxRows) gemv(p);
    else gemm(p);
  }
}

void moe_combine(Stream&, const ops::MoeCombineArgs& a) {
  const int64_t T = a.weights.dim(0), k = a.weights.dim(1), C = a.out.dim(1);
  const float* weights = a.weights.ptr<float>();
  const int32_t* positions = a.positions.ptr<int32_t>();
  for (int64_t s = 0; s < T * k; ++s)
    if (positions[s] < 0 || positions[s] >= T * k)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("moe_combine: positions[{}] (token {}, choice {}) = {} is outside [0, T·k = {})", s,
                              s / k, s % k, positions[s], T * k));
  const DType out_type = a.out.dtype, y_type = a.y_grouped.dtype;
  const bool has_residual = a.residual.defined();
  // Without a residual the sums start at zero; its pointer is then out's, typed but never read.
  const DType residual_type = has_residual ? a.residual.dtype : out_type;
  const void* residual_data = has_residual ? a.residual.data : a.out.data;
  with_float_type(y_type, static_cast<const void*>(a.y_grouped.data), [&](const auto* y) {
    with_float_type(out_type, a.out.data, [&](auto* out) {
      with_float_type(residual_type, residual_data, [&](const auto* residual) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < T; ++t) {
          const float* w = weights + t * k;
          const int32_t* pos = positions + t * k;
          auto* o = out + t * C;
          const auto* r = residual + t * C;  // may be o itself: each element is read before it is written
          int64_t c = 0;
#ifdef DING_CPU_AVX2
          for (; c + 8 <= C; c += 8) {
            __m256 sum = has_residual ? load8(r + c) : _mm256_setzero_ps();
            for (int64_t j = 0; j < k; ++j) sum = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), load8(y + pos[j] * C + c), sum);
            store8(o + c, sum);
          }
#endif
          for (; c < C; ++c) {
            float sum = has_residual ? load_scalar(r, residual_type, c) : 0.0f;
            for (int64_t j = 0; j < k; ++j) sum = std::fma(w[j], load_scalar(y, y_type, pos[j] * C + c), sum);
            store_scalar(o, out_type, c, sum);
          }
        }
      });
    });
  });
}

}  // namespace ding::cpu
