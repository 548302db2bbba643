// gated_delta_rule: closed forms of the recurrence on the reference, chunked feeding equal to
// whole feeding through the state (reference and cpu), the GPU's chunk-wise passes over segments
// of any size and in both product forms, and bad input through the front end.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ding/gpu.h"
#include "ding/ops/delta_rule.h"
#include "configurations.h"
#include "expect_error.h"
#include "gpu_tuning_scope.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

Device& ref() { return Device::open("ref"); }
Device& cpu() { return Device::open("cpu"); }

// From a zero state, one token with β = 1 and no decay writes S = k vᵀ (the delta from an empty
// memory is v itself), so the output is (s·q·k) v.
TEST(GatedDeltaRuleReference, FirstTokenStoresItsValue) {
  CaseRun run(ref(), 1);
  const int64_t Dk = 4, Dv = 3;
  const std::vector<double> qv = {1, 2, 0, -1}, kv = {0.5, 0.5, 0.5, 0.5}, vv = {3, -2, 1};
  const Tensor q = run.values(DType::f32, {1, 1, 1, Dk}, qv), k = run.values(DType::f32, {1, 1, 1, Dk}, kv);
  const Tensor v = run.values(DType::f32, {1, 1, 1, Dv}, vv);
  const Tensor g = run.values(DType::f32, {1, 1, 1}, {0.0}), beta = run.values(DType::f32, {1, 1, 1}, {1.0});
  const Tensor state = run.values(DType::f32, {1, 1, Dk, Dv}, std::vector<double>(size_t(Dk * Dv), 0.0));
  const Tensor out = run.output("out", DType::f32, {1, 1, 1, Dv});
  ops::gated_delta_rule(run.stream, out, q, k, v, g, beta, state, {.scale = 0.5f});
  double qk = 0;
  for (size_t d = 0; d < qv.size(); ++d) qk += 0.5 * qv[d] * kv[d];
  const auto o = run.read(out), s = run.read(state);
  for (int64_t e = 0; e < Dv; ++e) {
    EXPECT_NEAR(o[size_t(e)], qk * vv[size_t(e)], 1e-6) << e;
    for (int64_t d = 0; d < Dk; ++d) EXPECT_NEAR(s[size_t(d * Dv + e)], kv[size_t(d)] * vv[size_t(e)], 1e-6) << d << " " << e;
  }
}

// β = 0 writes nothing, so the state only decays: after tokens with log decays g_1 … g_T it is
// e^(Σg)·S_0, and token t reads e^(g_1 + … + g_t)·S_0ᵀ(s·q_t).
TEST(GatedDeltaRuleReference, WithoutWritesTheStateOnlyDecays) {
  CaseRun run(ref(), 2);
  const int64_t T = 5, Dk = 6, Dv = 4;
  const Tensor q = run.normal(DType::f32, {1, T, 1, Dk}), k = run.normal(DType::f32, {1, T, 1, Dk});
  const Tensor v = run.normal(DType::f32, {1, T, 1, Dv});
  const Tensor g = run.uniform(DType::f32, {1, T, 1}, -1.0, 0.0);
  const Tensor beta = run.values(DType::f32, {1, T, 1}, std::vector<double>(size_t(T), 0.0));
  const Tensor state = run.normal(DType::f32, {1, 1, Dk, Dv});
  const auto s0 = run.read(state), qv = run.read(q), gv = run.read(g);
  const Tensor out = run.output("out", DType::f32, {1, T, 1, Dv});
  ops::gated_delta_rule(run.stream, out, q, k, v, g, beta, state);
  const double s = 1.0 / std::sqrt(double(Dk));
  const auto o = run.read(out), s_end = run.read(state);
  double log_decay = 0;
  for (int64_t t = 0; t < T; ++t) {
    log_decay += gv[size_t(t)];
    for (int64_t e = 0; e < Dv; ++e) {
      double expected = 0;
      for (int64_t d = 0; d < Dk; ++d) expected += s0[size_t(d * Dv + e)] * s * qv[size_t(t * Dk + d)];
      EXPECT_NEAR(o[size_t(t * Dv + e)], std::exp(log_decay) * expected, 1e-5) << t << " " << e;
    }
  }
  for (size_t i = 0; i < s0.size(); ++i) EXPECT_NEAR(s_end[i], std::exp(log_decay) * s0[i], 1e-6) << i;
}

