// causal_conv1d cases: Qwen3-Next's kernel width (4) and others, a decode step (T = 1), chunks
// shorter than the state (T < K − 1: part of the old state survives the roll) and longer, several
// sequences, odd channel counts, a bias, no activation, x as a strided view of a wider
// projection, f32/f16/bf16 and mixed dtypes; a prefill-sized and a decode-sized bench case at
// Qwen3-Next-80B's 8192 channels.
#include <fmt/format.h>

#include <cmath>

#include "ding/ops/conv.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

struct Conv {
  int64_t B = 1, T = 9, C = 33, K = 4;
  bool bias = false, silu = true;
  DType x = DType::f32, w = DType::f32, state = DType::f32, out = DType::f32;
  bool view = false;  // x a slice of a [B, T, C + 7] product
  bool in_tests = true;
};

OpCase conv_case(const Conv& p) {
  std::string name = fmt::format("causal_conv1d/B{}_T{}_C{}_K{}_x{}_w{}_state{}_out{}", p.B, p.T, p.C, p.K, dtype_name(p.x),
                                 dtype_name(p.w), dtype_name(p.state), dtype_name(p.out));
  if (p.bias) name += "_bias";
  if (!p.silu) name += "_linear";
  if (p.view) name += "_view";
  // Each output is an f32 sum of K products (and the bias) through silu, as a matmul output
  // through swiglu's silu is; the state is a copy of inputs (rounded alike on both sides).
  const int64_t terms = p.K + (p.bias ? 1 : 0);
  OpCase c{"causal_conv1d", name, matmul_tolerance(p.out, terms, p.B * p.T * p.C, p.silu),
           matmul_reason(p.out, terms, p.silu), nullptr, p.in_tests};
  c.build = [p](CaseRun& run) {
    const Tensor x = p.view ? run.normal(p.x, {p.B, p.T, p.C + 7}).slice(2, 3, p.C + 3) : run.normal(p.x, {p.B, p.T, p.C});
    // Weights of norm ≈ 1 per channel keep the sums unit-scale, where silu is not linear.
    const Tensor weight = run.normal(p.w, {p.C, p.K}, 1.0 / std::sqrt(double(p.K)));
    const Tensor state = run.inout("state", p.state, {p.B, p.K - 1, p.C}, 1.0, {Compare::exact});
    const Tensor bias = p.bias ? run.normal(p.w, {p.C}, 0.5) : Tensor{};
    const Tensor out = run.output("out", p.out, {p.B, p.T, p.C});
    const ops::ConvActivation act = p.silu ? ops::ConvActivation::silu : ops::ConvActivation::none;
    run.launch = [=](Stream& st) { ops::causal_conv1d(st, out, x, weight, state, bias, act); };
    run.cost = ops::cost(ops::CausalConv1dArgs{out, x, weight, state, bias, act});
  };
  return c;
}

}  // namespace

std::vector<OpCase> conv_cases() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  std::vector<OpCase> cases;
  auto add = [&](Conv p) { cases.push_back(conv_case(p)); };
  add({});
  add({.T = 1});                                    // a decode step
  add({.T = 2, .C = 5, .K = 4});                    // T < K − 1: part of the old state stays
  add({.B = 3, .T = 40, .C = 70, .K = 2, .bias = true});
  add({.B = 2, .T = 17, .C = 64, .K = 7, .silu = false});
  add({.T = 33, .C = 48, .K = 16, .bias = true});   // the widest kernel the backends take
  add({.B = 2, .T = 25, .C = 130, .x = bf16, .w = bf16, .state = bf16, .out = bf16, .view = true});
  add({.T = 1, .C = 96, .x = f16, .w = f16, .state = f16, .out = f16});
  add({.B = 2, .T = 3, .C = 40, .K = 5, .bias = true, .x = bf16, .w = f32, .state = f32, .out = f32});
  add({.T = 12, .C = 31, .x = f32, .w = bf16, .state = bf16, .out = bf16});
  // The GPU's one-launch window kernel at its bound (8 tokens) with the widest kernel, and a
  // decode step of several sequences.
  add({.B = 2, .T = 8, .C = 40, .K = 16, .bias = true});
  add({.B = 4, .T = 1, .C = 72, .silu = false, .x = bf16, .w = bf16, .state = bf16, .out = bf16, .view = true});
  // Qwen3-Next-80B-A3B's conv_dim (2·16 key heads × 128 + 32 value heads × 128): a 4096-token
  // prefill chunk and a batch-8 decode step.
  add({.T = 4096, .C = 8192, .x = bf16, .w = bf16, .state = bf16, .out = bf16, .in_tests = false});
  add({.B = 8, .T = 1, .C = 8192, .x = bf16, .w = bf16, .state = bf16, .out = bf16, .in_tests = false});
  for (OpCase& c : cases)
    if (!c.in_tests) c.name.insert(c.name.find('/') + 1, "bench_");
  return cases;
}

}  // namespace ding::testing
