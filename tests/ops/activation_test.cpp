// gelu, silu, swiglu, clamp: closed-form facts on the reference (and the CPU kernel), and bad
// input through the public front end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Runs `f`, expecting a ding::Error with `code` whose message contains every string of `parts`.

const char* const kBackends[] = {"ref", "cpu"};
const std::vector<double> kPoints = {0.0, 0.3, 1.0, 2.5, 7.0, 30.0, 1e-3, 4.0, 12.0};

std::vector<double> negated(std::vector<double> v) {
  for (double& x : v) x = -x;
  return v;
}

// f(x) − f(−x) = x holds for both: gelu because tanh is odd, silu because σ(x) + σ(−x) = 1.
template <class Op>
void check_odd_part_is_identity(Op op, const char* backend) {
  CaseRun run(Device::open(backend), 1);
  const int64_t n = int64_t(kPoints.size());
  Tensor xp = run.values(DType::f32, {n}, kPoints), xn = run.values(DType::f32, {n}, negated(kPoints));
  Tensor yp = run.output("yp", DType::f32, {n}), yn = run.output("yn", DType::f32, {n});
  op(run.stream, yp, xp);
  op(run.stream, yn, xn);
  const auto a = run.read(yp), b = run.read(yn);
  for (size_t i = 0; i < kPoints.size(); ++i) EXPECT_NEAR(a[i] - b[i], kPoints[i], 1e-6 * (1 + kPoints[i])) << backend;
}

TEST(GeluSanity, OddPartIsIdentity_9points) {
  for (const char* backend : kBackends) check_odd_part_is_identity(ops::gelu, backend);
}

TEST(SiluSanity, OddPartIsIdentity_9points) {
  for (const char* backend : kBackends) check_odd_part_is_identity(ops::silu, backend);
}

TEST(GeluSanity, ZeroAndSaturation_0_pm30) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {3}, {0.0, 30.0, -30.0}), y = run.output("y", DType::f32, {3});
    ops::gelu(run.stream, y, x);
    const auto v = run.read(y);
    EXPECT_EQ(v[0], 0.0) << backend;
    EXPECT_NEAR(v[1], 30.0, 1e-5) << backend;
    EXPECT_NEAR(v[2], 0.0, 1e-6) << backend;
  }
}

TEST(SiluSanity, AtLn3IsThreeQuartersLn3_inplace) {
  // σ(ln 3) = 3/4, computed in place (out == x).
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {1}, {std::log(3.0)});
    ops::silu(run.stream, x, x);
    EXPECT_NEAR(run.read(x)[0], 0.75 * std::log(3.0), 1e-7) << backend;
  }
}

TEST(SwigluSanity, UpOfTwoDoublesSilu_n9) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    const int64_t n = int64_t(kPoints.size());
    Tensor gate = run.values(DType::f32, {n}, negated(kPoints)), up = run.values(DType::f32, {n}, std::vector<double>(n, 2.0));
    Tensor y = run.output("y", DType::f32, {n}), s = run.output("s", DType::f32, {n});
    ops::swiglu(run.stream, y, gate, up);
    ops::silu(run.stream, s, gate);
    const auto a = run.read(y), b = run.read(s);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], 2 * b[i]) << backend;
  }
}

TEST(ClampSanity, BoundsInfinitiesNaNAndSignedZero_lo_m1_hi_1) {
  // torch.clamp: values outside [lo, hi] become lo or hi, NaN stays NaN, −0 stays −0. 17
  // values, so the CPU's 8-wide path and its scalar tail both see a NaN.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> in = {-3, -1, 0, 0.5, 2, nan, -inf, inf, -0.0, 0.75, -0.25, 1.5, -1.5, nan, 1, 4, nan};
  const std::vector<double> want = {-1, -1, 0, 0.5, 1, nan, -1, 1, -0.0, 0.75, -0.25, 1, -1, nan, 1, 1, nan};
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    const int64_t n = int64_t(in.size());
    Tensor x = run.values(DType::f32, {n}, in), y = run.output("y", DType::f32, {n});
    ops::clamp(run.stream, y, x, -1.0f, 1.0f);
    const auto v = run.read(y);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(v[i])) << backend << " element " << i;
      } else {
        EXPECT_EQ(v[i], want[i]) << backend << " element " << i;
        EXPECT_EQ(std::signbit(v[i]), std::signbit(want[i])) << backend << " element " << i;
      }
    }
  }
}

