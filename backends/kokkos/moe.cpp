// moe_route, moe_group, moe_matmul, moe_combine.
//   route:   a work item per token: its k best experts by repeated selection over the E logits
//            (with groups: first the top_groups best groups', by repeated selection over groups).
//   group:   a work item per expert e: offsets[e] = the number of slots routed to experts before e,
//            then e walks the slots in order, numbering its own: the stable counting sort, with
//            the experts in parallel instead of the slots.
//   matmul:  as matmul's kernel (matmul.cpp), a team per grouped row and block of kColumns output
//            columns, a thread per output; each team finds its row's expert by a binary search
//            over the offsets, in device memory where moe_group wrote them.
//   combine: a work item per output element, its sum started from the residual.
// An expert id, position or grouped row outside the offsets' ranges is skipped (kernels.h).
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

// One token's router logits [E] and the op's order on experts: larger logit first, ties by lower
// index. Both scorings increase with the logit, so this is the order of the scores. Groups of
// group_size consecutive experts are ranked by their best experts in the same order (a group's
// score is its best expert's; ties go to the lower group, which holds the lower expert).
struct RouterRow {
  Elements logits;
  int64_t at, step, E, group_size;
  int64_t last_kept = -1;  // the best expert of the last kept group; −1: every group is kept
  KOKKOS_INLINE_FUNCTION float logit(int64_t e) const { return logits.load(at + e * step); }
  KOKKOS_INLINE_FUNCTION bool precedes(int64_t a, int64_t b) const {
    const float la = logit(a), lb = logit(b);
    return la > lb || (la == lb && a < b);
  }
  KOKKOS_INLINE_FUNCTION int64_t group_best(int64_t g) const {
    int64_t best = g * group_size;
    for (int64_t e = best + 1; e < (g + 1) * group_size; ++e)
      if (logit(e) > logit(best)) best = e;
    return best;
  }
  // The best expert of the group ranked after the one whose best expert is `previous` (−1: of the
  // best group).
  KOKKOS_INLINE_FUNCTION int64_t next_group_after(int64_t previous) const {
    int64_t best = -1;
    for (int64_t g = 0; g < E / group_size; ++g) {
      const int64_t b = group_best(g);
      if ((previous < 0 || precedes(previous, b)) && (best < 0 || precedes(b, best))) best = b;
    }
    return best;
  }
  // The best expert of the kept groups ranked after `previous` (−1: the best of all).
  KOKKOS_INLINE_FUNCTION int64_t next_after(int64_t previous) const {
    const float previous_logit = previous >= 0 ? logit(previous) : 0.0f;
    int64_t best = -1;
    float best_logit = 0;
    for (int64_t g = 0; g < E / group_size; ++g) {
      if (last_kept >= 0 && precedes(last_kept, group_best(g))) continue;  // ranked below the kept groups
      for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float l = logit(e);
        const bool after = previous < 0 || l < previous_logit || (l == previous_logit && e > previous);
        if (after && (best < 0 || l > best_logit)) best = e, best_logit = l;
      }
    }
    return best;
  }
};

// The expert id of slot s = t·k + j, or −1 for one out of [0, E).
struct ExpertOf {
  Elements experts;
  Strides s;
  int64_t k, E;
  KOKKOS_INLINE_FUNCTION int64_t operator()(int64_t slot) const {
    const int32_t e = experts.load_int(slot / k * s[0] + slot % k * s[1]);
    return e >= 0 && e < E ? int64_t(e) : int64_t(-1);
  }
};

constexpr int64_t kColumns = 64;  // output columns per team of moe_matmul

