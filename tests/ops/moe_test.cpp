// moe_route / moe_group / moe_matmul / moe_combine: closed-form facts on the reference and CPU backends, and
// bad input through the public front end.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ding/ding.h"
#include "ding/gpu.h"
#include "ding/ops/moe.h"
#include "configurations.h"
#include "expect_error.h"
#include "gpu_tuning_scope.h"
#include "tensors.h"

namespace ding::testing {
namespace {

const char* const kBackends[] = {"ref", "cpu"};

// ---- reference facts (checked on ref and cpu) ----------------------------------------------

TEST(MoeRoute, SoftmaxRenormalizedWeightsSumToOne_T5_E8_k3) {
  std::vector<float> logits(5 * 8);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(float(i) * 1.7f) * 3;
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor w = ts.make(DType::f32, {5, 3}), e = ts.make(DType::i32, {5, 3});
    ops::moe_route(ts.stream(), w, e, ts.f32({5, 8}, logits), {.k = 3});
    const auto weights = ts.read<float>(w);
    const auto experts = ts.read<int32_t>(e);
    for (int t = 0; t < 5; ++t) {
      EXPECT_NEAR(weights[t * 3] + weights[t * 3 + 1] + weights[t * 3 + 2], 1.0, 1e-6) << backend << " token " << t;
      for (int j = 0; j + 1 < 3; ++j) {
        EXPECT_GE(weights[t * 3 + j], weights[t * 3 + j + 1]) << backend;  // best first
        EXPECT_GT(logits[t * 8 + experts[t * 3 + j]], logits[t * 8 + experts[t * 3 + j + 1]]) << backend;
      }
    }
  }
}

TEST(MoeRoute, EqualLogitsPickTheLowestExpertsWithUniformScores_E6_k4) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor w = ts.make(DType::f32, {1, 4}), e = ts.make(DType::i32, {1, 4});
    ops::moe_route(ts.stream(), w, e, ts.f32({1, 6}, std::vector<float>(6, 0.25f)),
                   {.k = 4, .renormalize = false, .routed_scaling = 3.0f});
    EXPECT_EQ(ts.read<int32_t>(e), (std::vector<int32_t>{0, 1, 2, 3})) << backend;
    for (float x : ts.read<float>(w)) EXPECT_NEAR(x, 3.0 / 6.0, 1e-7) << backend;  // softmax of equal logits: 1/E
  }
}

TEST(MoeRoute, SigmoidWeightOfLogitZeroIsOneHalf_E3_k1) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor w = ts.make(DType::f32, {1, 1}), e = ts.make(DType::i32, {1, 1});
    ops::moe_route(ts.stream(), w, e, ts.f32({1, 3}, {-1.0f, 0.0f, -2.0f}),
                   {.k = 1, .scoring = ops::MoeScoring::sigmoid, .renormalize = false, .routed_scaling = 2.0f});
    EXPECT_EQ(ts.read<int32_t>(e)[0], 1) << backend;
    EXPECT_NEAR(ts.read<float>(w)[0], 2.0 * 0.5, 1e-7) << backend;
  }
}

// Group-limited routing where the mask changes the choice: 8 experts in 4 groups of 2, the 2
// best groups kept. Group maxima: g0 5.0, g2 4.3, g1 4.2, g3 1.0, so g0 and g2 are kept, and
// the third expert is e1 (−3) rather than e2 (4.2) and e3 (4.1), the global 3rd and 4th, which
// lie in g1, a group that loses to g2's max. Weights are the softmax over all 8 experts.
TEST(MoeRoute, GroupLimitedTopKSkipsTheLosingGroups_E8_groups4_top2_k3) {
  const std::vector<float> logits = {5.0f, -3.0f, 4.2f, 4.1f, 4.3f, -3.5f, 1.0f, 0.0f};
  double all = 0;
  for (float l : logits) all += std::exp(double(l));
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor w = ts.make(DType::f32, {1, 3}), e = ts.make(DType::i32, {1, 3});
    const Tensor x = ts.f32({1, 8}, logits);
    ops::moe_route(ts.stream(), w, e, x, {.k = 3, .renormalize = false, .groups = 4, .top_groups = 2});
    const std::vector<int32_t> expected = {0, 4, 1};
    EXPECT_EQ(ts.read<int32_t>(e), expected) << backend;
    const auto weights = ts.read<float>(w);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(weights[j], std::exp(double(logits[size_t(expected[j])])) / all, 1e-6) << backend;
    // Renormalised over the chosen three, times routed_scaling.
    ops::moe_route(ts.stream(), w, e, x,
                   {.k = 3, .renormalize = true, .routed_scaling = 2.5f, .groups = 4, .top_groups = 2});
    const double chosen = std::exp(5.0) + std::exp(4.3) + std::exp(-3.0);
    EXPECT_NEAR(ts.read<float>(w)[1], 2.5 * std::exp(4.3) / chosen, 1e-6) << backend;
    // Ungrouped, the same logits route to the global top 3.
    ops::moe_route(ts.stream(), w, e, x, {.k = 3});
    EXPECT_EQ(ts.read<int32_t>(e), (std::vector<int32_t>{0, 4, 2})) << backend;
  }
}

