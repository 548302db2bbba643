// Reference MoE routing, grouping, expert products and combining: plain loops in double.
// Routing follows HF transformers' MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock (softmax,
// topk, optional renormalisation: `norm_topk_prob`), DeepseekV3TopkRouter (sigmoid scores,
// `routed_scaling_factor`) and DeepseekV2TopkRouter's group_limited_greedy (group scores the
// max of their experts', the topk_group best groups kept, the rest masked to 0 before the
// top-k); grouping is a stable counting sort by expert id; each expert's
// product is torch.nn.functional.linear over its rows (MixtralBlockSparseTop2MLP: w2(act(w1 x) · w3 x)
// is moe_matmul with swiglu, then moe_matmul).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

// scores = softmax(logits[t]) or σ(logits[t]); experts[t] = the k best, weights[t] their scores,
// renormalised to Σ = 1 if asked, times routed_scaling. Both scorings are strictly increasing
// in the logit, so the experts are chosen by logit: the order of the exact scores, with no ties
// invented by rounding (σ(40) and σ(41) are both 1.0 in double). With groups, a group's score
// is its best expert's, so groups are ranked by their best logit too (ties: lower group first),
// and the experts of the groups outside the top_groups best are not candidates: the masked
// scores of 0 that transformers gives them rank below every kept expert (k ≤ the kept experts).
void moe_route(Stream& stream, const ops::MoeRouteArgs& a) {
  if (ops::has_parts(a)) return ops::moe_route_in_parts(stream, a, {layer_norm, rms_norm, matmul, moe_route, moe_group});
  const int64_t T = a.logits.dim(0), E = a.logits.dim(1), k = a.params.k;
  const int64_t groups = a.params.groups, group_size = E / groups;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> logit(static_cast<size_t>(E)), score(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) logit[e] = load(a.logits, offset(a.logits, {t, e}));
    if (a.params.scoring == ops::MoeScoring::softmax) {
      const double max = *std::max_element(logit.begin(), logit.end());
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += score[e] = std::exp(logit[e] - max);
      for (double& s : score) s /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) score[e] = sigmoid_value(logit[e]);
    }
    std::vector<double> group_best(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g)
      group_best[g] = *std::max_element(logit.begin() + g * group_size, logit.begin() + (g + 1) * group_size);
    std::vector<int64_t> group_order(static_cast<size_t>(groups));
    std::iota(group_order.begin(), group_order.end(), 0);
    std::stable_sort(group_order.begin(), group_order.end(),
                     [&](int64_t g, int64_t h) { return group_best[g] > group_best[h]; });
    std::vector<bool> kept(static_cast<size_t>(groups), false);
    for (int64_t i = 0; i < a.params.top_groups; ++i) kept[group_order[i]] = true;
    std::vector<int64_t> order;  // the kept experts, best first
    for (int64_t e = 0; e < E; ++e)
      if (kept[e / group_size]) order.push_back(e);
    std::sort(order.begin(), order.end(),
              [&](int64_t i, int64_t j) { return logit[i] > logit[j] || (logit[i] == logit[j] && i < j); });
    double chosen_sum = 0;
    for (int64_t j = 0; j < k; ++j) chosen_sum += score[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      double w = score[order[j]];
      if (a.params.renormalize) w /= chosen_sum;
      store(a.weights, offset(a.weights, {t, j}), w * a.params.routed_scaling);
      store(a.experts, offset(a.experts, {t, j}), double(order[j]));
    }
  }
}

