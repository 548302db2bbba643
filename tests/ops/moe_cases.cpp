// Parity cases for moe_route, moe_group, moe_matmul and moe_combine.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "op_cases.h"

namespace ding::testing {

namespace {

using ops::MoeScoring;

// Router logits drawn from {-1, -0.5, 0, 0.5, 1}: every row has ties, including at the k-th
// place, so the "lower expert first" rule decides the experts.
Tensor tied_logits(CaseRun& run, DType dtype, int64_t T, int64_t E) {
  std::uniform_int_distribution<int> pick(-2, 2);
  std::vector<double> v(size_t(T * E));
  for (double& x : v) x = 0.5 * pick(run.rng);
  return run.values(dtype, {T, E}, v);
}

// Expert ids as a router makes them: k distinct experts per token, popular ones chosen more
// often, and the last quarter of the experts never chosen (groups of size zero).
std::vector<int32_t> routed_experts(CaseRun& run, int64_t T, int64_t E, int64_t k) {
  const int64_t active = std::max(k, E - E / 4);
  std::vector<double> popularity(static_cast<size_t>(active));
  std::lognormal_distribution<double> spread(0.0, 1.0);
  for (double& p : popularity) p = spread(run.rng);
  std::discrete_distribution<int32_t> pick(popularity.begin(), popularity.end());
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    const size_t first = ids.size();
    while (int64_t(ids.size() - first) < k) {
      const int32_t e = pick(run.rng);
      if (std::find(ids.begin() + first, ids.end(), e) == ids.end()) ids.push_back(e);
    }
  }
  return ids;
}

// A random permutation of 0..n-1, as moe_group's positions always are.
std::vector<int32_t> permutation(CaseRun& run, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), run.rng);
  return p;
}

// One moe_route case over T tokens' logits of E experts (tied: with exact ties). The kernel takes
// each weight from an f32 exp (sums in double): a few ulp of f32, measured NMSE ≤ 1.4e-14 over 20
// seeds; 3e-13 is ~20× that and far below a wrong expert.
OpCase route_case(std::string name, int64_t T, int64_t E, const ops::MoeRouteParams& params, DType dtype, bool tied,
                  const char* reason_more) {
  OpCase c;
  c.op = "moe_route";
  c.name = std::move(name);
  c.tolerance = 3e-13;
  c.reason = std::string("f32 exp per weight, double sums: a few f32 ulp (measured ≤ 1.4e-14)") + reason_more;
  c.build = [=](CaseRun& run) {
    Tensor logits = tied ? tied_logits(run, dtype, T, E) : run.normal(dtype, {T, E}, 2.0);
    Tensor weights = run.output("weights", DType::f32, {T, params.k});
    Tensor experts = run.output("experts", DType::i32, {T, params.k}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::moe_route(st, weights, experts, logits, params); };
    run.cost = ops::cost(ops::MoeRouteArgs{weights, experts, logits, params});
  };
  return c;
}

struct RouteShape {
  int64_t E, k;
};

void add_route_cases(std::vector<OpCase>& cases) {
  // {96, 40}: more choices than a 32-lane warp has lanes (the GPU's one-warp-per-token kernel).
  const RouteShape shapes[] = {{3, 1}, {3, 2}, {8, 2}, {8, 8}, {60, 6}, {64, 8}, {96, 40}};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  int variant = 0;
  for (RouteShape s : shapes)
    for (int64_t T : {1, 17, 300})
      for (MoeScoring scoring : {MoeScoring::softmax, MoeScoring::sigmoid})
        for (bool renormalize : {true, false}) {
          const DType dtype = dtypes[variant % 3];
          const bool tied = variant % 4 == 1;  // a quarter of the cases route on tied logits
          const float scaling = variant % 2 ? 2.5f : 1.0f;
          ++variant;
          ops::MoeRouteParams params{.k = s.k, .scoring = scoring, .renormalize = renormalize, .routed_scaling = scaling};
          cases.push_back(route_case(fmt::format("moe_route/T{}_E{}_k{}_{}_{}_scale{}_{}{}", T, s.E, s.k,
                                                 scoring == MoeScoring::softmax ? "softmax" : "sigmoid",
                                                 renormalize ? "renorm" : "raw", scaling, dtype_name(dtype), tied ? "_ties" : ""),
                                     T, s.E, params, dtype, tied, ""));
        }
}

// Group-limited routing (DeepSeek-V2's group_limited_greedy): E experts in `groups` groups, the
// top_groups best kept, the top-k among their experts.
struct GroupedRouteShape {
  int64_t E, k, groups, top_groups;
};