TEST(MoeGroup, OffsetsArePrefixSumsOfCountsAndSlotsInvertPositions_T6_k2_E5) {
  const std::vector<int32_t> ids = {3, 0, 3, 1, 0, 3, 1, 0, 4, 3, 0, 1};  // expert 2 has no token
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor offsets = ts.make(DType::i32, {6}), slots = ts.make(DType::i32, {12}), positions = ts.make(DType::i32, {12});
    Tensor x = ts.f32({6, 2}, {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f, 5, 5.5f});
    Tensor x_grouped = ts.make(DType::f32, {12, 2});
    ops::moe_group(ts.stream(), offsets, slots, positions, ts.i32({6, 2}, ids), x, x_grouped);
    const auto off = ts.read<int32_t>(offsets), slot = ts.read<int32_t>(slots), pos = ts.read<int32_t>(positions);
    std::vector<int32_t> count(5, 0);
    for (int32_t id : ids) ++count[id];
    std::vector<int32_t> expected_offsets(6, 0);
    std::partial_sum(count.begin(), count.end(), expected_offsets.begin() + 1);
    EXPECT_EQ(off, expected_offsets) << backend;
    for (int s = 0; s < 12; ++s) {
      EXPECT_EQ(slot[pos[s]], s) << backend;
      EXPECT_GE(pos[s], off[ids[s]]) << backend;  // inside its expert's block
      EXPECT_LT(pos[s], off[ids[s] + 1]) << backend;
    }
    for (int p = 0; p + 1 < 12; ++p)  // stable: slots ascend within a block
      if (ids[slot[p]] == ids[slot[p + 1]]) EXPECT_LT(slot[p], slot[p + 1]) << backend;
    const auto xg = ts.read<float>(x_grouped);
    for (int p = 0; p < 12; ++p) EXPECT_EQ(xg[p * 2 + 1], float(slot[p] / 2) + 0.5f) << backend;
  }
}

TEST(MoeCombine, OneHotWeightsPickTheRow_T2_k3_C3) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    std::vector<float> y(6 * 3);
    std::iota(y.begin(), y.end(), 1.0f);
    Tensor out = ts.make(DType::f32, {2, 3});
    // token 0 takes its choice 1 (position 4), token 1 its choice 2 (position 0)
    ops::moe_combine(ts.stream(), out, ts.f32({6, 3}, y), ts.f32({2, 3}, {0, 1, 0, 0, 0, 1}),
                     ts.i32({6}, {2, 4, 5, 1, 3, 0}));
    EXPECT_EQ(ts.read<float>(out), (std::vector<float>{13, 14, 15, 1, 2, 3})) << backend;
  }
}

// ---- bad input ------------------------------------------------------------------------------