// A sequence fed as chunks of 3 and 7 tokens (and as 10 single tokens) through the state gives the
// outputs and the final state of feeding it whole, to the f32 rounding of the state between calls.
TEST(GatedDeltaRuleReference, ChunksThroughTheStateEqualTheWholeSequence) {
  for (Device* device : {&ref(), &cpu()}) {
    CaseRun run(*device, 3);
    const int64_t B = 2, T = 10, Hk = 1, Hv = 2, Dk = 8, Dv = 5;
    const Tensor q = run.normal(DType::f32, {B, T, Hk, Dk}, 0.3), k = run.normal(DType::f32, {B, T, Hk, Dk}, 0.3);
    const Tensor v = run.normal(DType::f32, {B, T, Hv, Dv});
    const Tensor g = run.uniform(DType::f32, {B, T, Hv}, -1.0, 0.0), beta = run.uniform(DType::f32, {B, T, Hv}, 0.1, 0.9);
    const Tensor whole_state = run.normal(DType::f32, {B, Hv, Dk, Dv});
    const std::vector<double> initial = run.read(whole_state);
    const Tensor whole = run.output("whole", DType::f32, {B, T, Hv, Dv});
    ops::gated_delta_rule(run.stream, whole, q, k, v, g, beta, whole_state);
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{3, 7}, std::vector<int64_t>(10, 1)}) {
      const Tensor state = run.values(DType::f32, {B, Hv, Dk, Dv}, initial);
      const Tensor chunked = run.output("chunked", DType::f32, {B, T, Hv, Dv});
      int64_t t0 = 0;
      for (int64_t n : chunks) {
        ops::gated_delta_rule(run.stream, chunked.slice(1, t0, t0 + n), q.slice(1, t0, t0 + n), k.slice(1, t0, t0 + n),
                              v.slice(1, t0, t0 + n), g.slice(1, t0, t0 + n), beta.slice(1, t0, t0 + n), state);
        t0 += n;
      }
      // Equal up to the state's f32 rounding between calls (the reference carries it in double
      // within a call).
      EXPECT_LE(nmse(run.read(chunked), run.read(whole)), 1e-12) << device->name() << " " << chunks.size() << " chunks";
      EXPECT_LE(nmse(run.read(state), run.read(whole_state)), 1e-12) << device->name() << " " << chunks.size() << " chunks";
    }
  }
}

// The chunk-wise form (chunks of 1, 4 and 7, the last partial) and the recurrent one are the same
// function: the reference computes both in double, so their f32 results differ by roundings of
// equal values at most (an f32 ulp here and there), outputs and final state alike.
TEST(GatedDeltaRuleReference, ChunkWiseAndRecurrentFormsAgree) {
  CaseRun run(ref(), 4);
  const int64_t B = 1, T = 18, Hk = 1, Hv = 2, Dk = 12, Dv = 7;
  const Tensor q = run.normal(DType::f32, {B, T, Hk, Dk}, 0.3), k = run.normal(DType::f32, {B, T, Hk, Dk}, 0.3);
  const Tensor v = run.normal(DType::f32, {B, T, Hv, Dv});
  const Tensor g = run.uniform(DType::f32, {B, T, Hv}, -1.0, 0.0), beta = run.uniform(DType::f32, {B, T, Hv}, 0.1, 0.9);
  const std::vector<double> initial = run.read(run.normal(DType::f32, {B, Hv, Dk, Dv}));
  const Tensor recurrent_state = run.values(DType::f32, {B, Hv, Dk, Dv}, initial);
  const Tensor recurrent = run.output("recurrent", DType::f32, {B, T, Hv, Dv});
  ops::gated_delta_rule(run.stream, recurrent, q, k, v, g, beta, recurrent_state);
  for (int64_t chunk : {1, 4, 7}) {
    const Tensor state = run.values(DType::f32, {B, Hv, Dk, Dv}, initial);
    const Tensor chunked = run.output("chunked", DType::f32, {B, T, Hv, Dv});
    ops::gated_delta_rule(run.stream, chunked, q, k, v, g, beta, state, {.chunk = chunk});
    EXPECT_LE(nmse(run.read(chunked), run.read(recurrent)), 1e-13) << "chunk " << chunk;
    EXPECT_LE(nmse(run.read(state), run.read(recurrent_state)), 1e-13) << "chunk " << chunk;
  }
}

