// Reference gated delta rule (ops/delta_rule.h), in double, in either form:
//   recurrent (params.chunk 0 or 1), token by token as transformers' torch_recurrent_gated_delta_rule:
//     S ← e^(g_t)·S;  u = β_t (v_t − Sᵀk_t);  S ← S + k_t uᵀ;  o_t = Sᵀ(s·q_t)
//   chunk-wise (params.chunk = C > 1), per chunk of n ≤ C tokens as the header derives it
//   (transformers: torch_chunk_gated_delta_rule): W = (I + L)^(-1) by forward substitution,
//     U = W (diag(β) V − diag(βγ) K S_0),  o_i = γ_i S_0ᵀ(s q_i) + Σ_{j≤i} (γ_i/γ_j)(s q_i·k_j) u_j,
//     S ← γ_n S_0 + Σ_j (γ_n/γ_j) k_j u_jᵀ
// With l2_normalize_qk both forms run on copies of q and k whose rows are x·(Σx² + ε)^-½, formed in
// double and rounded to f32, then to x's dtype.
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference.h"

namespace ding::reference {

namespace {

struct Head {  // one (sequence, value head) of the call, its inputs read in double
  const ops::GatedDeltaRuleArgs& a;
  int64_t b, h, kh, Dk, Dv;
  double scale;
  double q(int64_t t, int64_t d) const { return scale * load(a.q, offset(a.q, {b, t, kh, d})); }
  double k(int64_t t, int64_t d) const { return load(a.k, offset(a.k, {b, t, kh, d})); }
  double v(int64_t t, int64_t e) const { return load(a.v, offset(a.v, {b, t, h, e})); }
  double g(int64_t t) const {
    if (!a.g.defined()) return 0.0;
    const double g = load(a.g, offset(a.g, {b, t, h}));
    const ops::DeltaRuleGates& gates = a.params.gates;
    if (!gates.given()) return g;
    return -std::exp(load(gates.a_log, h)) * ops::delta_rule_softplus(g + load(gates.dt_bias, h));
  }
  double beta(int64_t t) const {
    if (!a.beta.defined()) return 1.0;
    const double b_t = load(a.beta, offset(a.beta, {b, t, h}));
    return a.params.gates.given() ? sigmoid_value(b_t) : b_t;
  }
  void out(int64_t t, int64_t e, double value) const { store(a.out, offset(a.out, {b, t, h, e}), value); }
};

// Tokens [t0, t1) from state S (Dk × Dv, row d holds S[d][·]), one at a time.
void recurrent(const Head& x, std::vector<double>& S, int64_t t0, int64_t t1) {
  const int64_t Dk = x.Dk, Dv = x.Dv;
  std::vector<double> u(static_cast<size_t>(Dv)), k(static_cast<size_t>(Dk)), q(static_cast<size_t>(Dk));
  for (int64_t t = t0; t < t1; ++t) {
    const double alpha = std::exp(x.g(t)), beta = x.beta(t);
    for (int64_t d = 0; d < Dk; ++d) k[size_t(d)] = x.k(t, d), q[size_t(d)] = x.q(t, d);
    for (double& s : S) s *= alpha;
    for (int64_t e = 0; e < Dv; ++e) {
      double recalled = 0;  // (Sᵀk)[e], what the delta rule corrects toward v
      if (x.a.params.delta)
        for (int64_t d = 0; d < Dk; ++d) recalled += S[size_t(d * Dv + e)] * k[size_t(d)];
      u[size_t(e)] = beta * (x.v(t, e) - recalled);
    }
    for (int64_t d = 0; d < Dk; ++d)
      for (int64_t e = 0; e < Dv; ++e) S[size_t(d * Dv + e)] += k[size_t(d)] * u[size_t(e)];
    for (int64_t e = 0; e < Dv; ++e) {
      double o = 0;
      for (int64_t d = 0; d < Dk; ++d) o += S[size_t(d * Dv + e)] * q[size_t(d)];
      x.out(t, e, o);
    }
  }
}

// Tokens [t0, t0 + n) from state S as one chunk of the chunk-wise form. The chunk's rows of q and
// k, its decays γ_i/γ_j and its products q_i·k_j are formed once, each as the formulas above say.
void chunk_wise(const Head& x, std::vector<double>& S, int64_t t0, int64_t n) {
  const int64_t Dk = x.Dk, Dv = x.Dv;
  std::vector<double> Q(static_cast<size_t>(n * Dk)), K(static_cast<size_t>(n * Dk));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < Dk; ++d) Q[size_t(i * Dk + d)] = x.q(t0 + i, d), K[size_t(i * Dk + d)] = x.k(t0 + i, d);
  auto dot = [&](const std::vector<double>& A, int64_t i, int64_t j) {  // A_i · K_j
    double s = 0;
    for (int64_t d = 0; d < Dk; ++d) s += A[size_t(i * Dk + d)] * K[size_t(j * Dk + d)];
    return s;
  };
  std::vector<double> G(static_cast<size_t>(n));  // G_i = g_1 + … + g_i within the chunk
  for (int64_t i = 0; i < n; ++i) G[size_t(i)] = (i > 0 ? G[size_t(i - 1)] : 0.0) + x.g(t0 + i);
  std::vector<double> ratio(static_cast<size_t>(n * n), 0.0), QK(static_cast<size_t>(n * n), 0.0);  // j ≤ i
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      ratio[size_t(i * n + j)] = std::exp(G[size_t(i)] - G[size_t(j)]);  // γ_i/γ_j
      QK[size_t(i * n + j)] = dot(Q, i, j);
    }
  // W = (I + L)^(-1), row by row: W_i = e_i − Σ_{j<i} L_ij W_j.
  std::vector<double> W(static_cast<size_t>(n * n), 0.0);
  const bool delta = x.a.params.delta;  // without it L = 0: W = I and no K S_0 term
  for (int64_t i = 0; i < n; ++i) {
    W[size_t(i * n + i)] = 1.0;
    for (int64_t j = 0; j < i && delta; ++j) {
      const double l = x.beta(t0 + i) * ratio[size_t(i * n + j)] * dot(K, i, j);
      for (int64_t m = 0; m <= j; ++m) W[size_t(i * n + m)] -= l * W[size_t(j * n + m)];
    }
  }
  // R = diag(β) V − diag(βγ) K S_0 (n × Dv), then U = W R.
  std::vector<double> R(static_cast<size_t>(n * Dv)), U(static_cast<size_t>(n * Dv), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double beta = x.beta(t0 + i), gamma = std::exp(G[size_t(i)]);
    for (int64_t e = 0; e < Dv; ++e) {
      double ks = 0;
      if (delta)
        for (int64_t d = 0; d < Dk; ++d) ks += K[size_t(i * Dk + d)] * S[size_t(d * Dv + e)];
      R[size_t(i * Dv + e)] = beta * (x.v(t0 + i, e) - gamma * ks);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t m = 0; m <= i; ++m)
      for (int64_t e = 0; e < Dv; ++e) U[size_t(i * Dv + e)] += W[size_t(i * n + m)] * R[size_t(m * Dv + e)];
  // Outputs from the chunk's starting state and its own writes.
  for (int64_t i = 0; i < n; ++i) {
    const double gamma = std::exp(G[size_t(i)]);
    for (int64_t e = 0; e < Dv; ++e) {
      double o = 0;
      for (int64_t d = 0; d < Dk; ++d) o += S[size_t(d * Dv + e)] * Q[size_t(i * Dk + d)];
      o *= gamma;
      for (int64_t j = 0; j <= i; ++j) o += ratio[size_t(i * n + j)] * QK[size_t(i * n + j)] * U[size_t(j * Dv + e)];
      x.out(t0 + i, e, o);
    }
  }
  // The state after the chunk.
  const double gamma_n = std::exp(G[size_t(n - 1)]);
  for (int64_t d = 0; d < Dk; ++d)
    for (int64_t e = 0; e < Dv; ++e) {
      double s = gamma_n * S[size_t(d * Dv + e)];
      for (int64_t j = 0; j < n; ++j) s += ratio[size_t((n - 1) * n + j)] * K[size_t(j * Dk + d)] * U[size_t(j * Dv + e)];
      S[size_t(d * Dv + e)] = s;
    }
}

// A contiguous copy of q or k ([B, T, Hk, Dk]) with every row L2-normalised, its bytes in `storage`.
Tensor l2_normalized(const Tensor& x, std::vector<double>& storage) {
  const int64_t D = x.dim(3), rows = x.numel() / D;
  storage.assign(size_t((x.numel() * int64_t(dtype_size(x.dtype)) + 7) / 8), 0.0);
  const Tensor copy = Tensor::view(storage.data(), x.device, x.dtype, {x.dim(0), x.dim(1), x.dim(2), D});
  std::vector<double> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (x.dim(1) * x.dim(2)), t = r / x.dim(2) % x.dim(1), h = r % x.dim(2);
    double squares = 0;
    for (int64_t d = 0; d < D; ++d) {
      row[size_t(d)] = load(x, offset(x, {b, t, h, d}));
      squares += row[size_t(d)] * row[size_t(d)];
    }
    const double inverse = 1.0 / std::sqrt(squares + double(ops::kDeltaRuleL2Eps));
    for (int64_t d = 0; d < D; ++d) store(copy, r * D + d, double(float(row[size_t(d)] * inverse)));
  }
  return copy;
}

}  // namespace