TEST(MoeRoute, RejectsBadInput_T2_E4) {
  Device& cpu = Device::open("cpu");
  Tensors ts(cpu), other(Device::open("ref"));
  Tensor logits = ts.make(DType::f32, {2, 4}), w = ts.make(DType::f32, {2, 2}), e = ts.make(DType::i32, {2, 2});
  Stream& s = ts.stream();
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 0}); }, ErrorCode::invalid_argument, {"moe_route", "k must be in [1, E = 4], got 0"});
  expect_error([&] { ops::moe_route(s, ts.make(DType::f32, {2, 5}), ts.make(DType::i32, {2, 5}), logits, {.k = 5}); },
               ErrorCode::invalid_argument, {"moe_route", "got 5"});
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .routed_scaling = 0.0f}); }, ErrorCode::invalid_argument,
               {"moe_route", "routed_scaling"});
  expect_error([&] { ops::moe_route(s, ts.make(DType::f16, {2, 2}), e, logits, {.k = 2}); }, ErrorCode::dtype_mismatch,
               {"moe_route", "weights", "f16"});
  expect_error([&] { ops::moe_route(s, w, ts.make(DType::i32, {3, 2}), logits, {.k = 2}); }, ErrorCode::shape_mismatch,
               {"moe_route", "experts", "3"});
  expect_error([&] { ops::moe_route(s, w, e, other.make(DType::f32, {2, 4}), {.k = 2}); }, ErrorCode::device_mismatch,
               {"moe_route", "logits", "ref"});
  Tensor both = ts.make(DType::f32, {2, 2});
  Tensor both_i32 = both;
  both_i32.dtype = DType::i32;
  expect_error([&] { ops::moe_route(s, both, both_i32, logits, {.k = 2}); }, ErrorCode::aliasing, {"moe_route", "weights"});
  Tensor empty = logits;
  empty.shape[0] = 0;
  expect_error([&] { ops::moe_route(s, w, e, empty, {.k = 2}); }, ErrorCode::invalid_argument, {"moe_route", "logits", "size 0"});
  Tensor huge = logits;
  huge.shape[0] = int64_t(1) << 62;
  expect_error([&] { ops::moe_route(s, w, e, huge, {.k = 2}); }, ErrorCode::invalid_argument, {"moe_route", "logits"});
}