TEST(ClampSanity, InPlaceOnKOfQkvLeavesQAndVAlone_T2_H2_Hkv1_D3) {
  // qkv [2, (2 + 2·1)·3]: k is columns [6, 9) of each row, clamped in place to [−0.5, 0.5].
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    std::vector<double> v(24);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (double(i) - 11.5) / 4;  // −2.875 … 2.875
    Tensor qkv = run.values(DType::f32, {2, 12}, v);
    Tensor k = qkv.slice(1, 6, 9);
    ops::clamp(run.stream, k, k, -0.5f, 0.5f);
    const auto after = run.read(qkv);
    for (int64_t i = 0; i < 24; ++i) {
      const bool in_k = i % 12 >= 6 && i % 12 < 9;
      EXPECT_EQ(after[i], in_k ? std::min(0.5, std::max(-0.5, v[i])) : v[i]) << backend << " element " << i;
    }
  }
}

class ActivationBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor x = run.normal(DType::f32, {4, 6});
  Tensor y = run.output("y", DType::f32, {4, 6});
};

TEST_F(ActivationBadInput, ShapeMismatch_out4x5_x4x6) {
  Tensor y5 = run.output("y5", DType::f32, {4, 5});
  expect_error([&] { ops::gelu(run.stream, y5, x); }, ErrorCode::shape_mismatch, {"gelu", "x", "[4, 6]", "[4, 5]"});
  expect_error([&] { ops::silu(run.stream, y5, x); }, ErrorCode::shape_mismatch, {"silu", "[4, 6]", "[4, 5]"});
}

TEST_F(ActivationBadInput, SwigluUpShape_4x6_vs_4x7) {
  Tensor up = run.normal(DType::f32, {4, 7});
  expect_error([&] { ops::swiglu(run.stream, y, x, up); }, ErrorCode::shape_mismatch, {"swiglu", "up", "[4, 7]", "[4, 6]"});
}

TEST_F(ActivationBadInput, IntegerDtype_i32) {
  Tensor xi = run.random_ints({4, 6}, 0, 3);
  expect_error([&] { ops::silu(run.stream, y, xi); }, ErrorCode::dtype_mismatch, {"silu", "x", "i32"});
  expect_error([&] { ops::swiglu(run.stream, y, x, xi); }, ErrorCode::dtype_mismatch, {"swiglu", "up", "i32"});
}

TEST_F(ActivationBadInput, OtherDevice_gate_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor g = other.normal(DType::f32, {4, 6});
  expect_error([&] { ops::swiglu(run.stream, y, g, x); }, ErrorCode::device_mismatch, {"swiglu", "gate", "ref"});
}

TEST_F(ActivationBadInput, PartialOverlap_out_shifted_by_one_row) {
  Tensor big = run.normal(DType::f32, {5, 6});
  Tensor in = big.slice(0, 0, 4), out = big.slice(0, 1, 5);
  expect_error([&] { ops::gelu(run.stream, out, in); }, ErrorCode::aliasing, {"gelu", "out", "overlaps", "x"});
}

TEST_F(ActivationBadInput, ZeroSizeDim_4x0) {
  Tensor empty = Tensor::view(x.data, &cpu, DType::f32, {4, 0});
  expect_error([&] { ops::gelu(run.stream, empty, empty); }, ErrorCode::invalid_argument, {"gelu", "out", "size 0"});
}

TEST_F(ActivationBadInput, ClampBounds_lo_above_hi_and_NaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { ops::clamp(run.stream, y, x, 2.0f, 1.0f); }, ErrorCode::invalid_argument,
               {"clamp", "lo = 2", "hi = 1"});
  expect_error([&] { ops::clamp(run.stream, y, x, nan, 1.0f); }, ErrorCode::invalid_argument, {"clamp", "lo", "NaN"});
  expect_error([&] { ops::clamp(run.stream, y, x, -1.0f, nan); }, ErrorCode::invalid_argument, {"clamp", "hi", "NaN"});
}