// Counting sort of the T·k slots s = t·k + j by expert id, stable in s:
//   offsets[e] = Σ_{e' < e} count(e'),  slots[p] = s,  positions[s] = p.
void moe_group(Stream&, const ops::MoeGroupArgs& a) {
  const int64_t T = a.experts.dim(0), k = a.experts.dim(1), E = a.offsets.dim(0) - 1;
  std::vector<int64_t> expert(size_t(T * k)), count(size_t(E), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const double e = load(a.experts, offset(a.experts, {t, j}));
      if (!(e >= 0 && e < double(E)))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("moe_group: experts[{}, {}] = {} is outside [0, E = {})", t, j, e, E));
      expert[size_t(t * k + j)] = int64_t(e);
      ++count[size_t(e)];
    }
  std::vector<int64_t> next(static_cast<size_t>(E));  // next free grouped row of each expert
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    store(a.offsets, offset(a.offsets, {e}), double(total));
    next[e] = total;
    total += count[e];
  }
  store(a.offsets, offset(a.offsets, {E}), double(total));
  for (int64_t s = 0; s < T * k; ++s) {
    const int64_t p = next[expert[s]]++;
    store(a.slots, offset(a.slots, {p}), double(s));
    store(a.positions, offset(a.positions, {s}), double(p));
  }
  if (!a.x.defined()) return;
  const int64_t C = a.x.dim(1);
  for (int64_t p = 0; p < T * k; ++p) {
    const int64_t t = int64_t(load(a.slots, offset(a.slots, {p}))) / k;
    for (int64_t c = 0; c < C; ++c)
      store(a.x_grouped, offset(a.x_grouped, {p, c}), load(a.x, offset(a.x, {t, c})));
  }
}

// out[p] = act(x[p] · W[e]ᵀ) over each expert's rows; swiglu and row scales as the reference matmul has them.
void moe_matmul(Stream&, const ops::MoeMatmulArgs& a) {
  const int64_t P = a.x.dim(0), K = a.x.dim(1), E = a.w.dim(0), N = a.out.dim(1);
  const bool swiglu = a.activation == ops::Activation::swiglu;
  for (int64_t e = 0, previous = 0; e <= E; ++e) {
    const double o = load(a.offsets, offset(a.offsets, {e}));
    if (e == 0 ? o != 0 : !(o >= double(previous) && o <= double(P)) || (e == E && o != double(P)))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("moe_matmul: offsets[{}] = {} breaks 0 = offsets[0] ≤ … ≤ offsets[E = {}] = P = {}", e, o,
                              E, P));
    previous = int64_t(o);
  }
  const int64_t rows = a.w.dim(1);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first = int64_t(load(a.offsets, offset(a.offsets, {e})));
    const int64_t end = int64_t(load(a.offsets, offset(a.offsets, {e + 1})));
    for (int64_t p = first; p < end; ++p) {
      // Row `row` of expert e applied to grouped row p; a quantized row scaled by its scale.
      const auto linear = [&](int64_t row) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += load(a.x, offset(a.x, {p, k})) * load(a.w, offset(a.w, {e, row, k}));
        return a.w.scales ? sum * double(a.w.scales[e * rows + row]) : sum;
      };
      for (int64_t n = 0; n < N; ++n) {
        double y = linear(n);
        if (swiglu) y = silu_value(y) * linear(N + n);
        store(a.out, offset(a.out, {p, n}), y);
      }
    }
  }
}

// out[t] = residual[t] + Σ_j weights[t, j] · y_grouped[positions[t·k + j]].
void moe_combine(Stream&, const ops::MoeCombineArgs& a) {
  const int64_t T = a.weights.dim(0), k = a.weights.dim(1), C = a.out.dim(1);
  std::vector<int64_t> position(size_t(T * k));
  for (int64_t s = 0; s < T * k; ++s) {
    const double p = load(a.positions, offset(a.positions, {s}));
    if (!(p >= 0 && p < double(T * k)))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("moe_combine: positions[{}] (token {}, choice {}) = {} is outside [0, T·k = {})", s,
                              s / k, s % k, p, T * k));
    position[size_t(s)] = int64_t(p);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double sum = a.residual.defined() ? load(a.residual, offset(a.residual, {t, c})) : 0.0;
      for (int64_t j = 0; j < k; ++j)
        sum += load(a.weights, offset(a.weights, {t, j})) *
               load(a.y_grouped, offset(a.y_grouped, {position[size_t(t * k + j)], c}));
      store(a.out, offset(a.out, {t, c}), sum);
    }
}

}  // namespace ding::reference
