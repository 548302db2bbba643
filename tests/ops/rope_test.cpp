// rope: closed-form facts on the reference (and the CPU kernel) for both layouts, and bad
// input through the public front end.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Runs `f`, expecting a ding::Error with `code` whose message contains every string of `parts`.

const char* const kBackends[] = {"ref", "cpu"};
const ops::RopeLayout kLayouts[] = {ops::RopeLayout::neox, ops::RopeLayout::interleaved};

TEST(RopeSanity, PositionZeroIsIdentity_B1_T1_H3_D64) {
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 5);
      Tensor x = run.normal(DType::f32, {1, 1, 3, 64}), y = run.output("y", DType::f32, {1, 1, 3, 64});
      ops::rope(run.stream, y, x, {.layout = layout});
      EXPECT_EQ(run.read(y), run.read(x)) << backend;
    }
}

// Index of the partner of dim i < R/2 in each layout, and of dim i itself.
std::pair<int, int> pair_of(ops::RopeLayout layout, int i, int R) {
  return layout == ops::RopeLayout::neox ? std::pair{i, i + R / 2} : std::pair{2 * i, 2 * i + 1};
}

TEST(RopeSanity, RotationPreservesPairNormsAndCopiesTail_T17_D80_R32_pos_1000) {
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 5);
      Tensor x = run.normal(DType::f32, {1, 17, 2, 80}), y = run.output("y", DType::f32, {1, 17, 2, 80});
      ops::rope(run.stream, y, x, {.layout = layout, .rotary_dim = 32, .position_offset = 1000});
      const auto a = run.read(x), b = run.read(y);
      for (int row = 0; row < 17 * 2; ++row) {
        for (int i = 0; i < 16; ++i) {
          auto [p, q] = pair_of(layout, i, 32);
          const double before = std::hypot(a[row * 80 + p], a[row * 80 + q]);
          EXPECT_NEAR(std::hypot(b[row * 80 + p], b[row * 80 + q]), before, 1e-5 * (1 + before)) << backend;
        }
        for (int d = 32; d < 80; ++d) EXPECT_EQ(b[row * 80 + d], a[row * 80 + d]) << backend;
      }
    }
}

TEST(RopeSanity, FirstPairTurnsByPosition_pos1_and_pos2_inplace) {
  // Frequency index 0 has θ⁰ = 1, so its pair turns by exactly `pos` radians: (1, 0) → (cos p, sin p).
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 1);
      std::vector<double> v(2 * 8, 0.0);
      auto [p, q] = pair_of(layout, 0, 8);
      v[p] = 1.0, v[8 + p] = 1.0;
      Tensor x = run.values(DType::f32, {2, 1, 1, 8}, v), positions = run.ints({2, 1}, {1, 2});
      ops::rope(run.stream, x, x, {.layout = layout, .positions = positions});
      const auto r = run.read(x);
      for (int b = 0; b < 2; ++b) {
        EXPECT_NEAR(r[b * 8 + p], std::cos(b + 1.0), 1e-7) << backend;
        EXPECT_NEAR(r[b * 8 + q], std::sin(b + 1.0), 1e-7) << backend;
      }
    }
}

class RopeBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor x = run.normal(DType::f32, {2, 3, 4, 8});
  Tensor y = run.output("y", DType::f32, {2, 3, 4, 8});
};

TEST_F(RopeBadInput, OddRotaryDim_5) {
  expect_error([&] { ops::rope(run.stream, y, x, {.rotary_dim = 5}); }, ErrorCode::invalid_argument, {"rope", "rotary_dim", "5"});
}

TEST_F(RopeBadInput, RotaryDimAboveD_10_D8) {
  expect_error([&] { ops::rope(run.stream, y, x, {.rotary_dim = 10}); }, ErrorCode::invalid_argument,
               {"rope", "rotary_dim", "D = 8", "10"});
}

TEST_F(RopeBadInput, Rank3Input) {
  Tensor x3 = run.normal(DType::f32, {2, 3, 8});
  expect_error([&] { ops::rope(run.stream, x3, x3); }, ErrorCode::shape_mismatch, {"rope", "rank 4", "[2, 3, 8]"});
}

TEST_F(RopeBadInput, PositionsShape_2x4_vs_T3) {
  Tensor positions = run.ints({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_error([&] { ops::rope(run.stream, y, x, {.positions = positions}); }, ErrorCode::shape_mismatch,
               {"rope", "positions", "T (from x)", "4", "3"});
}

TEST_F(RopeBadInput, FloatPositions_f32) {
  Tensor positions = run.normal(DType::f32, {2, 3});
  expect_error([&] { ops::rope(run.stream, y, x, {.positions = positions}); }, ErrorCode::dtype_mismatch,
               {"rope", "positions", "f32"});
}

TEST_F(RopeBadInput, OutShape_D6) {
  Tensor y6 = run.output("y6", DType::f32, {2, 3, 4, 6});
  expect_error([&] { ops::rope(run.stream, y6, x); }, ErrorCode::shape_mismatch, {"rope", "out", "[2, 3, 4, 6]", "[2, 3, 4, 8]"});
}

TEST_F(RopeBadInput, OtherDevice_x_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor xr = other.normal(DType::f32, {2, 3, 4, 8});
  expect_error([&] { ops::rope(run.stream, y, xr); }, ErrorCode::device_mismatch, {"rope", "x", "ref"});
}

TEST_F(RopeBadInput, PartialOverlap_out_shifted_by_one_batch) {
  Tensor big = run.normal(DType::f32, {3, 3, 4, 8});
  Tensor in = big.slice(0, 0, 2), out = big.slice(0, 1, 3);
  expect_error([&] { ops::rope(run.stream, out, in); }, ErrorCode::aliasing, {"rope", "out", "overlaps", "x"});
}

TEST_F(RopeBadInput, NegativeOffset_minus1) {
  expect_error([&] { ops::rope(run.stream, y, x, {.position_offset = -1}); }, ErrorCode::invalid_argument,
               {"rope", "position_offset", "-1"});
}

TEST_F(RopeBadInput, NonPositiveTheta_0) {
  expect_error([&] { ops::rope(run.stream, y, x, {.theta = 0.0f}); }, ErrorCode::invalid_argument, {"rope", "theta", "0"});
}

TEST_F(RopeBadInput, ZeroSizeDim_H0) {
  Tensor empty = Tensor::view(x.data, &cpu, DType::f32, {2, 3, 0, 8});
  expect_error([&] { ops::rope(run.stream, empty, empty); }, ErrorCode::invalid_argument, {"rope", "x", "size 0"});
}

TEST_F(RopeBadInput, OverflowShape_2pow31_tokens_and_heads) {
  const int64_t n = int64_t(1) << 31;
  Tensor huge = Tensor::view(x.data, &cpu, DType::f32, {n, n, n, 8});
  expect_error([&] { ops::rope(run.stream, huge, huge); }, ErrorCode::invalid_argument, {"rope", "x", "64 bits"});
}

}  // namespace
}  // namespace ding::testing