// The expert e whose rows offsets[e] ≤ p < offsets[e+1] hold grouped row p, or −1 for none: the
// last e with offsets[e] ≤ p, by binary search (the offsets are non-decreasing), then checked,
// so offsets out of order find no expert rather than a wrong one out of bounds.
KOKKOS_INLINE_FUNCTION int64_t expert_of_row(Elements offsets, int64_t step, int64_t E, int64_t p) {
  int64_t lo = 0, hi = E;  // the count of e < E with offsets[e] ≤ p lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets.load_int(mid * step) <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int64_t e = lo - 1;
  if (e < 0 || offsets.load_int(e * step) > p || p >= offsets.load_int((e + 1) * step)) return -1;
  return e;
}

}  // namespace

// Choices by repeated selection (E and k are small), walked twice: once for the chosen scores'
// sum, once to write each weight, rounded to f32 once. Sums in double, as the reference.
void moe_route(Stream& stream, const ops::MoeRouteArgs& a) {
  if (ops::has_parts(a)) return ops::moe_route_in_parts(stream, a, {layer_norm, rms_norm, matmul, moe_route, moe_group});
  const int64_t E = a.logits.dim(1), k = a.params.k;
  const Elements weights = elements(a.weights), experts = elements(a.experts), logits = elements(a.logits);
  const Strides w_s = strides(a.weights), e_s = strides(a.experts), l_s = strides(a.logits);
  const bool softmax = a.params.scoring == ops::MoeScoring::softmax, renormalize = a.params.renormalize;
  const double scaling = a.params.routed_scaling;
  const int64_t group_size = E / a.params.groups, top_groups = a.params.groups > 1 ? a.params.top_groups : 0;
  Kokkos::parallel_for("ding::moe_route", Range(0, a.logits.dim(0)), KOKKOS_LAMBDA(const int64_t t) {
    RouterRow row{logits, t * l_s[0], l_s[1], E, group_size};
    int64_t last_kept = -1;
    for (int64_t i = 0; i < top_groups; ++i) last_kept = row.next_group_after(last_kept);
    row.last_kept = last_kept;
    float max = row.logit(0);
    for (int64_t e = 1; e < E; ++e) max = fmaxf(max, row.logit(e));
    double denominator = 0;  // softmax's Σ exp(logit − max)
    if (softmax)
      for (int64_t e = 0; e < E; ++e) denominator += expf(row.logit(e) - max);
    const auto score = [&](int64_t e) {
      return softmax ? expf(row.logit(e) - max) / denominator : 1.0 / (1.0 + double(expf(-row.logit(e))));
    };
    double chosen_sum = 0;
    for (int64_t j = 0, e = -1; j < k; ++j) chosen_sum += score(e = row.next_after(e));
    for (int64_t j = 0, e = -1; j < k; ++j) {
      e = row.next_after(e);
      weights.store(t * w_s[0] + j * w_s[1], float((renormalize ? score(e) / chosen_sum : score(e)) * scaling));
      experts.store_int(t * e_s[0] + j * e_s[1], int32_t(e));
    }
  });
}

void moe_group(Stream&, const ops::MoeGroupArgs& a) {
  const int64_t k = a.experts.dim(1), slots_count = a.experts.numel(), E = a.offsets.dim(0) - 1;
  const Elements offsets = elements(a.offsets), slots = elements(a.slots), positions = elements(a.positions);
  const ExpertOf expert_of{elements(a.experts), strides(a.experts), k, E};
  const int64_t o_step = a.offsets.strides[0], s_step = a.slots.strides[0], p_step = a.positions.strides[0];
  Kokkos::parallel_for("ding::moe_group", Range(0, E + 1), KOKKOS_LAMBDA(const int64_t e) {
    int64_t before = 0;
    for (int64_t s = 0; s < slots_count; ++s) {
      const int64_t x = expert_of(s);
      before += x >= 0 && x < e ? 1 : 0;
    }
    offsets.store_int(e * o_step, int32_t(before));
    if (e == E) return;
    int64_t p = before;
    for (int64_t s = 0; s < slots_count; ++s)
      if (expert_of(s) == e) {
        slots.store_int(p * s_step, int32_t(s));
        positions.store_int(s * p_step, int32_t(p));
        ++p;
      }
  });
  if (!a.x.defined()) return;
  const int64_t C = a.x.dim(1);
  const Elements x = elements(a.x), x_grouped = elements(a.x_grouped);
  const Strides x_s = strides(a.x), g_s = strides(a.x_grouped);
  // Grouped rows past the routed ones (slots with bad expert ids) stay unwritten.
  Kokkos::parallel_for("ding::moe_group_gather", Range(0, slots_count * C), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t p = item / C, c = item % C;
    if (p >= offsets.load_int(E * o_step)) return;
    const int64_t t = slots.load_int(p * s_step) / k;
    x_grouped.store(p * g_s[0] + c * g_s[1], x.load(t * x_s[0] + c * x_s[1]));
  });
}