void gated_delta_rule(Stream& stream, const ops::GatedDeltaRuleArgs& args) {
  if (args.params.out_norm.given())
    return ops::gated_delta_rule_with_staged_norm_on_host(stream, args, gated_delta_rule, rms_norm);
  if (args.params.l2_normalize_qk) {
    std::vector<double> q_storage, k_storage;
    ops::GatedDeltaRuleArgs normalized = args;
    normalized.q = l2_normalized(args.q, q_storage);
    normalized.k = l2_normalized(args.k, k_storage);
    normalized.params.l2_normalize_qk = false;
    gated_delta_rule(stream, normalized);
    return;
  }
  const ops::GatedDeltaRuleArgs& a = args;
  const int64_t B = a.q.dim(0), T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const int64_t chunk = a.params.chunk;
  std::vector<double> S(static_cast<size_t>(Dk * Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hv; ++h) {
      const Head x{a, b, h, h / (Hv / Hk), Dk, Dv, ops::delta_rule_scale(a)};
      for (int64_t i = 0; i < Dk * Dv; ++i) S[size_t(i)] = load(a.state, offset(a.state, {b, h, i / Dv, i % Dv}));
      if (chunk <= 1)
        recurrent(x, S, 0, T);
      else
        for (int64_t t0 = 0; t0 < T; t0 += chunk) chunk_wise(x, S, t0, std::min(chunk, T - t0));
      for (int64_t i = 0; i < Dk * Dv; ++i) store(a.state, offset(a.state, {b, h, i / Dv, i % Dv}), S[size_t(i)]);
    }
}

}  // namespace ding::reference