TEST(MoeRoute, RejectsBadRouterAndGrouping_T2_E4_C8) {
  Tensors ts(Device::open("cpu"));
  Stream& s = ts.stream();
  auto args = [&] {
    return ops::MoeRouteArgs{.weights = ts.make(DType::f32, {2, 2}), .experts = ts.make(DType::i32, {2, 2}),
                             .logits = ts.make(DType::f32, {2, 4}), .params = {.k = 2},
                             .x = ts.make(DType::bf16, {2, 8}), .router_w = ts.make(DType::bf16, {4, 8}),
                             .offsets = ts.make(DType::i32, {5}), .slots = ts.make(DType::i32, {4}),
                             .positions = ts.make(DType::i32, {4}), .x_grouped = ts.make(DType::bf16, {4, 8})};
  };
  auto expect = [&](auto edit, ErrorCode code, std::initializer_list<std::string> parts) {
    ops::MoeRouteArgs a = args();
    edit(a);
    expect_error([&] { ops::moe_route(s, a); }, code, parts);
  };
  expect([](ops::MoeRouteArgs& a) { a.x = {}; a.x_grouped = {}; }, ErrorCode::invalid_argument, {"moe_route", "router_w needs x"});
  expect([&](ops::MoeRouteArgs& a) { a.logits = ts.make(DType::bf16, {2, 4}); }, ErrorCode::dtype_mismatch,
         {"moe_route", "logits must be f32", "bf16"});
  expect([&](ops::MoeRouteArgs& a) { a.router_w = ts.make(DType::bf16, {5, 8}); }, ErrorCode::shape_mismatch,
         {"moe_route", "router_w", "5"});
  expect([&](ops::MoeRouteArgs& a) { a.router_w = ts.make(DType::bf16, {4, 7}); }, ErrorCode::shape_mismatch,
         {"moe_route", "router_w", "7"});
  expect([&](ops::MoeRouteArgs& a) { a.router_w = ts.make(DType::i8, {4, 8}); }, ErrorCode::dtype_mismatch,
         {"moe_route", "router_w", "i8"});
  expect([&](ops::MoeRouteArgs& a) { a.x = ts.make(DType::bf16, {3, 8}); }, ErrorCode::shape_mismatch, {"moe_route", "x", "3"});
  expect([](ops::MoeRouteArgs& a) { a.slots = {}; }, ErrorCode::invalid_argument,
         {"moe_route", "offsets, slots and positions must be given together"});
  expect([](ops::MoeRouteArgs& a) { a.offsets = {}; a.slots = {}; a.positions = {}; }, ErrorCode::invalid_argument,
         {"moe_route", "x_grouped needs offsets"});
  expect([&](ops::MoeRouteArgs& a) { a.offsets = ts.make(DType::i32, {4}); }, ErrorCode::shape_mismatch,
         {"moe_route", "offsets", "E + 1"});
  expect([&](ops::MoeRouteArgs& a) { a.positions = ts.make(DType::i32, {3}); }, ErrorCode::shape_mismatch,
         {"moe_route", "positions", "3"});
  expect([&](ops::MoeRouteArgs& a) { a.x_grouped = ts.make(DType::bf16, {4, 9}); }, ErrorCode::shape_mismatch,
         {"moe_route", "x_grouped", "9"});
  expect([](ops::MoeRouteArgs& a) { a.slots = a.positions; }, ErrorCode::aliasing, {"moe_route", "slots", "positions"});
  expect([](ops::MoeRouteArgs& a) { a.router_w = {}; a.x_grouped = {}; }, ErrorCode::invalid_argument,
         {"moe_route", "x is given but neither norm"});
  const ops::MatmulNorm rms{.kind = ops::NormKind::rms_norm, .weight = ts.make(DType::f32, {8})};
  expect([&](ops::MoeRouteArgs& a) { a.norm = rms; }, ErrorCode::invalid_argument, {"moe_route", "norm needs h"});
  expect([&](ops::MoeRouteArgs& a) { a.h = ts.make(DType::bf16, {2, 8}); }, ErrorCode::invalid_argument,
         {"moe_route", "h is given but no norm"});
  expect([&](ops::MoeRouteArgs& a) { a.norm = rms; a.h = ts.make(DType::f32, {2, 8}); }, ErrorCode::dtype_mismatch,
         {"moe_route", "h must be x's dtype bf16", "f32"});
  expect([&](ops::MoeRouteArgs& a) { a.norm = rms; a.h = ts.make(DType::bf16, {2, 9}); }, ErrorCode::shape_mismatch,
         {"moe_route", "h"});
  expect([&](ops::MoeRouteArgs& a) { a.norm = rms; a.h = a.x; }, ErrorCode::aliasing, {"moe_route", "h", "x"});
  expect([&](ops::MoeRouteArgs& a) {
    a.norm = {.kind = ops::NormKind::rms_norm, .weight = ts.make(DType::f32, {7})};
    a.h = ts.make(DType::bf16, {2, 8});
  }, ErrorCode::shape_mismatch, {"moe_route", "norm.weight", "7"});
  expect([&](ops::MoeRouteArgs& a) {
    a.norm = {.kind = ops::NormKind::rms_norm, .weight = ts.make(DType::f32, {8}), .eps = 0.0f};
    a.h = ts.make(DType::bf16, {2, 8});
  }, ErrorCode::invalid_argument, {"moe_route", "norm.eps"});
}

TEST(MoeRoute, RejectsBadGroups_T2_E4) {
  Tensors ts(Device::open("cpu"));
  Tensor logits = ts.make(DType::f32, {2, 4}), w = ts.make(DType::f32, {2, 2}), e = ts.make(DType::i32, {2, 2});
  Stream& s = ts.stream();
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 3}); }, ErrorCode::invalid_argument,
               {"moe_route", "groups", "divide E = 4", "got 3"});
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 0}); }, ErrorCode::invalid_argument,
               {"moe_route", "groups", "got 0"});
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 2, .top_groups = 0}); },
               ErrorCode::invalid_argument, {"moe_route", "top_groups", "[1, groups = 2]", "got 0"});
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 2, .top_groups = 3}); },
               ErrorCode::invalid_argument, {"moe_route", "top_groups", "got 3"});
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 1, .top_groups = 2}); },
               ErrorCode::invalid_argument, {"moe_route", "top_groups", "[1, groups = 1]"});
  // k = 2 needs 2 experts in the kept groups; one group of E/groups = 1 holds 1.
  expect_error([&] { ops::moe_route(s, w, e, logits, {.k = 2, .groups = 4, .top_groups = 1}); },
               ErrorCode::invalid_argument, {"moe_route", "k = 2", "top_groups = 1", "E/groups = 1"});
}