TEST_F(ActivationBadInput, ClampShapeDtypeAndOverlap) {
  Tensor y5 = run.output("y5", DType::f32, {4, 5});
  expect_error([&] { ops::clamp(run.stream, y5, x, -1.0f, 1.0f); }, ErrorCode::shape_mismatch,
               {"clamp", "x", "[4, 6]", "[4, 5]"});
  Tensor xi = run.random_ints({4, 6}, 0, 3);
  expect_error([&] { ops::clamp(run.stream, y, xi, -1.0f, 1.0f); }, ErrorCode::dtype_mismatch, {"clamp", "x", "i32"});
  Tensor big = run.normal(DType::f32, {5, 6});
  Tensor in = big.slice(0, 0, 4), out = big.slice(0, 1, 5);
  expect_error([&] { ops::clamp(run.stream, out, in, -1.0f, 1.0f); }, ErrorCode::aliasing, {"clamp", "out", "overlaps", "x"});
}

TEST_F(ActivationBadInput, ClampStridedLastDim_every_other_column) {
  // Views of fused products are taken (leading strides free), but the last dim must step by one.
  Tensor wide = run.normal(DType::f32, {4, 12});
  Tensor every_other = wide;
  every_other.shape = {4, 6};
  every_other.strides = {12, 2};
  expect_error([&] { ops::clamp(run.stream, y, every_other, -1.0f, 1.0f); }, ErrorCode::invalid_argument,
               {"clamp", "x", "contiguous last dimension", "stride 2"});
  expect_error([&] { ops::clamp(run.stream, every_other, every_other, -1.0f, 1.0f); }, ErrorCode::invalid_argument,
               {"clamp", "out", "contiguous last dimension"});
}

TEST_F(ActivationBadInput, SigmoidGateShapes_gate_4x3_and_3x6_and_overlap) {
  const Tensor bad_cols = run.normal(DType::f32, {4, 3}), bad_rows = run.normal(DType::f32, {3, 6});
  expect_error([&] { ops::sigmoid_gate(run.stream, y, x, bad_cols); }, ErrorCode::shape_mismatch,
               {"sigmoid_gate", "gate", "6 or 1", "[4, 3]"});
  expect_error([&] { ops::sigmoid_gate(run.stream, y, x, bad_rows); }, ErrorCode::shape_mismatch, {"sigmoid_gate", "gate"});
  expect_error([&] { ops::sigmoid_gate(run.stream, y, x, y); }, ErrorCode::aliasing, {"sigmoid_gate", "out", "gate"});
  const Tensor ints = run.random_ints({4, 1}, 0, 3);
  expect_error([&] { ops::sigmoid_gate(run.stream, y, x, ints); }, ErrorCode::dtype_mismatch, {"sigmoid_gate", "gate", "i32"});
}

// x·σ(gate) at gates where σ is 0, ½, 1 and its two-sided values, per row and per element.
TEST(SigmoidGateSanity, KnownValues_per_row_and_per_element) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    const Tensor x = run.values(DType::f32, {3, 2}, {2, -4, 1, 3, 5, 7});
    const Tensor per_row = run.values(DType::f32, {3, 1}, {0, -200, 200});
    const Tensor y = run.output("y", DType::f32, {3, 2});
    ops::sigmoid_gate(run.stream, y, x, per_row);
    const std::vector<double> want_rows = {1, -2, 0, 0, 5, 7};
    const auto got_rows = run.read(y);
    for (size_t i = 0; i < want_rows.size(); ++i) EXPECT_NEAR(got_rows[i], want_rows[i], 1e-6) << backend << " " << i;
    const double l3 = std::log(3.0);  // σ(ln 3) = 3/4, σ(−ln 3) = 1/4
    const Tensor gates = run.values(DType::f32, {3, 2}, {l3, -l3, 0, 0, l3, -l3});
    ops::sigmoid_gate(run.stream, y, x, gates);
    const std::vector<double> want = {1.5, -1, 0.5, 1.5, 3.75, 1.75};
    const auto got = run.read(y);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << backend << " " << i;
  }
}

