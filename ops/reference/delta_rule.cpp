// Reference gated delta rule (ops/delta_rule.h), token by token as transformers'
// torch_recurrent_gated_delta_rule computes it, in double:
//   S ← e^(g_t)·S;  u = β_t (v_t − Sᵀk_t);  S ← S + k_t uᵀ;  o_t = Sᵀ(s·q_t)
#include <cmath>
#include <vector>

#include "reference.h"

namespace ding::reference {

void gated_delta_rule(Stream&, const ops::GatedDeltaRuleArgs& a) {
  const int64_t B = a.q.dim(0), T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const double scale = ops::delta_rule_scale(a);
  std::vector<double> S(static_cast<size_t>(Dk * Dv)), q(static_cast<size_t>(Dk)), k(static_cast<size_t>(Dk)),
      u(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / (Hv / Hk);
      for (int64_t i = 0; i < Dk * Dv; ++i) S[size_t(i)] = load(a.state, offset(a.state, {b, h, i / Dv, i % Dv}));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < Dk; ++d) {
          q[size_t(d)] = scale * load(a.q, offset(a.q, {b, t, kh, d}));
          k[size_t(d)] = load(a.k, offset(a.k, {b, t, kh, d}));
        }
        const double alpha = std::exp(load(a.g, offset(a.g, {b, t, h}))), beta = load(a.beta, offset(a.beta, {b, t, h}));
        for (double& s : S) s *= alpha;
        for (int64_t e = 0; e < Dv; ++e) {
          double recalled = 0;  // (Sᵀk)[e]
          for (int64_t d = 0; d < Dk; ++d) recalled += S[size_t(d * Dv + e)] * k[size_t(d)];
          u[size_t(e)] = beta * (load(a.v, offset(a.v, {b, t, h, e})) - recalled);
        }
        for (int64_t d = 0; d < Dk; ++d)
          for (int64_t e = 0; e < Dv; ++e) S[size_t(d * Dv + e)] += k[size_t(d)] * u[size_t(e)];
        for (int64_t e = 0; e < Dv; ++e) {
          double o = 0;
          for (int64_t d = 0; d < Dk; ++d) o += S[size_t(d * Dv + e)] * q[size_t(d)];
          store(a.out, offset(a.out, {b, t, h, e}), o);
        }
      }
      for (int64_t i = 0; i < Dk * Dv; ++i) store(a.state, offset(a.state, {b, h, i / Dv, i % Dv}), S[size_t(i)]);
    }
}

}  // namespace ding::reference
