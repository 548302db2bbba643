// linear_attention: its closed form (a decayed sum over the past, no recurrence) against every host
// backend, a prompt fed in pieces through the state equal to one fed whole, and bad input named
// under the op's own name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ding/ops/linear_attention.h"
#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// o_t = Σ_{j≤t} e^(G_t − G_j) (s q_t·k_j) v_j + e^(G_t) S_0ᵀ(s q_t), G_t = g_1 + … + g_t: every
// past write decayed by the steps since, computed directly in double from the inputs.
TEST(LinearAttention, EqualsItsClosedFormOnEveryHostBackend) {
  const int64_t T = 11, Hk = 1, Hv = 2, Dk = 6, Dv = 5;
  for (const char* backend : {"ref", "cpu", "kokkos"}) {
    if (!registry::is_available(backend)) continue;
    for (int64_t chunk : {0, 1, 4}) {
      CaseRun run(Device::open(backend), 3);
      const Tensor q = run.normal(DType::f32, {1, T, Hk, Dk}), k = run.normal(DType::f32, {1, T, Hk, Dk});
      const Tensor v = run.normal(DType::f32, {1, T, Hv, Dv});
      const Tensor g = run.uniform(DType::f32, {1, T, Hv}, -0.8, 0.0);
      const Tensor state = run.normal(DType::f32, {1, Hv, Dk, Dv});
      const auto qv = run.read(q), kv = run.read(k), vv = run.read(v), gv = run.read(g), s0 = run.read(state);
      const Tensor out = run.output("out", DType::f32, {1, T, Hv, Dv});
      ops::linear_attention(run.stream, out, q, k, v, g, state, {.scale = 0.5f, .chunk = chunk});
      const auto o = run.read(out);
      double worst = 0;
      for (int64_t h = 0; h < Hv; ++h) {
        std::vector<double> G(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) G[size_t(t)] = (t ? G[size_t(t - 1)] : 0.0) + gv[size_t(t * Hv + h)];
        for (int64_t t = 0; t < T; ++t)
          for (int64_t e = 0; e < Dv; ++e) {
            double want = 0;
            for (int64_t d = 0; d < Dk; ++d) want += std::exp(G[size_t(t)]) * s0[size_t((h * Dk + d) * Dv + e)] * 0.5 * qv[size_t(t * Dk + d)];
            for (int64_t j = 0; j <= t; ++j) {
              double qk = 0;
              for (int64_t d = 0; d < Dk; ++d) qk += 0.5 * qv[size_t(t * Dk + d)] * kv[size_t(j * Dk + d)];
              want += std::exp(G[size_t(t)] - G[size_t(j)]) * qk * vv[size_t((j * Hv + h) * Dv + e)];
            }
            worst = std::max(worst, std::abs(o[size_t((t * Hv + h) * Dv + e)] - want) / (1.0 + std::abs(want)));
          }
      }
      EXPECT_LT(worst, 1e-5) << backend << " chunk " << chunk;  // f32 kernels: ~1e-7 relative
    }
  }
}

// No decay and a prompt fed in three pieces through the state: the same outputs and final state
// as fed whole (S ← S + k vᵀ sums the same terms in another grouping).
TEST(LinearAttention, PiecesThroughTheStateEqualTheWholeSequence) {
  CaseRun run(Device::open("cpu"), 5);
  const int64_t T = 24, Hk = 2, Hv = 4, Dk = 16, Dv = 8;
  const Tensor q = run.normal(DType::f32, {1, T, Hk, Dk}), k = run.normal(DType::f32, {1, T, Hk, Dk});
  const Tensor v = run.normal(DType::f32, {1, T, Hv, Dv});
  const Tensor whole_state = run.values(DType::f32, {1, Hv, Dk, Dv}, std::vector<double>(size_t(Hv * Dk * Dv), 0.0));
  const Tensor whole = run.output("whole", DType::f32, {1, T, Hv, Dv});
  ops::linear_attention(run.stream, whole, q, k, v, {}, whole_state);
  const Tensor state = run.values(DType::f32, {1, Hv, Dk, Dv}, std::vector<double>(size_t(Hv * Dk * Dv), 0.0));
  const Tensor pieces = run.output("pieces", DType::f32, {1, T, Hv, Dv});
  for (auto [t0, t1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 6}, {6, T}})
    ops::linear_attention(run.stream, pieces.slice(1, t0, t1), q.slice(1, t0, t1), k.slice(1, t0, t1), v.slice(1, t0, t1), {},
                          state, {.chunk = t1 - t0 > 1 ? 4 : 0});
  EXPECT_LE(nmse(run.read(pieces), run.read(whole)), 1e-12);
  EXPECT_LE(nmse(run.read(state), run.read(whole_state)), 1e-12);
}

TEST(LinearAttentionBadInput, ShapesAndChunkAreNamedUnderTheOp) {
  CaseRun run(Device::open("cpu"), 1);
  const Tensor q = run.normal(DType::f32, {1, 3, 2, 8}), k = run.normal(DType::f32, {1, 3, 2, 8});
  const Tensor v = run.normal(DType::f32, {1, 3, 4, 5}), out = run.output("out", DType::f32, {1, 3, 4, 5});
  const Tensor state = run.normal(DType::f32, {1, 4, 8, 5});
  expect_error([&] { ops::linear_attention(run.stream, out, q, k, v, run.normal(DType::f32, {1, 3, 2}), state); },
               ErrorCode::shape_mismatch, {"linear_attention", "g", "Hv (from v)"});
  expect_error([&] { ops::linear_attention(run.stream, out, q, k, v, {}, run.normal(DType::f32, {1, 4, 5, 8})); },
               ErrorCode::shape_mismatch, {"linear_attention", "state", "Dk (from q)"});
  expect_error([&] { ops::linear_attention(run.stream, out, q, k, v, {}, state, {.chunk = 1000}); },
               ErrorCode::invalid_argument, {"linear_attention", "chunk", "1000"});
  const Tensor v3 = run.normal(DType::f32, {1, 3, 3, 5}), out3 = run.output("out3", DType::f32, {1, 3, 3, 5});
  expect_error([&] { ops::linear_attention(run.stream, out3, q, k, v3, {}, run.normal(DType::f32, {1, 3, 8, 5})); },
               ErrorCode::shape_mismatch, {"linear_attention", "multiple of q's and k's 2"});
}

}  // namespace
}  // namespace ding::testing