// The gates formed in the op equal g and β formed beforehand: g_t = −e^(A_log)·softplus(a_t + dt_bias)
// and β_t = σ(b_t), computed here in double and passed as plain inputs.
TEST(GatedDeltaRuleReference, GatesEqualTheirClosedForm) {
  CaseRun run(ref(), 4);
  const int64_t T = 6, Hv = 2, Dk = 5, Dv = 3;
  const Tensor q = run.normal(DType::f32, {1, T, 1, Dk}), k = run.normal(DType::f32, {1, T, 1, Dk});
  const Tensor v = run.normal(DType::f32, {1, T, Hv, Dv});
  const std::vector<double> a_in = {-3, -0.5, 0, 0.7, 2, 19, 21, 25, -6, 1, 3, -1}, b_in = {-2, 0, 1, 3, -1, 0.5, 2, -3, 0, 1, -0.5, 4};
  const std::vector<double> a_log = {0.3, -1.2}, dt_bias = {0.5, -0.25};
  std::vector<double> g(a_in.size()), beta(b_in.size());
  for (size_t i = 0; i < a_in.size(); ++i) {
    const double x = a_in[i] + dt_bias[i % 2];
    g[i] = -std::exp(a_log[i % 2]) * (x > 20 ? x : std::log1p(std::exp(x)));
    beta[i] = 1 / (1 + std::exp(-b_in[i]));
  }
  const std::vector<double> s0 = run.read(run.normal(DType::f32, {1, Hv, Dk, Dv}));
  auto run_with = [&](const Tensor& g_t, const Tensor& beta_t, const ops::GatedDeltaRuleParams& params) {
    const Tensor state = run.values(DType::f32, {1, Hv, Dk, Dv}, s0);
    const Tensor out = run.output("out", DType::f32, {1, T, Hv, Dv});
    ops::gated_delta_rule(run.stream, out, q, k, v, g_t, beta_t, state, params);
    return std::pair{run.read(out), run.read(state)};
  };
  const auto plain = run_with(run.values(DType::f32, {1, T, Hv}, g), run.values(DType::f32, {1, T, Hv}, beta), {});
  const auto gated = run_with(run.values(DType::f32, {1, T, Hv}, a_in), run.values(DType::f32, {1, T, Hv}, b_in),
                              {.gates = {.a_log = run.values(DType::f32, {Hv}, a_log), .dt_bias = run.values(DType::f32, {Hv}, dt_bias)}});
  // Both sides round g and β to f32 once (plain: as inputs; gated: the reference's loads of a_t, b_t
  // are exact and it forms g, β in double), so they agree to f32 input rounding.
  EXPECT_LE(nmse(gated.first, plain.first), 1e-12);
  EXPECT_LE(nmse(gated.second, plain.second), 1e-12);
}

// ---- The GPU's segments ----------------------------------------------------------------------------

// Every delta-rule case gives the same bits under each of the op tunings `settings` makes
// (over at least 20 cases): what they change is where or how the same arithmetic runs.
void expect_tunings_agree(
    const std::function<std::vector<Configuration>(const ScopedGpuTuning<gpu::OpTuning>&)>& settings) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::OpTuning> tuning(cuda);
  EXPECT_GT(expect_configurations_agree(cuda, delta_rule_cases(), settings(tuning)), 20);
}

// On a GPU the chunk-wise form runs its two passes over segments of the call's chunks, the state
// carried between them in f32 as between calls: segments of 1 and 3 chunks give the bits of one
// segment for every case of more than one chunk, each within its bound of the reference.
TEST(GatedDeltaRuleGpu, SegmentsGiveTheSameBits) {
  constexpr auto segment = &gpu::OpTuning::delta_rule_segment_chunks;
  expect_tunings_agree([segment](const auto& tuning) {
    return std::vector<Configuration>{{"one segment", tuning.with(segment, 0)},  // 0: as many chunks as the workspace bound holds
                                      {"segments of 1 chunk", tuning.with(segment, 1)},
                                      {"segments of 3 chunks", tuning.with(segment, 3)}};
  });
}

