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

TEST(NormSanity, StridedViewsMatchContiguousCopies_T3_H4_D8_heads_of_qkv) {
  // x: q heads [0, 4) of a [3, 6, 8] q/k/v product; residual: heads [1, 5) of [3, 7, 8]; out and
  // sum_out: heads [1, 5) of [3, 5, 8] and [2, 6) of [3, 6, 8]. The same op on contiguous copies
  // must give the same values, and the heads around the views must stay as they were.
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 5);
    const Tensor x = run.normal(DType::f32, {3, 6, 8}).slice(1, 0, 4), residual = run.normal(DType::f32, {3, 7, 8}).slice(1, 1, 5);
    const Tensor out_buffer = run.normal(DType::f32, {3, 5, 8}), sum_buffer = run.normal(DType::f32, {3, 6, 8});
    const Tensor out = out_buffer.slice(1, 1, 5), sum_out = sum_buffer.slice(1, 2, 6);
    const Tensor w = run.uniform(DType::f32, {8}, 0.5, 1.5), b = run.normal(DType::f32, {8});
    const auto out_before = run.read(out_buffer);
    Tensor xc = run.output("xc", DType::f32, {3, 4, 8}), rc = run.output("rc", DType::f32, {3, 4, 8});
    Tensor yc = run.output("yc", DType::f32, {3, 4, 8}), sc = run.output("sc", DType::f32, {3, 4, 8});
    Tensor y_view = run.output("y_view", DType::f32, {3, 4, 8}), s_view = run.output("s_view", DType::f32, {3, 4, 8});
    ops::copy(run.stream, xc, x);
    ops::copy(run.stream, rc, residual);
    for (bool layer : {false, true}) {
      if (layer) {
        ops::layer_norm(run.stream, out, x, w, {.bias = b, .residual = residual, .sum_out = sum_out});
        ops::layer_norm(run.stream, yc, xc, w, {.bias = b, .residual = rc, .sum_out = sc});
      } else {
        ops::rms_norm(run.stream, out, x, w, {.residual = residual, .sum_out = sum_out});
        ops::rms_norm(run.stream, yc, xc, w, {.residual = rc, .sum_out = sc});
      }
      ops::copy(run.stream, y_view, out);
      ops::copy(run.stream, s_view, sum_out);
      EXPECT_EQ(run.read(y_view), run.read(yc)) << backend << (layer ? " layer_norm" : " rms_norm");
      EXPECT_EQ(run.read(s_view), run.read(sc)) << backend;
      const auto out_after = run.read(out_buffer);
      for (int64_t t = 0; t < 3; ++t)  // head 0 of out's buffer is outside the view
        for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(out_after[t * 40 + c], out_before[t * 40 + c]) << backend;
    }
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

// A weight with leading dims must have x's last ones: [2, 8] over x [3, 2, 8], not [3, 8] or [4, 8].
TEST_F(NormBadInput, WeightRowsNotXsLastDims_x3x2x8) {
  Tensor x3 = run.normal(DType::f32, {3, 2, 8}), y3 = run.output("y3", DType::f32, {3, 2, 8});
  for (int64_t rows : {3, 4}) {
    Tensor w_rows = run.normal(DType::f32, {rows, 8});
    expect_error([&] { ops::rms_norm(run.stream, y3, x3, w_rows); }, ErrorCode::shape_mismatch,
                 {"rms_norm", "weight", "[" + std::to_string(rows) + ", 8]", "x's last ones"});
  }
  Tensor w_too_deep = run.normal(DType::f32, {1, 3, 2, 8});
  expect_error([&] { ops::rms_norm(run.stream, y3, x3, w_too_deep); }, ErrorCode::shape_mismatch,
               {"rms_norm", "weight", "rank 1 to 3"});
  Tensor b = run.normal(DType::f32, {8});
  expect_error([&] { ops::layer_norm(run.stream, y3, x3, run.normal(DType::f32, {2, 8}), {.bias = b}); },
               ErrorCode::shape_mismatch, {"layer_norm", "bias", "weight"});
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

TEST_F(NormBadInput, GateShapeDtypeOrOverlap) {
  Tensor g = run.normal(DType::f32, {3, 9});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.gate = g}); }, ErrorCode::shape_mismatch,
               {"rms_norm", "gate", "[3, 9]", "[3, 8]"});
  Tensor gi = run.random_ints({3, 8}, 0, 3);
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.gate = gi}); }, ErrorCode::dtype_mismatch, {"rms_norm", "gate", "i32"});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.gate = y}); }, ErrorCode::aliasing, {"rms_norm", "out", "gate"});
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

TEST_F(NormBadInput, StridedLastDim_every_other_column) {
  // Leading dims may have any strides; the last one must step by one element, for every row tensor.
  Tensor wide = run.normal(DType::f32, {3, 16});
  Tensor every_other = wide;
  every_other.strides = {16, 2};
  every_other.shape = {3, 8};
  Tensor s = run.output("s", DType::f32, {3, 8}), r = run.normal(DType::f32, {3, 8});
  expect_error([&] { ops::rms_norm(run.stream, y, every_other, w); }, ErrorCode::invalid_argument,
               {"rms_norm", "x", "contiguous last dimension", "stride 2"});
  expect_error([&] { ops::layer_norm(run.stream, every_other, x, w); }, ErrorCode::invalid_argument,
               {"layer_norm", "out", "contiguous last dimension"});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.residual = every_other}); }, ErrorCode::invalid_argument,
               {"rms_norm", "residual", "contiguous last dimension"});
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.residual = r, .sum_out = every_other}); },
               ErrorCode::invalid_argument, {"rms_norm", "sum_out", "contiguous last dimension"});
}

TEST_F(NormBadInput, StridedWeightOrBias_stride2) {
  Tensor w16 = run.normal(DType::f32, {16});
  Tensor strided = w16;
  strided.shape = {8};
  strided.strides = {2};
  expect_error([&] { ops::rms_norm(run.stream, y, x, strided); }, ErrorCode::invalid_argument,
               {"rms_norm", "weight", "contiguous"});
  expect_error([&] { ops::layer_norm(run.stream, y, x, w, {.bias = strided}); }, ErrorCode::invalid_argument,
               {"layer_norm", "bias", "contiguous"});
}

TEST_F(NormBadInput, NonPositiveEps_0) {
  expect_error([&] { ops::rms_norm(run.stream, y, x, w, {.eps = 0.0f}); }, ErrorCode::invalid_argument,
               {"rms_norm", "eps", "0"});
}

}  // namespace
}  // namespace ding::testing