TEST(MoeGroup, RejectsExpertIdOutOfRange_E4) {
  for (const char* backend : kBackends) {
    for (int32_t bad : {4, -1}) {
      Tensors ts(Device::open(backend));
      Tensor offsets = ts.make(DType::i32, {5}), slots = ts.make(DType::i32, {6}), positions = ts.make(DType::i32, {6});
      Tensor experts = ts.i32({3, 2}, {0, 1, 2, 3, bad, 0});
      expect_error([&] { ops::moe_group(ts.stream(), offsets, slots, positions, experts); }, ErrorCode::invalid_argument,
                   {"moe_group", "experts[2, 0] = " + std::to_string(bad), "E = 4"});
    }
  }
}

TEST(MoeGroup, RejectsBadShapesDtypesAndAliasing_T3_k2) {
  Tensors ts(Device::open("cpu"));
  Stream& s = ts.stream();
  Tensor offsets = ts.make(DType::i32, {5}), slots = ts.make(DType::i32, {6}), positions = ts.make(DType::i32, {6});
  Tensor experts = ts.i32({3, 2}, {0, 1, 2, 3, 1, 0});
  expect_error([&] { ops::moe_group(s, ts.make(DType::i32, {1}), slots, positions, experts); }, ErrorCode::shape_mismatch,
               {"moe_group", "offsets"});
  expect_error([&] { ops::moe_group(s, offsets, ts.make(DType::i32, {5}), positions, experts); }, ErrorCode::shape_mismatch,
               {"moe_group", "slots", "5"});
  expect_error([&] { ops::moe_group(s, offsets, slots, ts.make(DType::f32, {6}), experts); }, ErrorCode::dtype_mismatch,
               {"moe_group", "positions", "f32"});
  expect_error([&] { ops::moe_group(s, offsets, slots, slots, experts); }, ErrorCode::aliasing, {"moe_group", "slots", "positions"});
  expect_error([&] { ops::moe_group(s, offsets, slots, positions, experts, ts.make(DType::f32, {3, 4})); },
               ErrorCode::invalid_argument, {"moe_group", "x and x_grouped"});
  expect_error([&] { ops::moe_group(s, offsets, slots, positions, experts, ts.make(DType::f32, {3, 4}), ts.make(DType::f32, {6, 5})); },
               ErrorCode::shape_mismatch, {"moe_group", "x_grouped", "5"});
  expect_error([&] { ops::moe_group(s, offsets, slots, positions, experts, ts.make(DType::i32, {3, 4}), ts.make(DType::f32, {6, 4})); },
               ErrorCode::dtype_mismatch, {"moe_group", "x", "i32"});
}

// Expert 1 owns no row, so its weights (NaN here) must not reach any output; expert 0's two rows
// and expert 2's one row each get their own expert's product: w[e] = (e + 1)·I.
TEST(MoeMatmul, EachRowUsesItsExpertAndAnEmptyExpertIsNotRead_P3_E3_K2) {
  const float nan = std::nanf("");
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor out = ts.make(DType::f32, {3, 2});
    ops::moe_matmul(ts.stream(), out, ts.f32({3, 2}, {1, 2, 3, 4, 5, 6}),
                    ts.f32({3, 2, 2}, {1, 0, 0, 1, nan, nan, nan, nan, 3, 0, 0, 3}), ts.i32({4}, {0, 2, 2, 3}));
    EXPECT_EQ(ts.read<float>(out), (std::vector<float>{1, 2, 3, 4, 15, 18})) << backend;
  }
}