// The first pass at three blocks an SM (T over the chunk's queries, fewer registers) is the same
// arithmetic as at two: the same bits.
TEST(GatedDeltaRuleGpu, FirstPassAtThreeBlocksGivesTheSameBits) {
  constexpr auto blocks = &gpu::OpTuning::delta_rule_prepare_blocks;
  expect_tunings_agree([blocks](const auto& tuning) {
    return std::vector<Configuration>{{"two blocks an SM", tuning.with(blocks, 2)}, {"three blocks an SM", tuning.with(blocks, 3)}};
  });
}

// The walk's operands by the copy engine's bulk copies (sm_90+) or by every thread's cp.async (the
// sm_80/sm_89 path, which an H100 then runs too) land as the same bytes: the same bits.
TEST(GatedDeltaRuleGpu, WalkCopiesGiveTheSameBits) {
  constexpr auto bulk = &gpu::OpTuning::delta_rule_bulk_copies;
  expect_tunings_agree([bulk](const auto& tuning) {
    const SwitchForms forms{"gated_delta_rule: walk operands by bulk copies", "gated_delta_rule: walk operands by cp.async",
                            nvidia_at_least(Device::open("cuda"), 90)};
    return std::vector<Configuration>{expecting({"bulk copies", tuning.with(bulk, true)}, forms, true),
                                      expecting({"cp.async", tuning.with(bulk, false)}, forms, false)};
  });
}

// The walk's products take bf16 pairs, where switched on, for bf16 q, k and v and a 16-bit output,
// and tf32 head and tail otherwise: each form keeps every case's bound of the reference.
TEST(GatedDeltaRuleGpu, BothProductFormsKeepTheBound) {
  expect_both_settings_keep_the_bound(
      delta_rule_cases(), &gpu::OpTuning::delta_rule_bf16_pairs, "bf16 pairs", "tf32", [](const OpCase&) { return true; }, 21,
      [](const Device&) {
        return SwitchForms{"gated_delta_rule: chunk products in bf16 pairs", "gated_delta_rule: chunk products in tf32"};
      });
}

// The output's gated norm inside the recurrent kernel (a cluster of a head's column tiles, on
// sm_90) and staged through rms_norm: each keeps the bound of every case that asks for the norm.
TEST(GatedDeltaRuleGpu, ClusterAndStagedNormKeepTheBound) {
  expect_both_settings_keep_the_bound(
      delta_rule_cases(), &gpu::OpTuning::delta_rule_cluster_norm, "in the kernel", "staged",
      [](const OpCase& c) { return c.name.ends_with("_norm"); }, 6, [](const Device& cuda) {
        return SwitchForms{"gated_delta_rule: out_norm in a cluster", "gated_delta_rule: out_norm staged", nvidia_at_least(cuda, 90)};
      });
}

// ---- Bad input -----------------------------------------------------------------------------------

struct Tensors {
  Tensor out, q, k, v, g, beta, state;
};

Tensors delta_tensors(CaseRun& run, int64_t Hk = 2, int64_t Hv = 4, int64_t Dk = 8) {
  return {run.output("out", DType::f32, {1, 3, Hv, 5}),  run.normal(DType::f32, {1, 3, Hk, Dk}),
          run.normal(DType::f32, {1, 3, Hk, Dk}),        run.normal(DType::f32, {1, 3, Hv, 5}),
          run.normal(DType::f32, {1, 3, Hv}),            run.normal(DType::f32, {1, 3, Hv}),
          run.normal(DType::f32, {1, Hv, Dk, 5})};
}

void call(CaseRun& run, const Tensors& t, const ops::GatedDeltaRuleParams& params = {}) {
  ops::gated_delta_rule(run.stream, t.out, t.q, t.k, t.v, t.g, t.beta, t.state, params);
}

TEST(GatedDeltaRuleBadInput, ValueHeadsMustShareKeyHeadsEvenly) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run, 2, 3);
  expect_error([&] { call(run, t); }, ErrorCode::shape_mismatch, {"gated_delta_rule", "3 heads", "multiple of q's and k's 2"});
}