void add_grouped_route_cases(std::vector<OpCase>& cases) {
  // DeepSeek-V2's 160 experts in 8 groups (top 3, k = 6); every group kept; one group kept with
  // k filling it; k above a 32-lane warp; more groups than a 64-bit mask holds (80 of 2, the GPU
  // kernel's unmasked form); groups of one expert.
  const GroupedRouteShape shapes[] = {{8, 2, 4, 2},  {160, 6, 8, 3},  {16, 3, 4, 4}, {64, 8, 8, 1},
                                      {96, 40, 6, 5}, {160, 6, 80, 5}, {72, 4, 72, 6}};
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  int variant = 0;
  for (GroupedRouteShape s : shapes)
    for (int64_t T : {1, 33})
      for (bool renormalize : {true, false}) {
        const DType dtype = dtypes[variant % 3];
        const MoeScoring scoring = variant % 5 == 4 ? MoeScoring::sigmoid : MoeScoring::softmax;
        const bool tied = variant % 6 == 1;  // exact ties between experts and between groups
        const float scaling = variant % 2 ? 16.0f : 1.0f;
        ++variant;
        ops::MoeRouteParams params{.k = s.k, .scoring = scoring, .renormalize = renormalize, .routed_scaling = scaling,
                                   .groups = s.groups, .top_groups = s.top_groups};
        cases.push_back(route_case(fmt::format("moe_route/T{}_E{}_k{}_groups{}_top{}_{}_{}_scale{}_{}{}", T, s.E, s.k, s.groups,
                                               s.top_groups, scoring == MoeScoring::softmax ? "softmax" : "sigmoid",
                                               renormalize ? "renorm" : "raw", scaling, dtype_name(dtype), tied ? "_ties" : ""),
                                   T, s.E, params, dtype, tied, "; the group choice is exact"));
      }
}

// moe_route with its router and its grouping: logits = x · router_wᵀ, then the routing, then
// moe_group's outputs. x is drawn from {0, ±0.5, ±1} and router_w from the multiples of 1/8 in
// [-1, 1], so every logit is exact in f32 whatever the order of its sums (C·2^6 < 2^24) and every
// backend routes on the same logits, ties included. With a norm first, each row of x is ±s in
// equal numbers (s = 1 or 2): mean 0 and rstd = 1/s exactly (eps = 1e-30 is lost in s²), so h =
// ±w (+ b) is exact too, norm weights and biases being multiples of 1/8 in [-1, 1].
struct RouterShape {
  int64_t T, E, k, C, groups = 1, top_groups = 1;
};

struct RouterParts {
  DType x, w, x_grouped;
  bool grouping = true, gather = true;
  ops::NormKind norm = ops::NormKind::none;
  bool f32_norm_weight = false;  // else x's dtype, as a model's
};