// 8-bit experts: each row's sum times that expert row's scale (scales run over every expert's rows
// in order). Expert 0 (rows 0, 1) serves grouped rows 0 and 1, expert 1 (rows 2, 3) row 2. With
// swiglu the two rows of an expert are its gate and up row: out = silu(g·s_g)·(u·s_u).
TEST(MoeMatmul, EightBitExpertsScaleEachRowsSum_P3_E2_K2) {
  const std::vector<float> scales = {0.5f, 0.25f, 2.0f, 0.125f};
  for (const char* backend : {"ref", "cpu", "kokkos"}) {
    if (!registry::is_available(backend)) continue;
    Tensors ts(Device::open(backend));
    const Tensor x = ts.f32({3, 2}, {1, 2, 3, 4, 5, 6}), offsets = ts.i32({3}, {0, 2, 3}), scale = ts.f32({4}, scales);
    Tensor w = ts.from(DType::i8, {2, 2, 2}, std::vector<int8_t>{1, -1, 2, 3, 127, 0, -4, 1});
    w.scales = scale.ptr<float>();
    Tensor out = ts.make(DType::f32, {3, 2});
    ops::moe_matmul(ts.stream(), out, x, w, offsets);
    // Row 0: (1 − 2)·0.5, (2 + 6)·0.25; row 1: (3 − 4)·0.5, (6 + 12)·0.25; row 2: 635·2, (−20 + 6)·0.125.
    EXPECT_EQ(ts.read<float>(out), (std::vector<float>{-0.5f, 2.0f, -0.5f, 4.5f, 1270.0f, -1.75f})) << backend;
    Tensor gated = ts.make(DType::f32, {3, 1});
    ops::moe_matmul(ts.stream(), gated, x, w, offsets, ops::Activation::swiglu);
    const auto silu = [](double g) { return g / (1.0 + std::exp(-g)); };
    const std::vector<float> got = ts.read<float>(gated);
    const double expected[] = {silu(-0.5) * 2.0, silu(-0.5) * 4.5, silu(1270.0) * -1.75};
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(got[size_t(r)], expected[r], 1e-5 * std::abs(expected[r])) << backend << " row " << r;
  }
}

TEST(MoeMatmul, RejectsOffsetsThatAreNotABlockPerExpert_P3_E2) {
  const std::vector<std::pair<std::vector<int32_t>, std::string>> bad = {
      {{1, 2, 3}, "offsets[0] = 1"}, {{0, 2, 1}, "offsets[2] = 1"}, {{0, 4, 3}, "offsets[1] = 4"}, {{0, 1, 2}, "offsets[2] = 2"}};
  for (const char* backend : kBackends)
    for (const auto& entry : bad) {  // not a structured binding: clang 15 cannot capture those
      const std::vector<int32_t>& offsets = entry.first;
      Tensors ts(Device::open(backend));
      expect_error([&] { ops::moe_matmul(ts.stream(), ts.make(DType::f32, {3, 4}), ts.make(DType::f32, {3, 5}),
                                         ts.make(DType::f32, {2, 4, 5}), ts.i32({3}, offsets)); },
                   ErrorCode::invalid_argument, {"moe_matmul", entry.second, "P = 3"});
    }
}

TEST(MoeMatmul, RejectsBadShapesDtypesActivationsAndAliasing_P3_E2) {
  Tensors ts(Device::open("cpu")), other(Device::open("ref"));
  Stream& s = ts.stream();
  Tensor out = ts.make(DType::f32, {3, 4}), x = ts.make(DType::f32, {3, 5}), w = ts.make(DType::f32, {2, 4, 5});
  Tensor offsets = ts.i32({3}, {0, 1, 3});
  expect_error([&] { ops::moe_matmul(s, out, x, ts.make(DType::f32, {2, 4, 6}), offsets); }, ErrorCode::shape_mismatch,
               {"moe_matmul", "w", "K (from x)"});
  expect_error([&] { ops::moe_matmul(s, out, x, w, offsets, ops::Activation::swiglu); }, ErrorCode::shape_mismatch,
               {"moe_matmul", "w", "2N"});
  expect_error([&] { ops::moe_matmul(s, out, x, w, offsets, ops::Activation::gelu_tanh); }, ErrorCode::invalid_argument,
               {"moe_matmul", "none or swiglu"});
  expect_error([&] { ops::moe_matmul(s, out, x, w, ts.i32({4}, {0, 1, 2, 3})); }, ErrorCode::shape_mismatch,
               {"moe_matmul", "offsets", "E + 1"});
  expect_error([&] { ops::moe_matmul(s, out, x, w, ts.make(DType::f32, {3})); }, ErrorCode::dtype_mismatch,
               {"moe_matmul", "offsets", "f32"});
  expect_error([&] { ops::moe_matmul(s, ts.make(DType::i32, {3, 4}), x, w, offsets); }, ErrorCode::dtype_mismatch,
               {"moe_matmul", "out", "i32"});
  expect_error([&] { ops::moe_matmul(s, out, other.make(DType::f32, {3, 5}), w, offsets); }, ErrorCode::device_mismatch,
               {"moe_matmul", "x", "ref"});
  expect_error([&] { ops::moe_matmul(s, x.reshape({15}).slice(0, 0, 12).reshape({3, 4}), x, w, offsets); },
               ErrorCode::aliasing, {"moe_matmul", "out", "x"});
  // 8-bit experts carry their row scales, and only they do.
  const Tensor scales = ts.make(DType::f32, {8});
  expect_error([&] { ops::moe_matmul(s, out, x, ts.make(DType::i8, {2, 4, 5}), offsets); }, ErrorCode::invalid_argument,
               {"moe_matmul", "w [2, 4, 5] i8", "no per-row scales"});
  Tensor scaled = w;
  scaled.scales = scales.ptr<float>();
  expect_error([&] { ops::moe_matmul(s, out, x, scaled, offsets); }, ErrorCode::invalid_argument,
               {"moe_matmul", "w [2, 4, 5] f32", "carries scales but is not quantized"});
  expect_error([&] { ops::moe_matmul(s, out, ts.make(DType::i8, {3, 5}), w, offsets); }, ErrorCode::dtype_mismatch,
               {"moe_matmul", "x", "i8"});
}

