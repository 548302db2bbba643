// layer_norm and rms_norm: closed-form facts on the reference (and the CPU kernel), the
// residual forms including sum_out in place, and bad input through the public front end.
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

TEST(LayerNormSanity, KnownRow_1234_weight2_bias1) {
  // mean 2.5, biased variance 1.25: y = 2·(x − 2.5)/√(1.25 + eps) + 1.
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {1, 4}, {1, 2, 3, 4});
    Tensor w = run.values(DType::f32, {4}, {2, 2, 2, 2}), b = run.values(DType::bf16, {4}, {1, 1, 1, 1});
    Tensor y = run.output("y", DType::f32, {1, 4});
    ops::layer_norm(run.stream, y, x, w, {.eps = 1e-5f, .bias = b});
    const auto v = run.read(y);
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(v[c], 2 * (c + 1 - 2.5) / std::sqrt(1.25 + 1e-5) + 1, 1e-6) << backend;
  }
}

TEST(LayerNormSanity, OutputHasZeroMeanUnitVariance_rows3_C1600) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 7);
    Tensor x = run.normal(DType::f32, {3, 1600}, 5.0), w = run.values(DType::f32, {1600}, std::vector<double>(1600, 1));
    Tensor y = run.output("y", DType::f32, {3, 1600});
    ops::layer_norm(run.stream, y, x, w, {.eps = 1e-12f});
    const auto v = run.read(y);
    for (int r = 0; r < 3; ++r) {
      double mean = 0, square = 0;
      for (int c = 0; c < 1600; ++c) mean += v[r * 1600 + c], square += v[r * 1600 + c] * v[r * 1600 + c];
      EXPECT_NEAR(mean / 1600, 0.0, 1e-6) << backend;
      EXPECT_NEAR(square / 1600, 1.0, 1e-5) << backend;
    }
  }
}

TEST(RmsNormSanity, ResidualSumIsConstantRow_C5_sumout_is_x) {
  // x + residual = 3 everywhere, so y = 3/√(9 + eps)·w and x becomes 3 (sum_out in place).
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {1, 5}, {1, 2, 3, 4, 5}), res = run.values(DType::f32, {1, 5}, {2, 1, 0, -1, -2});
    Tensor w = run.values(DType::f32, {5}, {1, 2, 3, 4, 5}), y = run.output("y", DType::f32, {1, 5});
    ops::rms_norm(run.stream, y, x, w, {.eps = 1e-6f, .residual = res, .sum_out = x});
    const auto v = run.read(y), h = run.read(x);
    for (int c = 0; c < 5; ++c) {
      EXPECT_NEAR(v[c], 3 / std::sqrt(9 + 1e-6) * (c + 1), 1e-6) << backend;
      EXPECT_EQ(h[c], 3.0) << backend;
    }
  }
}

TEST(RmsNormSanity, ScaleInvariant_C17_times8) {
  // rms_norm(k·x) = rms_norm(x) when eps is negligible beside mean(x²).
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 3);
    std::vector<double> base(17);
    for (int c = 0; c < 17; ++c) base[c] = std::sin(c + 1.0);
    std::vector<double> scaled = base;
    for (double& s : scaled) s *= 8;
    Tensor x1 = run.values(DType::f32, {1, 17}, base), x8 = run.values(DType::f32, {1, 17}, scaled);
    Tensor w = run.values(DType::f32, {17}, std::vector<double>(17, 1.0));
    Tensor y1 = run.output("y1", DType::f32, {1, 17}), y8 = run.output("y8", DType::f32, {1, 17});
    ops::rms_norm(run.stream, y1, x1, w, {.eps = 1e-12f});
    ops::rms_norm(run.stream, y8, x8, w, {.eps = 1e-12f});
    const auto a = run.read(y1), b = run.read(y8);
    for (int c = 0; c < 17; ++c) EXPECT_NEAR(a[c], b[c], 1e-6) << backend;
  }
}

class NormBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor x = run.normal(DType::f32, {3, 8});
  Tensor w = run.normal(DType::f32, {8});
  Tensor y = run.output("y", DType::f32, {3, 8});
};