// Closed forms of each ActivationFn at points where they are known exactly or through std::erf
// (an independent evaluation of the erf GELU), plain and gated, on every backend.
TEST(ActivationSanity, KnownValues_every_function_plain_and_gated) {
  const std::vector<double> xs = {-2, -0.5, 0, 0.5, 3};
  auto expected = [](ops::ActivationFn fn, double v) {
    switch (fn) {
      case ops::ActivationFn::silu: return v / (1 + std::exp(-v));
      case ops::ActivationFn::gelu_erf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      case ops::ActivationFn::gelu_tanh: return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      case ops::ActivationFn::quick_gelu: return v / (1 + std::exp(-1.702 * v));
      case ops::ActivationFn::relu: return std::max(v, 0.0);
    }
    return v;
  };
  for (const char* backend : kBackends)
    for (ops::ActivationFn fn : {ops::ActivationFn::silu, ops::ActivationFn::gelu_erf, ops::ActivationFn::gelu_tanh,
                                 ops::ActivationFn::quick_gelu, ops::ActivationFn::relu}) {
      CaseRun run(Device::open(backend), 1);
      const Tensor x = run.values(DType::f32, {1, 5}, xs);
      const Tensor y = run.output("y", DType::f32, {1, 5});
      ops::activation(run.stream, y, x, fn);
      const auto got = run.read(y);
      for (size_t i = 0; i < xs.size(); ++i)
        EXPECT_NEAR(got[i], expected(fn, xs[i]), 1e-6) << backend << " " << ops::activation_fn_name(fn) << " x = " << xs[i];
      // Gated: row [g | u] with u = 2 − g.
      std::vector<double> gated(2 * xs.size());
      for (size_t i = 0; i < xs.size(); ++i) gated[i] = xs[i], gated[xs.size() + i] = 2 - xs[i];
      const Tensor xg = run.values(DType::f32, {1, 10}, gated);
      ops::activation(run.stream, y, xg, fn, /*gated=*/true);
      const auto got_gated = run.read(y);
      for (size_t i = 0; i < xs.size(); ++i)
        EXPECT_NEAR(got_gated[i], expected(fn, xs[i]) * (2 - xs[i]), 1e-6) << backend << " gated " << ops::activation_fn_name(fn);
    }
}

TEST_F(ActivationBadInput, ActivationShapesInPlaceGatedAndDtype) {
  const Tensor x12 = run.normal(DType::f32, {4, 12}), x7 = run.normal(DType::f32, {4, 7});
  expect_error([&] { ops::activation(run.stream, y, x7, ops::ActivationFn::relu); }, ErrorCode::shape_mismatch,
               {"activation", "x's last dim must be 6", "[4, 7]"});
  expect_error([&] { ops::activation(run.stream, y, x, ops::ActivationFn::relu, true); }, ErrorCode::shape_mismatch,
               {"activation", "gated", "12"});
  const Tensor y12 = x12.slice(1, 0, 6);  // not contiguous
  expect_error([&] { ops::activation(run.stream, y12, x, ops::ActivationFn::silu); }, ErrorCode::invalid_argument,
               {"activation", "out"});
  const Tensor inplace = run.normal(DType::f32, {1, 12});
  const Tensor first_half = Tensor::view(inplace.data, &cpu, DType::f32, {1, 6});
  expect_error([&] { ops::activation(run.stream, first_half, inplace, ops::ActivationFn::silu, true); },
               ErrorCode::aliasing, {"activation", "out", "x"});
  const Tensor ints = run.random_ints({4, 6}, 0, 3);
  expect_error([&] { ops::activation(run.stream, y, ints, ops::ActivationFn::relu); }, ErrorCode::dtype_mismatch,
               {"activation", "x", "i32"});
  expect_error([&] { ops::activation(run.stream, y, x, ops::ActivationFn(9)); }, ErrorCode::invalid_argument,
               {"activation", "fn = 9"});
  EXPECT_EQ(ops::activation_fn("gelu"), ops::ActivationFn::gelu_erf);
  EXPECT_FALSE(ops::activation_fn("mish").has_value());
}

TEST_F(ActivationBadInput, OverflowShape_2pow31_cubed) {
  const int64_t n = int64_t(1) << 31;
  Tensor huge = Tensor::view(x.data, &cpu, DType::f32, {n, n, n});
  expect_error([&] { ops::silu(run.stream, huge, huge); }, ErrorCode::invalid_argument, {"silu", "64 bits"});
}

}  // namespace
}  // namespace ding::testing