// A prefill-sized product of 8-bit experts on a GPU widens the experts to 16 bits a group at a
// time (MatmulTuning::widen_bytes): one expert per group gives bit for bit the product of
// all experts in one group (the same GEMM tiles over the same rows), every expert's rows scaled by
// its own scales (each expert's values the same, its scales and rows its own).
TEST(MoeMatmulGpu, EightBitExpertsWidenedAGroupAtATimeGiveTheWholeProduct_P1040_E8) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& device = Device::open("cuda");
  const int64_t E = 8, N = 40, K = 96, P = 1040;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<bf16> x_values(size_t(P * K));
  for (bf16& v : x_values) v = f32_to_bf16(normal(rng));
  std::vector<int8_t> w_values(size_t(E * 2 * N * K));
  for (int8_t& v : w_values) v = int8_t(std::uniform_int_distribution<int>(-127, 127)(rng));
  std::vector<float> scale_values(size_t(E * 2 * N));
  for (float& v : scale_values) v = std::uniform_real_distribution<float>(0.001f, 0.002f)(rng);
  // Rows per expert: 130 each, expert 5 none (never widened, never read).
  std::vector<int32_t> offsets_values = {0, 130, 260, 390, 520, 650, 650, 845, 1040};
  Tensors ts(device);
  const Tensor x = ts.from(DType::bf16, {P, K}, x_values), offsets = ts.i32({E + 1}, offsets_values);
  const Tensor scales = ts.f32({E * 2 * N}, scale_values);
  Tensor w = ts.from(DType::i8, {E, 2 * N, K}, w_values);
  w.scales = scales.ptr<float>();
  const ScopedGpuTuning<gpu::MatmulTuning> tuning(device);
  auto product = [&](size_t widen_bytes) {
    gpu::MatmulTuning t = tuning.run_tuning();
    t.widen_bytes = widen_bytes;
    tuning.set(t);
    Tensor out = ts.make(DType::f32, {P, N});
    ops::moe_matmul(ts.stream(), out, x, w, offsets, ops::Activation::swiglu);
    return ts.read<float>(out);
  };
  const std::vector<float> whole = product(0), expert_at_a_time = product(size_t(2 * N * K) * 2);
  EXPECT_EQ(whole, expert_at_a_time);
  // And the product is the experts' own: row 0 by expert 0's first gate and up rows, scaled.
  double gate = 0, up = 0;
  for (int64_t k = 0; k < K; ++k) {
    gate += double(bf16_to_f32(x_values[size_t(k)])) * w_values[size_t(k)];
    up += double(bf16_to_f32(x_values[size_t(k)])) * w_values[size_t(N * K + k)];
  }
  gate *= scale_values[0], up *= scale_values[size_t(N)];
  const double expected = gate / (1.0 + std::exp(-gate)) * up;
  EXPECT_NEAR(whole[0], expected, 1e-4 * std::abs(expected) + 1e-6);
}

