#include <gtest/gtest.h>

#include "ding/ding.h"
#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

TEST(CopyReference, RoundTripThroughF32IsExactAndBf16KeepsTheTopBits) {
  Device& ref = Device::open("ref");
  CaseRun run(ref, 5);
  const Tensor x = run.normal(DType::bf16, {4, 9});
  const Tensor wide = run.output("wide", DType::f32, {4, 9}), back = run.output("back", DType::bf16, {4, 9});
  ops::copy(run.stream, wide, x);
  ops::copy(run.stream, back, wide);
  EXPECT_EQ(run.read(back), run.read(x));  // bf16 → f32 → bf16 is the identity
  EXPECT_EQ(run.read(wide), run.read(x));  // widening bf16 is exact
}

TEST(CopyBadInput, ShapeDtypeAliasingAndDevice) {
  Device& cpu = Device::open("cpu");
  CaseRun run(cpu, 1);
  const Tensor x = run.normal(DType::f32, {3, 8});
  const Tensor y = run.output("y", DType::f32, {3, 8}), wrong = run.output("wrong", DType::f32, {3, 9});
  const Tensor ids = run.random_ints({3, 8}, 0, 5);
  expect_error([&] { ops::copy(run.stream, wrong, x); }, ErrorCode::shape_mismatch, {"copy", "[3, 9]", "[3, 8]"});
  expect_error([&] { ops::copy(run.stream, y, ids); }, ErrorCode::dtype_mismatch, {"copy", "out", "f32", "i32"});
  expect_error([&] { ops::copy(run.stream, ids, x); }, ErrorCode::dtype_mismatch, {"copy", "out", "i32"});
  expect_error([&] { ops::copy(run.stream, x, x); }, ErrorCode::aliasing, {"copy", "overlaps"});
  Tensor column = x;
  column.shape[1] = 1;
  column.strides[1] = 2;  // a non-contiguous last dimension
  column.rank = 2;
  expect_error([&] { ops::copy(run.stream, y.slice(1, 0, 1), column); }, ErrorCode::invalid_argument,
               {"copy", "x", "contiguous last dimension"});
  CaseRun other(Device::open("ref"), 1);
  const Tensor elsewhere = other.normal(DType::f32, {3, 8});
  expect_error([&] { ops::copy(run.stream, y, elsewhere); }, ErrorCode::device_mismatch, {"copy", "x", "'ref'", "'cpu'"});
  Tensor empty = x;
  empty.shape[0] = 0;
  expect_error([&] { ops::copy(run.stream, y, empty); }, ErrorCode::invalid_argument, {"copy", "x", "size 0"});
}

}  // namespace
}  // namespace ding::testing
