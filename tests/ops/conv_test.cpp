// causal_conv1d: a closed form on a small case, chunked feeding equal to whole feeding through the
// rolling state (on the reference and the cpu backend), and bad input through the front end.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ding/ops/conv.h"
#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

Device& ref() { return Device::open("ref"); }
Device& cpu() { return Device::open("cpu"); }

// K = 3 over two channels from a zero state: out[t] = w0·x[t − 2] + w1·x[t − 1] + w2·x[t] (zero
// before the first input), the state left holding the last two inputs.
TEST(CausalConv1dReference, IsACausalConvolutionWithZeroPadding) {
  for (Device* device : {&ref(), &cpu()}) {
    CaseRun run(*device, 1);
    const std::vector<double> xs = {1, 2, 3, 4, -1, 5, 0, 2};  // [T = 4, C = 2], rows of (c0, c1)
    const Tensor x = run.values(DType::f32, {1, 4, 2}, xs);
    const Tensor w = run.values(DType::f32, {2, 3}, {0.5, -1.0, 2.0, 1.0, 1.0, 1.0});
    const Tensor state = run.values(DType::f32, {1, 2, 2}, {0, 0, 0, 0});
    const Tensor out = run.output("out", DType::f32, {1, 4, 2});
    ops::causal_conv1d(run.stream, out, x, w, state, {}, ops::ConvActivation::none);
    const auto o = run.read(out), s = run.read(state);
    auto at = [&](int64_t t, int64_t c) { return t < 0 ? 0.0 : xs[size_t(t * 2 + c)]; };
    for (int64_t t = 0; t < 4; ++t) {
      EXPECT_EQ(o[size_t(t * 2)], 0.5 * at(t - 2, 0) - 1.0 * at(t - 1, 0) + 2.0 * at(t, 0)) << device->name() << " t " << t;
      EXPECT_EQ(o[size_t(t * 2 + 1)], at(t - 2, 1) + at(t - 1, 1) + at(t, 1)) << device->name() << " t " << t;
    }
    EXPECT_EQ(s, (std::vector<double>{-1, 5, 0, 2})) << device->name();
  }
}

// A sequence fed as chunks of 1, 2 and 8 rows (shorter than the state and longer) through the
// state gives the outputs and the final state of feeding it whole.
TEST(CausalConv1dReference, ChunksThroughTheStateEqualTheWholeSequence) {
  for (Device* device : {&ref(), &cpu()}) {
    CaseRun run(*device, 2);
    const int64_t B = 2, T = 11, C = 9, K = 5;
    const Tensor x = run.normal(DType::f32, {B, T, C});
    const Tensor w = run.normal(DType::f32, {C, K}, 0.5);
    const Tensor bias = run.normal(DType::f32, {C}, 0.5);
    const Tensor whole_state = run.normal(DType::f32, {B, K - 1, C});
    const Tensor chunk_state = run.values(DType::f32, {B, K - 1, C}, run.read(whole_state));
    const Tensor whole = run.output("whole", DType::f32, {B, T, C}), chunked = run.output("chunked", DType::f32, {B, T, C});
    ops::causal_conv1d(run.stream, whole, x, w, whole_state, bias);
    for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {3, 8}})
      ops::causal_conv1d(run.stream, chunked.slice(1, t0, t0 + n), x.slice(1, t0, t0 + n), w, chunk_state, bias);
    EXPECT_EQ(run.read(chunked), run.read(whole)) << device->name();
    EXPECT_EQ(run.read(chunk_state), run.read(whole_state)) << device->name();
  }
}

// ---- Bad input -----------------------------------------------------------------------------------

struct Tensors {
  Tensor out, x, w, state;
};

Tensors conv_tensors(CaseRun& run, int64_t K = 4) {
  return {run.output("out", DType::f32, {2, 6, 10}), run.normal(DType::f32, {2, 6, 10}), run.normal(DType::f32, {10, K}),
          run.normal(DType::f32, {2, K - 1, 10})};
}

TEST(CausalConv1dBadInput, KernelWidthOutOfRange) {
  CaseRun run(cpu(), 1);
  Tensors t = conv_tensors(run);
  for (int64_t K : {int64_t(1), ops::kMaxCausalConvKernel + 1}) {
    const Tensor w = run.normal(DType::f32, {10, K});
    expect_error([&] { ops::causal_conv1d(run.stream, t.out, t.x, w, t.state); }, ErrorCode::invalid_argument,
                 {"causal_conv1d", "K = " + std::to_string(K), "[2, 16]"});
  }
}

TEST(CausalConv1dBadInput, StateMustHoldKMinusOneRows) {
  CaseRun run(cpu(), 1);
  Tensors t = conv_tensors(run);
  const Tensor state = run.normal(DType::f32, {2, 4, 10});
  expect_error([&] { ops::causal_conv1d(run.stream, t.out, t.x, t.w, state); }, ErrorCode::shape_mismatch,
               {"causal_conv1d", "state", "K − 1 (from weight)"});
}

TEST(CausalConv1dBadInput, WeightMustHaveARowPerChannel) {
  CaseRun run(cpu(), 1);
  Tensors t = conv_tensors(run);
  const Tensor w = run.normal(DType::f32, {11, 4});
  expect_error([&] { ops::causal_conv1d(run.stream, t.out, t.x, w, t.state); }, ErrorCode::shape_mismatch,
               {"causal_conv1d", "weight", "C (from x)"});
}

TEST(CausalConv1dBadInput, OutMayNotOverlapX) {
  CaseRun run(cpu(), 1);
  Tensors t = conv_tensors(run);
  expect_error([&] { ops::causal_conv1d(run.stream, t.x, t.x, t.w, t.state); }, ErrorCode::aliasing,
               {"causal_conv1d", "out", "overlaps x"});
}

TEST(CausalConv1dBadInput, StateMustBeFloat) {
  CaseRun run(cpu(), 1);
  Tensors t = conv_tensors(run);
  const Tensor state = run.ints({2, 3, 10}, std::vector<int32_t>(60, 0));
  expect_error([&] { ops::causal_conv1d(run.stream, t.out, t.x, t.w, state); }, ErrorCode::dtype_mismatch,
               {"causal_conv1d", "state", "i32"});
}

}  // namespace
}  // namespace ding::testing