// A decode step's routing kernel hands its logits to its first block through a cluster's shared
// memory (sm_90, grids of at most 8 blocks) or through L2 and a ticket: the same logits, so the
// same bits, for every routing case with its router (one block, a cluster of 8, and 20 blocks,
// which always take the ticket).
TEST(MoeRouteGpu, ClusterAndTicketGiveTheSameBits) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::OpTuning> tuning(cuda);
  std::vector<OpCase> routed;
  for (const OpCase& c : moe_cases())
    if (c.name.starts_with("moe_route/router_")) routed.push_back(c);
  const SwitchForms forms{"moe_route: logits handed over in a cluster", "moe_route: logits handed over by a ticket",
                          nvidia_at_least(cuda, 90)};
  const std::vector<Configuration> handovers = {
      expecting({"cluster", tuning.with(&gpu::OpTuning::moe_route_cluster, true)}, forms, true),
      expecting({"ticket", tuning.with(&gpu::OpTuning::moe_route_cluster, false)}, forms, false)};
  EXPECT_GE(expect_configurations_agree(cuda, routed, handovers), 8);
}

TEST(MoeCombine, AddsTheResidualInPlace_T2_k2_C3) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor x = ts.f32({2, 3}, {1, 2, 3, 4, 5, 6});
    // Token 0 takes rows 1 and 0 at weights 0.5 and 2; token 1 takes row 3 at weight 1 and row 2 at 0.
    ops::moe_combine(ts.stream(), x, ts.f32({4, 3}, {1, 1, 1, 10, 10, 10, 7, 7, 7, 100, 200, 300}),
                     ts.f32({2, 2}, {0.5f, 2, 1, 0}), ts.i32({4}, {1, 0, 3, 2}), x);
    EXPECT_EQ(ts.read<float>(x), (std::vector<float>{8, 9, 10, 104, 205, 306})) << backend;
  }
}

TEST(MoeCombine, RejectsPositionOutOfRange_T2_k2) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor out = ts.make(DType::f32, {2, 3});
    expect_error([&] { ops::moe_combine(ts.stream(), out, ts.make(DType::f32, {4, 3}), ts.f32({2, 2}, {1, 0, 1, 0}),
                                        ts.i32({4}, {0, 1, 7, 2})); },
                 ErrorCode::invalid_argument, {"moe_combine", "positions[2]", "= 7", "T·k = 4"});
  }
}

TEST(MoeCombine, RejectsBadShapesDtypesDevicesAndAliasing_T2_k2_C3) {
  Tensors ts(Device::open("cpu")), other(Device::open("ref"));
  Stream& s = ts.stream();
  Tensor out = ts.make(DType::f32, {2, 3}), y = ts.make(DType::f32, {4, 3}), w = ts.make(DType::f32, {2, 2});
  Tensor pos = ts.i32({4}, {0, 1, 2, 3});
  expect_error([&] { ops::moe_combine(s, out, ts.make(DType::f32, {4, 5}), w, pos); }, ErrorCode::shape_mismatch,
               {"moe_combine", "y_grouped", "5"});
  expect_error([&] { ops::moe_combine(s, out, y, ts.make(DType::bf16, {2, 2}), pos); }, ErrorCode::dtype_mismatch,
               {"moe_combine", "weights", "bf16"});
  expect_error([&] { ops::moe_combine(s, out, y, w, ts.make(DType::i32, {3})); }, ErrorCode::shape_mismatch,
               {"moe_combine", "positions", "3"});
  expect_error([&] { ops::moe_combine(s, out, other.make(DType::f32, {4, 3}), w, pos); }, ErrorCode::device_mismatch,
               {"moe_combine", "y_grouped", "ref"});
  expect_error([&] { ops::moe_combine(s, y.reshape({12}).slice(0, 0, 6).reshape({2, 3}), y, w, pos); }, ErrorCode::aliasing,
               {"moe_combine", "out", "y_grouped"});
  expect_error([&] { ops::moe_combine(s, out, y, w, pos, ts.make(DType::f32, {2, 4})); }, ErrorCode::shape_mismatch,
               {"moe_combine", "residual"});
  expect_error([&] { ops::moe_combine(s, y.reshape({12}).slice(0, 0, 6).reshape({2, 3}), ts.make(DType::f32, {4, 3}), w, pos,
                                      y.reshape({12}).slice(0, 3, 9).reshape({2, 3})); },
               ErrorCode::aliasing, {"moe_combine", "out", "residual"});
}

}  // namespace
}  // namespace ding::testing