OpCase router_route_case(RouterShape s, RouterParts parts, ops::MoeScoring scoring, bool renormalize) {
  OpCase c;
  c.op = "moe_route";
  const std::string norm_name = std::string(parts.norm == ops::NormKind::rms_norm     ? "_rms_norm"
                                            : parts.norm == ops::NormKind::layer_norm ? "_layer_norm"
                                                                                      : "") +
                                (parts.f32_norm_weight ? "_f32_weight" : "");
  c.name = fmt::format("moe_route/router_T{}_E{}_k{}_C{}{}{}_x{}_w{}{}{}", s.T, s.E, s.k, s.C,
                       s.groups > 1 ? fmt::format("_groups{}_top{}", s.groups, s.top_groups) : "", norm_name,
                       dtype_name(parts.x), dtype_name(parts.w), parts.grouping ? "_grouped" : "",
                       parts.gather ? fmt::format("_to_{}", dtype_name(parts.x_grouped)) : "");
  c.tolerance = 3e-13;
  c.reason = "exact logits (dyadic inputs), then as the moe_route cases: a few f32 ulp per weight; indices and the "
             "gathered rows exact";
  c.build = [=](CaseRun& run) {
    std::uniform_int_distribution<int> half(-2, 2), eighth(-8, 8);
    std::vector<double> xv(size_t(s.T * s.C)), wv(size_t(s.E * s.C));
    for (double& v : xv) v = 0.5 * half(run.rng);
    for (double& v : wv) v = 0.125 * eighth(run.rng);
    const bool normed = parts.norm != ops::NormKind::none;
    if (normed)
      for (int64_t t = 0; t < s.T; ++t) {
        const double scale = double(1 + t % 2);
        const auto row = xv.begin() + t * s.C;
        for (int64_t i = 0; i < s.C; ++i) row[i] = i < s.C / 2 ? scale : -scale;
        std::shuffle(row, row + s.C, run.rng);
      }
    Tensor x = run.values(parts.x, {s.T, s.C}, xv);
    Tensor router_w = run.values(parts.w, {s.E, s.C}, wv);
    ops::MoeRouteArgs a{.weights = run.output("weights", DType::f32, {s.T, s.k}),
                        .experts = run.output("experts", DType::i32, {s.T, s.k}, {Compare::exact}),
                        .logits = run.output("logits", DType::f32, {s.T, s.E}),
                        .params = {.k = s.k, .scoring = scoring, .renormalize = renormalize,
                                   .routed_scaling = s.groups > 1 ? 16.0f : 1.0f, .groups = s.groups,
                                   .top_groups = s.top_groups},
                        .x = x,
                        .router_w = router_w};
    if (normed) {
      std::vector<double> nw(size_t(s.C)), nb(size_t(s.C));
      for (double& v : nw) v = 0.125 * eighth(run.rng);
      for (double& v : nb) v = 0.125 * eighth(run.rng);
      a.norm = {.kind = parts.norm, .weight = run.values(parts.f32_norm_weight ? DType::f32 : parts.x, {s.C}, nw), .eps = 1e-30f};
      if (parts.norm == ops::NormKind::layer_norm) a.norm.bias = run.values(DType::bf16, {s.C}, nb);
      a.h = run.output("h", parts.x, {s.T, s.C});
    }
    if (parts.grouping) {
      a.offsets = run.output("offsets", DType::i32, {s.E + 1}, {Compare::exact});
      a.slots = run.output("slots", DType::i32, {s.T * s.k}, {Compare::exact});
      a.positions = run.output("positions", DType::i32, {s.T * s.k}, {Compare::exact});
      if (parts.gather) a.x_grouped = run.output("x_grouped", parts.x_grouped, {s.T * s.k, s.C}, {Compare::exact});
    }
    run.launch = [=](Stream& st) { ops::moe_route(st, a); };
    run.cost = ops::cost(a);
  };
  return c;
}