TEST_F(NormBadInput, WeightLength_C8_weight7) {
  Tensor w7 = run.normal(DType::f32, {7});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w7); }, ErrorCode::shape_mismatch, {"rms_norm", "weight", "7", "8"});
  expect_error([&] { ops::layer_norm(run.stream, y, x, w7); }, ErrorCode::shape_mismatch, {"layer_norm", "weight", "7", "8"});
}

TEST_F(NormBadInput, OutShape_out3x9) {
  Tensor y9 = run.output("y9", DType::f32, {3, 9});
  expect_error([&] { ops::rms_norm(run.stream, y9, x, w); }, ErrorCode::shape_mismatch, {"rms_norm", "out", "[3, 9]", "[3, 8]"});
}

TEST_F(NormBadInput, BiasLength_C8_bias5) {
  Tensor b5 = run.normal(DType::f32, {5});
  expect_error([&] { ops::layer_norm(run.stream, y, x, w, {.bias = b5}); }, ErrorCode::shape_mismatch,
               {"layer_norm", "bias", "5", "8"});
}

TEST_F(NormBadInput, ResidualShape_3x8_vs_2x8) {
  Tensor r = run.normal(DType::f32, {2, 8});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.residual = r}); }, ErrorCode::shape_mismatch,
               {"rms_norm", "residual", "[2, 8]", "[3, 8]"});
}

TEST_F(NormBadInput, IntegerWeight_i32) {
  Tensor wi = run.random_ints({8}, 0, 3);
  expect_error([&] { ops::layer_norm(run.stream, y, x, wi); }, ErrorCode::dtype_mismatch, {"layer_norm", "weight", "i32"});
}

TEST_F(NormBadInput, OtherDevice_weight_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor wr = other.normal(DType::f32, {8});
  expect_error([&] { ops::rms_norm(run.stream, y, x, wr); }, ErrorCode::device_mismatch, {"rms_norm", "weight", "ref"});
}

TEST_F(NormBadInput, OutIsX_forbidden) {
  expect_error([&] { ops::rms_norm(run.stream, x, x, w); }, ErrorCode::aliasing, {"rms_norm", "out", "overlaps", "x"});
  expect_error([&] { ops::layer_norm(run.stream, x, x, w); }, ErrorCode::aliasing, {"layer_norm", "out", "x"});
}

TEST_F(NormBadInput, OutIsResidual_forbidden) {
  Tensor r = run.normal(DType::f32, {3, 8});
  expect_error([&] { ops::rms_norm(run.stream, r, x, w, {.residual = r}); }, ErrorCode::aliasing,
               {"rms_norm", "out", "residual"});
}

TEST_F(NormBadInput, SumOutWithoutResidual) {
  Tensor s = run.output("s", DType::f32, {3, 8});
  expect_error([&] { ops::layer_norm(run.stream, y, x, w, {.sum_out = s}); }, ErrorCode::invalid_argument,
               {"layer_norm", "sum_out", "residual"});
}

TEST_F(NormBadInput, SumOutPartlyOverlapsX_shifted_by_one_row) {
  Tensor big = run.normal(DType::f32, {4, 8}), r = run.normal(DType::f32, {3, 8});
  Tensor in = big.slice(0, 0, 3), sum = big.slice(0, 1, 4);
  expect_error([&] { ops::rms_norm(run.stream, y, in, w, {.residual = r, .sum_out = sum}); }, ErrorCode::aliasing,
               {"rms_norm", "sum_out", "overlaps", "x"});
}

TEST_F(NormBadInput, ZeroSizeDim_x3x0) {
  Tensor empty = Tensor::view(x.data, &cpu, DType::f32, {3, 0});
  expect_error([&] { ops::rms_norm(run.stream, y, empty, w); }, ErrorCode::invalid_argument, {"rms_norm", "x", "size 0"});
}

TEST_F(NormBadInput, OverflowShape_2pow31_cubed) {
  const int64_t n = int64_t(1) << 31;
  Tensor huge = Tensor::view(x.data, &cpu, DType::f32, {n, n, n});
  expect_error([&] { ops::layer_norm(run.stream, y, huge, w); }, ErrorCode::invalid_argument, {"layer_norm", "x", "64 bits"});
}

TEST_F(NormBadInput, NonPositiveEps_0) {
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.eps = 0.0f}); }, ErrorCode::invalid_argument,
               {"rms_norm", "eps", "0"});
}

}  // namespace
}  // namespace ding::testing
