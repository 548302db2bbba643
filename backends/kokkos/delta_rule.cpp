// gated_delta_rule with Kokkos (ops/delta_rule.h): each column e of a state S evolves on its own
// ((Sᵀk)[e], the column's update and (Sᵀq)[e] involve no other column), so one work item owns one
// column of one (sequence, value head), keeps it in a local array for the call and walks the
// tokens in order: r = Σ_d S[d]·k[d], u = β (v[e] − α r), S[d] ← α S[d] + k[d]·u, o = Σ_d S[d]·s·q[d].
// With params.gates, g and β are formed from the inputs as they are read.
// The recurrent form for any params.chunk (a backend may compute either form).
#include <cmath>

#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

KOKKOS_INLINE_FUNCTION float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

}  // namespace

void gated_delta_rule(Stream&, const ops::GatedDeltaRuleArgs& a) {
  const int64_t T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const float scale = ops::delta_rule_scale(a);
  const Elements out = elements(a.out), q = elements(a.q), k = elements(a.k), v = elements(a.v), g = elements(a.g),
                 beta = elements(a.beta), state = elements(a.state);
  const Strides q_s = strides(a.q), k_s = strides(a.k), v_s = strides(a.v), out_s = strides(a.out), g_s = strides(a.g),
                beta_s = strides(a.beta);
  const bool gated = a.params.gates.given(), delta = a.params.delta, has_g = a.g.defined(), has_beta = a.beta.defined();
  const Elements a_log = gated ? elements(a.params.gates.a_log) : Elements{}, dt_bias = gated ? elements(a.params.gates.dt_bias) : Elements{};
  Kokkos::parallel_for("ding::gated_delta_rule", Range(0, a.v.dim(0) * Hv * Dv), KOKKOS_LAMBDA(const int64_t i) {
    const int64_t e = i % Dv, h = i / Dv % Hv, b = i / Dv / Hv, kh = h / (Hv / Hk);
    const int64_t column = (b * Hv + h) * Dk * Dv + e;  // S[d][e] at column + d·Dv
    float S[ops::kMaxDeltaRuleKeyDim];
    for (int64_t d = 0; d < Dk; ++d) S[d] = state.load(column + d * Dv);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t q_row = b * q_s[0] + t * q_s[1] + kh * q_s[2], k_row = b * k_s[0] + t * k_s[1] + kh * k_s[2];
      const float g_in = has_g ? g.load(b * g_s[0] + t * g_s[1] + h * g_s[2]) : 0.0f;
      const float b_in = has_beta ? beta.load(b * beta_s[0] + t * beta_s[1] + h * beta_s[2]) : 1.0f;
      const float alpha = gated ? expf(-expf(a_log.load(h)) * softplus(g_in + dt_bias.load(h))) : expf(g_in);
      const float strength = gated ? 1.0f / (1.0f + expf(-b_in)) : b_in;
      float r = 0.0f;  // (Sᵀk)[e], what the delta rule corrects toward v
      if (delta)
        for (int64_t d = 0; d < Dk; ++d) r += S[d] * k.load(k_row + d);
      const float u = strength * (v.load(b * v_s[0] + t * v_s[1] + h * v_s[2] + e) - alpha * r);
      float o = 0.0f;
      for (int64_t d = 0; d < Dk; ++d) {
        S[d] = alpha * S[d] + k.load(k_row + d) * u;
        o += S[d] * scale * q.load(q_row + d);
      }
      out.store(b * out_s[0] + t * out_s[1] + h * out_s[2] + e, o);
    }
    for (int64_t d = 0; d < Dk; ++d) state.store(column + d * Dv, S[d]);
  });
}

}  // namespace ding::kokkos