void add_router_route_cases(std::vector<OpCase>& cases) {
  using ops::MoeScoring;
  const DType bf16 = DType::bf16, f16 = DType::f16, f32 = DType::f32;
  // A decode step's routing as the GPU runs it in one launch: OLMoE's 8 of 64 (and at batch 8, its
  // 64 slots the most), DeepSeek-V2's group-limited 6 of 160, Mixtral's 2 of 8 over C = 4096,
  // Qwen3-Next's 10 of 512; then what it leaves to the three ops: 9 tokens, rows not of whole
  // 16-byte pieces (C = 100 in bf16), x and the router in different dtypes, the router alone, the
  // grouping without the gather; and a gather that converts.
  cases.push_back(router_route_case({1, 64, 8, 2048}, {bf16, bf16, bf16}, MoeScoring::softmax, false));
  cases.push_back(router_route_case({8, 64, 8, 512}, {bf16, bf16, bf16}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({1, 160, 6, 256, 8, 3}, {bf16, bf16, bf16}, MoeScoring::softmax, false));
  cases.push_back(router_route_case({2, 160, 6, 128, 8, 3}, {f32, f32, f32}, MoeScoring::sigmoid, true));
  cases.push_back(router_route_case({4, 8, 2, 4096}, {f16, f16, f16}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({1, 512, 10, 256}, {bf16, bf16, bf16}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({3, 16, 4, 48}, {f32, f32, f32}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({9, 64, 8, 64}, {bf16, bf16, bf16}, MoeScoring::softmax, false));
  cases.push_back(router_route_case({17, 64, 8, 64}, {f16, f16, f16}, MoeScoring::sigmoid, true));
  cases.push_back(router_route_case({2, 60, 6, 100}, {bf16, bf16, bf16}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({2, 64, 8, 256}, {bf16, f32, bf16}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({2, 64, 8, 256}, {bf16, bf16, bf16, false, false}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({2, 64, 8, 256}, {bf16, bf16, bf16, true, false}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({2, 8, 2, 64}, {bf16, bf16, f32}, MoeScoring::softmax, true));
  // The norm first (the MoE layer's h = rms_norm(x)): in the GPU's one launch at decode sizes (OLMoE's
  // batch 1; the group-limited f32 router; 8 tokens of narrow rows), and in parts (9 tokens; OLMoE's
  // batch 4, whose 128 KB of grouped rows the single launch leaves to the three ops; an f32 norm
  // weight beside bf16 rows; layer_norm).
  using ops::NormKind;
  cases.push_back(router_route_case({1, 64, 8, 2048}, {bf16, bf16, bf16, true, true, NormKind::rms_norm}, MoeScoring::softmax, false));
  cases.push_back(router_route_case({2, 160, 6, 256, 8, 3}, {f32, f32, f32, true, true, NormKind::rms_norm}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({8, 64, 8, 64}, {bf16, bf16, bf16, true, true, NormKind::rms_norm}, MoeScoring::sigmoid, true));
  cases.push_back(router_route_case({9, 64, 8, 64}, {f16, f16, f16, true, true, NormKind::rms_norm}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({4, 64, 8, 2048}, {bf16, bf16, bf16, true, true, NormKind::rms_norm}, MoeScoring::softmax, false));
  cases.push_back(router_route_case({1, 64, 8, 512}, {bf16, bf16, bf16, true, true, NormKind::rms_norm, true}, MoeScoring::softmax, true));
  cases.push_back(router_route_case({3, 16, 4, 48}, {f32, f32, f32, true, true, NormKind::layer_norm}, MoeScoring::softmax, true));
}

struct GroupShape {
  int64_t T, k, E;
};

struct GatherTypes {
  bool gather;
  DType x, x_grouped;
};

void add_group_cases(std::vector<OpCase>& cases) {
  // Decode steps too: Qwen3-Next's 10 of 512 experts, OLMoE's 8 of 64 at batch 8 (64 slots, the GPU's
  // direct-rank kernel's most) and batch 9 (the counting sort's fewest).
  const GroupShape shapes[] = {{1, 1, 3},    {1, 2, 8},     {17, 2, 8},  {17, 8, 3}, {300, 2, 60}, {300, 8, 64},
                               {33, 6, 64},  {1, 10, 512},  {8, 8, 64},  {9, 8, 64}};
  const GatherTypes gathers[] = {{false, DType::f32, DType::f32}, {true, DType::f32, DType::f32},
                                 {true, DType::bf16, DType::bf16}, {true, DType::f16, DType::f32},
                                 {true, DType::f32, DType::bf16}};
  int variant = 0;
  for (GroupShape s : shapes)
    for (GatherTypes g : gathers) {
      // Distinct experts per token when they fit (k ≤ E), else uniform ids with repeats.
      const bool routed = s.k <= s.E && variant % 3 != 2;
      const int64_t C = std::array<int64_t, 3>{1, 17, 64}[size_t(variant % 3)];
      ++variant;
      OpCase c;
      c.op = "moe_group";
      c.name = fmt::format("moe_group/T{}_k{}_E{}_{}", s.T, s.k, s.E, routed ? "routed" : "uniform_ids") +
               (g.gather ? fmt::format("_C{}_{}_to_{}", C, dtype_name(g.x), dtype_name(g.x_grouped)) : "");
      c.tolerance = 1e-30;
      c.reason = "every output is compared exactly: indices, and x_grouped is a copy (conversions round identically)";
      c.build = [=](CaseRun& run) {
        Tensor experts = routed ? run.ints({s.T, s.k}, routed_experts(run, s.T, s.E, s.k))
                                : run.random_ints({s.T, s.k}, 0, int32_t(s.E - 1));
        Tensor offsets = run.output("offsets", DType::i32, {s.E + 1}, {Compare::exact});
        Tensor slots = run.output("slots", DType::i32, {s.T * s.k}, {Compare::exact});
        Tensor positions = run.output("positions", DType::i32, {s.T * s.k}, {Compare::exact});
        Tensor x, x_grouped;
        if (g.gather) {
          x = run.normal(g.x, {s.T, C});
          x_grouped = run.output("x_grouped", g.x_grouped, {s.T * s.k, C}, {Compare::exact});
        }
        run.launch = [=](Stream& st) { ops::moe_group(st, offsets, slots, positions, experts, x, x_grouped); };
        run.cost = ops::cost(ops::MoeGroupArgs{offsets, slots, positions, experts, x, x_grouped});
      };
      cases.push_back(c);
    }
}

// The offsets moe_group makes of T tokens' k routed experts each: popular experts own many rows,
// the last quarter none.
std::vector<int32_t> routed_offset_values(CaseRun& run, int64_t T, int64_t k, int64_t E) {
  std::vector<int32_t> offsets(size_t(E + 1), 0);
  for (int32_t e : routed_experts(run, T, E, k)) ++offsets[size_t(e) + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  return offsets;
}

Tensor routed_offsets(CaseRun& run, int64_t T, int64_t k, int64_t E) {
  return run.ints({E + 1}, routed_offset_values(run, T, k, E));
}

struct ExpertTypes {
  DType x, w, out;
};

struct ExpertShape {
  int64_t T, k, E, N, K;
};

// One moe_matmul case: T tokens' k routed experts of E, [N(·2), K] each; w f32/f16/bf16, or 8-bit
// (i8, f8e4m3) with row scales. settled: the call says its offsets come from an earlier op (true
// here: they are uploaded), which lets a GPU read them before its wait.
OpCase expert_matmul_case(ExpertShape s, ExpertTypes ty, bool swiglu, bool settled = false) {
  const int64_t P = s.T * s.k, rows = swiglu ? 2 * s.N : s.N;
  const bool narrow = ops::quantized_weight(ty.w);
  OpCase c;
  c.op = "moe_matmul";
  c.name = fmt::format("moe_matmul/T{}_k{}_E{}_N{}_K{}_x{}_w{}_out{}{}{}", s.T, s.k, s.E, s.N, s.K, dtype_name(ty.x),
                       dtype_name(ty.w), dtype_name(ty.out), swiglu ? "_swiglu" : "", settled ? "_settled" : "");
  // Each output is one matmul output (f32 sums of K products), so matmul's budget holds; 8-bit
  // values and their scales are the weights, exact on both sides.
  c.tolerance = matmul_tolerance(ty.out, s.K, P * s.N, swiglu);
  c.reason = matmul_reason(ty.out, s.K, swiglu) + (narrow ? "; 8-bit w with row scales, exact on both sides" : "");
  if (ty.w == DType::f8e4m3 && (ty.x == DType::bf16 || ty.x == DType::f16) && P > s.E) {  // ops/moe.h
    c.tight_tolerance = c.tolerance;
    c.tolerance += e4m3_x_nmse(swiglu);
    c.reason += e4m3_x_reason(swiglu);
  }
  if (ty.w == DType::i8 && (ty.x == DType::bf16 || ty.x == DType::f16)) {
    c.tolerance += int16_x_nmse(s.K, swiglu);
    c.reason += int16_x_reason(s.K, swiglu);
  }
  c.build = [=](CaseRun& run) {
    Tensor offsets = routed_offsets(run, s.T, s.k, s.E);
    Tensor x = run.normal(ty.x, {P, s.K});
    // w scaled by 1/√K keeps the sums near unit scale, where silu is not linear.
    const double w_scale = 1.0 / std::sqrt(double(s.K));
    Tensor w = narrow ? run.quantized(ty.w, {s.E, rows, s.K}, w_scale) : run.normal(ty.w, {s.E, rows, s.K}, w_scale);
    Tensor out = run.output("out", ty.out, {P, s.N});
    const ops::Activation act = swiglu ? ops::Activation::swiglu : ops::Activation::none;
    const ops::MoeMatmulArgs args{.out = out, .x = x, .w = w, .offsets = offsets, .activation = act,
                                  .offsets_from_earlier_op = settled};
    run.launch = [=](Stream& st) { ops::moe_matmul(st, args); };
    run.cost = ops::cost(args);
  };
  return c;
}

void add_expert_matmul_cases(std::vector<OpCase>& cases) {
  // Decode (one token, top-2 of 8 and top-8 of 64; eight tokens sharing experts), prefill with
  // hundreds of rows per popular expert (on a GPU the tensor-core GEMM's row tiles: 64 rows below
  // 128 per expert on average, 128 from there), and odd N and K around vector widths.
  const ExpertShape shapes[] = {{1, 1, 3, 1, 1},      {1, 2, 8, 64, 96},     {1, 8, 64, 40, 256},
                                {8, 8, 64, 48, 64},   {17, 2, 8, 33, 70},    {300, 6, 60, 24, 40},
                                {64, 4, 16, 130, 520}, {520, 2, 8, 40, 96}};
  const ExpertTypes types[] = {{DType::bf16, DType::bf16, DType::bf16}, {DType::f32, DType::f32, DType::f32},
                               {DType::f16, DType::f16, DType::f16},    {DType::f32, DType::bf16, DType::f32},
                               {DType::bf16, DType::f32, DType::bf16}};
  int variant = 0;
  for (ExpertShape s : shapes)
    for (bool swiglu : {false, true})
      for (int t = 0; t < 2; ++t) cases.push_back(expert_matmul_case(s, types[size_t(variant++ % 5)], swiglu));

  // 8-bit experts (i8, f8e4m3 with row scales, ops/moe.h): decode on a GPU's tensor-core GEMV
  // (16-bit x, K a multiple of 16; one token's 8 experts, eight tokens' union), the FMA kernel
  // between decode and prefill (odd K: element by element) and for f32 x, prefill on the GEMM
  // reading the 8-bit rows (60 experts, a quarter without rows; 64-row tiles at 64 rows per expert),
  // and through a widened copy where K is not whole 16-byte chunks (K = 520).
  const ExpertShape narrow_shapes[] = {{1, 8, 64, 40, 256}, {8, 8, 64, 48, 64}, {17, 2, 8, 33, 70},
                                       {520, 2, 8, 40, 96}, {300, 6, 60, 24, 48}, {256, 8, 32, 72, 256},
                                       {200, 2, 8, 136, 520}};
  const ExpertTypes narrow_types[] = {{DType::bf16, DType::i8, DType::bf16}, {DType::f16, DType::f8e4m3, DType::f16},
                                      {DType::f32, DType::i8, DType::f32},   {DType::bf16, DType::f8e4m3, DType::f32}};
  for (ExpertShape s : narrow_shapes)
    for (bool swiglu : {false, true})
      for (int t = 0; t < 2; ++t) cases.push_back(expert_matmul_case(s, narrow_types[size_t(variant++ % 4)], swiglu));

  // Decode products whose offsets are marked as an earlier op's: one token's 8 of 64 experts, eight
  // tokens' union, 16-bit and 8-bit w, plain and swiglu (on a GPU the tensor-core GEMV finds its
  // experts and fills its ring before the chained-launch wait).
  for (ExpertShape s : {ExpertShape{1, 8, 64, 40, 256}, ExpertShape{8, 8, 64, 48, 64}})
    for (ExpertTypes ty : {types[0], types[2], narrow_types[0], narrow_types[1]})
      for (bool swiglu : {false, true}) cases.push_back(expert_matmul_case(s, ty, swiglu, true));
}

struct CombineTypes {
  DType y, out;
};

void add_combine_cases(std::vector<OpCase>& cases) {
  struct Shape {
    int64_t T, k, C;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 2, 17}, {17, 2, 64}, {17, 8, 3}, {300, 2, 17}, {300, 8, 8}, {3, 6, 4097}};
  const CombineTypes types[] = {{DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
                                {DType::bf16, DType::f32}, {DType::f32, DType::bf16}};
  enum class Residual { none, separate, in_place };
  int variant = 0;
  for (Shape s : shapes)
    for (CombineTypes ty : types) {
      const Residual residual = std::array{Residual::none, Residual::separate, Residual::in_place}[size_t(variant++ % 3)];
      OpCase c;
      c.op = "moe_combine";
      c.name = fmt::format("moe_combine/T{}_k{}_C{}_y{}_out{}{}", s.T, s.k, s.C, dtype_name(ty.y), dtype_name(ty.out),
                           residual == Residual::separate ? "_residual" : residual == Residual::in_place ? "_residual_inplace" : "");
      // f32 FMA over k ≤ 8 products against a double sum: ≤ ~k ulp of f32; then one rounding to
      // the output dtype, identical on both sides except for sums on a rounding boundary.
      if (ty.out == DType::f32) {
        c.tolerance = 1e-13;
        c.reason = "f32 FMA accumulation of ≤ 8 terms vs double (measured NMSE ≤ 7.6e-15)";
      } else {
        // The f32 sum (k + 1 terms) lands within its error of a rounding midpoint for about one
        // output in 2¹³/(k + 1) (f16; bf16 eight times fewer; estimated from the formats, not
        // measured): over thousands of outputs that is the 0.05·rounding_nmse term (measured
        // ≤ 9e-9 bf16, 1.5e-10 f16), but in a case of 17 outputs one such flip alone decides, so
        // up to 4 flips of outputs up to 25× the mean square (a 5σ normal) are allowed besides.
        c.tolerance = 0.05 * rounding_nmse(ty.out) + flip_nmse(ty.out, s.T * s.C, 25.0, 4);
        c.reason = "same rounding to the 16-bit output on both sides; only sums within f32 error of a rounding boundary differ, by 1 ulp";
      }
      c.build = [=](CaseRun& run) {
        Tensor y_grouped = run.normal(ty.y, {s.T * s.k, s.C});
        Tensor weights = run.uniform(DType::f32, {s.T, s.k}, 0.0, 1.0);
        Tensor positions = run.ints({s.T * s.k}, permutation(run, s.T * s.k));
        // In place, out starts as the residual stream (restored before each run).
        Tensor out = residual == Residual::in_place ? run.inout("out", ty.out, {s.T, s.C})
                                                    : run.output("out", ty.out, {s.T, s.C});
        Tensor r = residual == Residual::separate ? run.normal(ty.y, {s.T, s.C})
                   : residual == Residual::in_place ? out
                                                    : Tensor{};
        run.launch = [=](Stream& st) { ops::moe_combine(st, out, y_grouped, weights, positions, r); };
        run.cost = ops::cost(ops::MoeCombineArgs{out, y_grouped, weights, positions, r});
      };
      cases.push_back(c);
    }
}

// Realistic sizes for ding-bench (OLMoE/Qwen-MoE-like: 64 experts, top-8, C = 2048).
void add_bench_cases(std::vector<OpCase>& cases) {
  const int64_t T = 256, E = 64, k = 8, C = 2048;
  OpCase route{.op = "moe_route", .name = "moe_route/bench_T256_E64_k8_softmax_bf16", .tolerance = 3e-13,
               .reason = "as the small moe_route cases"};
  route.build = [=](CaseRun& run) {
    Tensor logits = run.normal(DType::bf16, {T, E}, 2.0);
    Tensor weights = run.output("weights", DType::f32, {T, k});
    Tensor experts = run.output("experts", DType::i32, {T, k}, {Compare::exact});
    const ops::MoeRouteParams params{.k = k};
    run.launch = [=](Stream& st) { ops::moe_route(st, weights, experts, logits, params); };
    run.cost = ops::cost(ops::MoeRouteArgs{weights, experts, logits, params});
  };
  route.in_tests = false;
  cases.push_back(route);

  // A decode step's whole routing, as the model runs it (norm, router, routing, grouping): OLMoE's
  // router (64 × 2048), batch 1 and 8.
  for (int64_t tokens : {1, 8}) {
    OpCase routed{.op = "moe_route", .name = fmt::format("moe_route/bench_olmoe_router_T{}_E64_k8_C2048_rms_norm_grouped_bf16", tokens),
                  .tolerance = 3e-13, .reason = "as the router moe_route cases"};
    routed.build = [=](CaseRun& run) {
      ops::MoeRouteArgs a{.weights = run.output("weights", DType::f32, {tokens, k}),
                          .experts = run.output("experts", DType::i32, {tokens, k}, {Compare::exact}),
                          .logits = run.output("logits", DType::f32, {tokens, E}),
                          .params = {.k = k, .renormalize = false},
                          .x = run.normal(DType::bf16, {tokens, C}),
                          .router_w = run.normal(DType::bf16, {E, C}, 1.0 / std::sqrt(double(C))),
                          .norm = {.kind = ops::NormKind::rms_norm, .weight = run.normal(DType::bf16, {C}), .eps = 1e-6f},
                          .h = run.output("h", DType::bf16, {tokens, C}),
                          .offsets = run.output("offsets", DType::i32, {E + 1}, {Compare::exact}),
                          .slots = run.output("slots", DType::i32, {tokens * k}, {Compare::exact}),
                          .positions = run.output("positions", DType::i32, {tokens * k}, {Compare::exact}),
                          .x_grouped = run.output("x_grouped", DType::bf16, {tokens * k, C}, {Compare::exact})};
      run.launch = [=](Stream& st) { ops::moe_route(st, a); };
      run.cost = ops::cost(a);
    };
    routed.in_tests = false;
    cases.push_back(routed);
  }

  OpCase group{.op = "moe_group", .name = "moe_group/bench_T256_k8_E64_C2048_bf16", .tolerance = 1e-30,
               .reason = "exact outputs"};
  group.build = [=](CaseRun& run) {
    Tensor experts = run.ints({T, k}, routed_experts(run, T, E, k));
    Tensor offsets = run.output("offsets", DType::i32, {E + 1}, {Compare::exact});
    Tensor slots = run.output("slots", DType::i32, {T * k}, {Compare::exact});
    Tensor positions = run.output("positions", DType::i32, {T * k}, {Compare::exact});
    Tensor x = run.normal(DType::bf16, {T, C});
    Tensor x_grouped = run.output("x_grouped", DType::bf16, {T * k, C}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::moe_group(st, offsets, slots, positions, experts, x, x_grouped); };
    run.cost = ops::cost(ops::MoeGroupArgs{offsets, slots, positions, experts, x, x_grouped});
  };
  group.in_tests = false;
  cases.push_back(group);

  // OLMoE-1B-7B's experts (C = 2048, F = 1024) at decode: batch 1 reads 8 experts' weights, batch 8
  // the union of what its tokens chose; a prefill chunk of 256 tokens.
  // The same with 8-bit experts (int8, fp8: i8 and E4M3 values with row scales).
  for (DType wt : {DType::bf16, DType::i8, DType::f8e4m3})
    for (int64_t tokens : {1, 8, 256})
      for (bool up : {true, false}) {
        const int64_t F = 1024, N = up ? F : C, K = up ? C : F, P = tokens * k;
        const std::string w_tag = wt == DType::bf16 ? "" : wt == DType::i8 ? "_int8" : "_fp8";
        OpCase expert{.op = "moe_matmul",
                      .name = fmt::format("moe_matmul/bench_olmoe_{}_T{}_k8_E64_bf16{}", up ? "gate_up" : "down", tokens, w_tag),
                      .tolerance = matmul_tolerance(DType::bf16, K, P * N, up),
                      .reason = matmul_reason(DType::bf16, K, up)};
        if (wt == DType::f8e4m3 && P > E) {  // x may be rounded to E4M3 (ops/moe.h)
          expert.tight_tolerance = expert.tolerance;
          expert.tolerance += e4m3_x_nmse(up);
          expert.reason += e4m3_x_reason(up);
        }
        if (wt == DType::i8) {
          expert.tolerance += int16_x_nmse(K, up);
          expert.reason += int16_x_reason(K, up);
        }
        expert.build = [=](CaseRun& run) {
          const std::vector<int32_t> values = routed_offset_values(run, tokens, k, E);
          int64_t active = 0;  // the roofline's bytes: the experts the tokens chose, each once
          for (int64_t e = 0; e < E; ++e) active += values[size_t(e) + 1] > values[size_t(e)];
          Tensor offsets = run.ints({E + 1}, values);
          Tensor x = run.normal(DType::bf16, {P, K});
          const double w_scale = 1.0 / std::sqrt(double(K));
          Tensor w = wt == DType::bf16 ? run.normal(wt, {E, up ? 2 * N : N, K}, w_scale)
                                       : run.quantized(wt, {E, up ? 2 * N : N, K}, w_scale);
          Tensor out = run.output("out", DType::bf16, {P, N});
          const ops::Activation act = up ? ops::Activation::swiglu : ops::Activation::none;
          run.launch = [=](Stream& st) { ops::moe_matmul(st, out, x, w, offsets, act); };
          run.cost = ops::cost(ops::MoeMatmulArgs{out, x, w, offsets, act}, active);
          run.note = fmt::format("{} experts chosen", active);
        };
        expert.in_tests = false;
        cases.push_back(expert);
      }

  OpCase combine{.op = "moe_combine", .name = "moe_combine/bench_T256_k8_C2048_bf16", .tolerance = 0.05 * rounding_nmse(DType::bf16),
                 .reason = "as the small bf16 moe_combine cases"};
  combine.build = [=](CaseRun& run) {
    Tensor y_grouped = run.normal(DType::bf16, {T * k, C});
    Tensor weights = run.uniform(DType::f32, {T, k}, 0.0, 1.0);
    Tensor positions = run.ints({T * k}, permutation(run, T * k));
    Tensor out = run.output("out", DType::bf16, {T, C});
    run.launch = [=](Stream& st) { ops::moe_combine(st, out, y_grouped, weights, positions); };
    run.cost = ops::cost(ops::MoeCombineArgs{out, y_grouped, weights, positions});
  };
  combine.in_tests = false;
  cases.push_back(combine);
}

}  // namespace

std::vector<OpCase> moe_cases() {
  std::vector<OpCase> cases;
  add_route_cases(cases);
  add_grouped_route_cases(cases);
  add_router_route_cases(cases);
  add_group_cases(cases);
  add_expert_matmul_cases(cases);
  add_combine_cases(cases);
  add_bench_cases(cases);
  return cases;
}

}  // namespace ding::testing
