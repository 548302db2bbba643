// softmax: closed-form facts on the reference (and the CPU kernel), and bad input through the
// public front end.
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

TEST(SoftmaxSanity, EqualLogitsGiveUniformRows_rows3_Tk7) {
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {3, 7}, std::vector<double>(21, 4.25));
    Tensor y = run.output("y", DType::f32, {3, 7});
    ops::softmax(run.stream, y, x);
    for (double v : run.read(y)) EXPECT_NEAR(v, 1.0 / 7, 1e-7) << backend;
  }
}

TEST(SoftmaxSanity, TwoLogitsGiveTheLogistic_x0_x1) {
  // softmax(a, b)_0 = 1 / (1 + e^(b − a)); with a = 0, b = ln 3 it is exactly 1/4.
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {1, 2}, {0.0, std::log(3.0)});
    Tensor y = run.output("y", DType::f32, {1, 2});
    ops::softmax(run.stream, y, x);
    const auto v = run.read(y);
    EXPECT_NEAR(v[0], 0.25, 1e-7) << backend;
    EXPECT_NEAR(v[1], 0.75, 1e-7) << backend;
  }
}

TEST(SoftmaxSanity, CausalRowsKeepTheirPrefix_Tq3_Tk5) {
  // Row i keeps j ≤ i + 2; with equal logits it is uniform over its i + 3 kept columns.
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {3, 5}, std::vector<double>(15, -1.0));
    Tensor y = run.output("y", DType::f32, {3, 5});
    ops::softmax(run.stream, y, x, {.causal = true});
    const auto v = run.read(y);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) EXPECT_NEAR(v[i * 5 + j], j <= i + 2 ? 1.0 / (i + 3) : 0.0, 1e-7) << backend;
  }
}

TEST(SoftmaxSanity, HugeNegativeLogitsStayFinite_shift_minus1e30) {
  // Softmax is shift invariant; without max subtraction exp(−1e30) underflows to 0/0.
  for (const char* backend : kBackends) {
    CaseRun run(Device::open(backend), 1);
    Tensor x = run.values(DType::f32, {1, 3}, {-1e30, -1e30, -1e30});
    Tensor y = run.output("y", DType::f32, {1, 3});
    ops::softmax(run.stream, y, x, {.scale = 0.5f});
    for (double v : run.read(y)) EXPECT_NEAR(v, 1.0 / 3, 1e-7) << backend;
  }
}

class SoftmaxBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor x = run.normal(DType::f32, {3, 6});
};

TEST_F(SoftmaxBadInput, OutShapeMismatch_out3x5_x3x6) {
  Tensor y = run.output("y", DType::f32, {3, 5});
  expect_error([&] { ops::softmax(run.stream, y, x); }, ErrorCode::shape_mismatch, {"softmax", "out", "[3, 5]", "[3, 6]"});
}

TEST_F(SoftmaxBadInput, IntegerDtype_x_i32) {
  Tensor xi = run.random_ints({3, 6}, 0, 5), y = run.output("y", DType::f32, {3, 6});
  expect_error([&] { ops::softmax(run.stream, y, xi); }, ErrorCode::dtype_mismatch, {"softmax", "x", "i32"});
}

TEST_F(SoftmaxBadInput, OtherDevice_x_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor xr = other.normal(DType::f32, {3, 6}), y = run.output("y", DType::f32, {3, 6});
  expect_error([&] { ops::softmax(run.stream, y, xr); }, ErrorCode::device_mismatch, {"softmax", "x", "ref", "cpu"});
}

TEST_F(SoftmaxBadInput, PartialOverlap_out_shifted_by_one_row) {
  Tensor big = run.normal(DType::f32, {4, 6});
  Tensor in = big.slice(0, 0, 3), out = big.slice(0, 1, 4);
  expect_error([&] { ops::softmax(run.stream, out, in); }, ErrorCode::aliasing, {"softmax", "out", "overlaps", "x"});
}

TEST_F(SoftmaxBadInput, ZeroSizeDim_x3x0) {
  Tensor empty = Tensor::view(x.data, &cpu, DType::f32, {3, 0});
  expect_error([&] { ops::softmax(run.stream, empty, empty); }, ErrorCode::invalid_argument, {"softmax", "x", "size 0"});
}

TEST_F(SoftmaxBadInput, OverflowShape_2pow31_cubed) {
  const int64_t n = int64_t(1) << 31;
  Tensor huge = Tensor::view(x.data, &cpu, DType::f32, {n, n, n});
  expect_error([&] { ops::softmax(run.stream, huge, huge); }, ErrorCode::invalid_argument, {"softmax", "x", "64 bits"});
}

TEST_F(SoftmaxBadInput, CausalNeedsTkAtLeastTq_Tq6_Tk3) {
  Tensor tall = run.normal(DType::f32, {6, 3}), y = run.output("y", DType::f32, {6, 3});
  expect_error([&] { ops::softmax(run.stream, y, tall, {.causal = true}); }, ErrorCode::shape_mismatch,
               {"softmax", "Tq = 6", "Tk = 3"});
}

TEST_F(SoftmaxBadInput, NonPositiveScale_minus1) {
  Tensor y = run.output("y", DType::f32, {3, 6});
  expect_error([&] { ops::softmax(run.stream, y, x, {.scale = -1.0f}); }, ErrorCode::invalid_argument,
               {"softmax", "scale", "-1"});
}

}  // namespace
}  // namespace ding::testing