// x, w and out are contiguous (ops/moe.cpp checks).
void moe_matmul(Stream&, const ops::MoeMatmulArgs& a) {
  const int64_t P = a.x.dim(0), K = a.x.dim(1), N = a.out.dim(1), E = a.w.dim(0);
  const int64_t rows = a.w.dim(1), w_expert = rows * K, blocks = (N + kColumns - 1) / kColumns;
  const Elements out = elements(a.out), x = elements(a.x), w = elements(a.w), offsets = elements(a.offsets);
  const int64_t o_step = a.offsets.strides[0];
  const bool swiglu = a.activation == ops::Activation::swiglu;
  const float* const scales = a.w.scales;  // a quantized w's: expert e's rows from e·rows on
  const TeamPolicy teams = with_row_scratch(TeamPolicy(int(P * blocks), Kokkos::AUTO), K);
  Kokkos::parallel_for("ding::moe_matmul", teams, KOKKOS_LAMBDA(const Team& team) {
    const int64_t p = team.league_rank() / blocks, n0 = team.league_rank() % blocks * kColumns;
    const int64_t n_end = n0 + kColumns < N ? n0 + kColumns : N;
    const int64_t e = expert_of_row(offsets, o_step, E, p);
    if (e < 0) return;  // no expert owns the row: nothing written (kernels.h)
    const ScratchFloats xs = widened_row(team, x, p * K, K);
    // Row r of expert e applied to row p, scaled by the row's scale where w is quantized.
    auto linear = [&](int64_t r) {
      const float sum = dot_with(xs.data(), w, e * w_expert + r * K, 1, K);
      return scales ? sum * scales[e * rows + r] : sum;
    };
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n0, n_end), [&](const int64_t n) {
      float acc = linear(n);
      // [W_gate; W_up]: the up row N + n beside the gate row n; one rounding, after silu(g)·u.
      if (swiglu) acc = silu(acc) * linear(N + n);
      out.store(p * N + n, acc);
    });
  });
}

void moe_combine(Stream&, const ops::MoeCombineArgs& a) {
  const int64_t k = a.weights.dim(1), C = a.out.dim(1), rows = a.weights.dim(0) * k;
  const Elements out = elements(a.out), y = elements(a.y_grouped), weights = elements(a.weights),
                 positions = elements(a.positions), residual = elements(a.residual);
  const Strides out_s = strides(a.out), y_s = strides(a.y_grouped), w_s = strides(a.weights),
                r_s = strides(a.residual);
  const int64_t p_step = a.positions.strides[0];
  Kokkos::parallel_for("ding::moe_combine", Range(0, a.out.numel()), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t t = item / C, c = item % C;
    // The residual may be out itself: this item reads its element before writing it.
    float sum = residual.defined() ? residual.load(t * r_s[0] + c * r_s[1]) : 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = positions.load_int((t * k + j) * p_step);
      if (p < 0 || p >= rows) return;  // not a grouped row: nothing written (kernels.h)
      sum += weights.load(t * w_s[0] + j * w_s[1]) * y.load(p * y_s[0] + c * y_s[1]);
    }
    out.store(t * out_s[0] + c * out_s[1], sum);
  });
}

}  // namespace ding::kokkos