TEST(GatedDeltaRuleBadInput, KeyHeadDimBeyondTheBackendsLimit) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run, 1, 1, ops::kMaxDeltaRuleKeyDim + 1);
  expect_error([&] { call(run, t); }, ErrorCode::invalid_argument, {"gated_delta_rule", "Dk = 257", "256"});
}

TEST(GatedDeltaRuleBadInput, StateMustBeF32OfTheHeadsShape) {
  CaseRun run(cpu(), 1);
  Tensors t = delta_tensors(run);
  t.state = run.normal(DType::bf16, {1, 4, 8, 5});
  expect_error([&] { call(run, t); }, ErrorCode::dtype_mismatch, {"gated_delta_rule", "state", "bf16"});
  t.state = run.normal(DType::f32, {1, 4, 5, 8});
  expect_error([&] { call(run, t); }, ErrorCode::shape_mismatch, {"gated_delta_rule", "state", "Dk (from q)"});
}

TEST(GatedDeltaRuleBadInput, GatesNeedOneValuePerTokenAndValueHead) {
  CaseRun run(cpu(), 1);
  Tensors t = delta_tensors(run);
  t.g = run.normal(DType::f32, {1, 3, 2});
  expect_error([&] { call(run, t); }, ErrorCode::shape_mismatch, {"gated_delta_rule", "g", "Hv (from v)"});
}

TEST(GatedDeltaRuleBadInput, GateParametersNeedOneFloatPerValueHead) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run);
  const Tensor per_head = run.normal(DType::f32, {4});
  expect_error([&] { call(run, t, {.gates = {.a_log = run.normal(DType::f32, {3}), .dt_bias = per_head}}); },
               ErrorCode::shape_mismatch, {"gated_delta_rule", "gates.a_log", "Hv (from v)"});
  expect_error([&] { call(run, t, {.gates = {.a_log = per_head, .dt_bias = run.random_ints({4}, 0, 3)}}); },
               ErrorCode::dtype_mismatch, {"gated_delta_rule", "gates.dt_bias", "i32"});
  expect_error([&] { call(run, t, {.gates = {.dt_bias = per_head}}); }, ErrorCode::invalid_argument,
               {"gated_delta_rule", "gates.a_log"});
}

TEST(GatedDeltaRuleBadInput, NegativeScaleIsRefused) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run);
  expect_error([&] { call(run, t, {.scale = -1.0f}); }, ErrorCode::invalid_argument, {"gated_delta_rule", "scale", "-1"});
}

TEST(GatedDeltaRuleBadInput, ChunkOutOfRange) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run);
  for (int64_t chunk : {int64_t(-1), ops::kMaxDeltaRuleChunk + 1})
    expect_error([&] { call(run, t, {.chunk = chunk}); }, ErrorCode::invalid_argument,
                 {"gated_delta_rule", "chunk", std::to_string(chunk)});
}

TEST(GatedDeltaRuleBadInput, OutNormNeedsAWeightOfDvAndAGateShapedLikeOut) {
  CaseRun run(cpu(), 1);
  const Tensors t = delta_tensors(run);
  const Tensor weight = run.normal(DType::f32, {5}), gate = run.normal(DType::f32, {1, 3, 4, 5});
  expect_error([&] { call(run, t, {.out_norm = {.weight = run.normal(DType::f32, {4}), .gate = gate}}); },
               ErrorCode::shape_mismatch, {"gated_delta_rule", "out_norm.weight", "Dv (from v)"});
  expect_error([&] { call(run, t, {.out_norm = {.weight = weight, .gate = run.normal(DType::f32, {1, 3, 4, 4})}}); },
               ErrorCode::shape_mismatch, {"gated_delta_rule", "out_norm.gate", "out"});
  expect_error([&] { call(run, t, {.out_norm = {.gate = gate}}); }, ErrorCode::invalid_argument,
               {"gated_delta_rule", "out_norm.weight"});
  expect_error([&] { call(run, t, {.out_norm = {.weight = weight, .gate = t.out}}); }, ErrorCode::aliasing,
               {"gated_delta_rule", "out_norm.gate", "overlaps"});
  expect_error([&] { call(run, t, {.out_norm = {.weight = weight, .gate = gate, .eps = 0.0f}}); },
               ErrorCode::invalid_argument, {"gated_delta_rule", "out_norm.eps", "got 0"});
}

}  // namespace
}  // namespace ding::testing
