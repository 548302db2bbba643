// gated_delta_rule with Kokkos (ops/delta_rule.h), the recurrent form for any params.chunk (a
// backend may compute either form). A team owns one (sequence, value head) and walks its tokens
// in order, the state S [Dk, Dv] (f32) updated in place where the op keeps it. Per token the
// team stages k and q as f32 in scratch, then goes over S twice, row by row, each row's Dv columns
// across its threads and vector lanes (contiguous, so a CPU vectorises them and a GPU coalesces):
//   r[e] = Σ_d S[d][e]·k[d]                 (Sᵀk, what the delta rule corrects toward v)
//   u[e] = β (v[e] − α r[e])
//   S[d][e] ← α S[d][e] + k[d]·u[e],  o[e] = Σ_d S[d][e]·s·q[d]
// Column e's sums run over d in order, as in the reference. With params.gates, g and β are formed
// from the inputs as they are read; with l2_normalize_qk the staged k and q are normalised in
// double, as the op defines it.
#include <cmath>

#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

KOKKOS_INLINE_FUNCTION float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

}  // namespace

void gated_delta_rule(Stream& stream, const ops::GatedDeltaRuleArgs& a) {
  if (a.params.out_norm.given()) {
    const Buffer staged = temporary(stream, a.out.nbytes());
    const Tensor o = Tensor::view(staged.data(), a.out.device, a.out.dtype, a.out.shape.data(), a.out.rank);
    ops::gated_delta_rule_with_staged_norm(stream, a, o, gated_delta_rule, rms_norm);
    stream.synchronize();  // before `staged` is freed
    return;
  }
  const int64_t T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const float scale = ops::delta_rule_scale(a);
  const Elements out = elements(a.out), q = elements(a.q), k = elements(a.k), v = elements(a.v), g = elements(a.g),
                 beta = elements(a.beta);
  float* const states = a.state.ptr<float>();
  const Strides q_s = strides(a.q), k_s = strides(a.k), v_s = strides(a.v), out_s = strides(a.out), g_s = strides(a.g),
                beta_s = strides(a.beta);
  const bool gated = a.params.gates.given(), delta = a.params.delta, has_g = a.g.defined(), has_beta = a.beta.defined();
  const bool l2_normalize = a.params.l2_normalize_qk;
  const Elements a_log = gated ? elements(a.params.gates.a_log) : Elements{}, dt_bias = gated ? elements(a.params.gates.dt_bias) : Elements{};
  // Scratch: the token's k and q, and per column r (then u) and o.
  const size_t bytes = ScratchFloats::shmem_size(2 * Dk + 2 * Dv);
  const TeamPolicy teams = TeamPolicy(int(a.v.dim(0) * Hv), Kokkos::AUTO)
                               .set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
  Kokkos::parallel_for("ding::gated_delta_rule", teams, KOKKOS_LAMBDA(const Team& team) {
    const int64_t h = team.league_rank() % Hv, b = team.league_rank() / Hv, kh = h / (Hv / Hk);
    float* const S = states + (b * Hv + h) * Dk * Dv;  // S[d][e] at S[d·Dv + e]
    const ScratchFloats scratch(team.team_scratch(scratch_level(bytes)), 2 * Dk + 2 * Dv);
    float* const k_t = scratch.data();
    float* const q_t = k_t + Dk;
    float* const u = q_t + Dk;
    float* const o = u + Dv;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t q_row = b * q_s[0] + t * q_s[1] + kh * q_s[2], k_row = b * k_s[0] + t * k_s[1] + kh * k_s[2];
      const int64_t v_row = b * v_s[0] + t * v_s[1] + h * v_s[2];
      const float g_in = has_g ? g.load(b * g_s[0] + t * g_s[1] + h * g_s[2]) : 0.0f;
      const float b_in = has_beta ? beta.load(b * beta_s[0] + t * beta_s[1] + h * beta_s[2]) : 1.0f;
      const float alpha = gated ? expf(-expf(a_log.load(h)) * softplus(g_in + dt_bias.load(h))) : expf(g_in);
      const float strength = gated ? 1.0f / (1.0f + expf(-b_in)) : b_in;
      team.team_barrier();  // the previous token's k, q, u and o are no longer read
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dk), [&](const int64_t d) {
        k_t[d] = k.load(k_row + d);
        q_t[d] = q.load(q_row + d);
      });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dv), [&](const int64_t e) { u[e] = 0.0f, o[e] = 0.0f; });
      team.team_barrier();
      if (l2_normalize) {
        double k_squares = 0, q_squares = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, Dk), [&](const int64_t d, double& s) { s += double(k_t[d]) * k_t[d]; }, k_squares);
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, Dk), [&](const int64_t d, double& s) { s += double(q_t[d]) * q_t[d]; }, q_squares);
        const double k_inverse = 1.0 / sqrt(k_squares + double(ops::kDeltaRuleL2Eps));
        const double q_inverse = 1.0 / sqrt(q_squares + double(ops::kDeltaRuleL2Eps));
        team.team_barrier();  // every thread has its sums before k_t and q_t change
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dk), [&](const int64_t d) {
          k_t[d] = k.round(float(k_t[d] * k_inverse));
          q_t[d] = q.round(float(q_t[d] * q_inverse));
        });
        team.team_barrier();
      }
      // Each column stays with the same thread and lane in every range over Dv (a range's split
      // depends on its length alone), so the passes need no barrier between them.
      if (delta)
        for (int64_t d = 0; d < Dk; ++d)
          Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dv), [&](const int64_t e) { u[e] += S[d * Dv + e] * k_t[d]; });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dv), [&](const int64_t e) {
        u[e] = strength * (v.load(v_row + e) - alpha * u[e]);
      });
      for (int64_t d = 0; d < Dk; ++d)
        Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dv), [&](const int64_t e) {
          const float s = alpha * S[d * Dv + e] + k_t[d] * u[e];
          S[d * Dv + e] = s;
          o[e] += s * scale * q_t[d];
        });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, Dv), [&](const int64_t e) {
        out.store(b * out_s[0] + t * out_s[1] + h * out_s[2] + e, o[e]);
      });
    }
  });
}

}  // namespace ding::kokkos
