// gated_delta_rule on the CPU (ops/delta_rule.h): OpenMP over the (sequence, value head) pairs,
// each walking its tokens with its state S (f32 [Dk, Dv], rows over the value dim) updated in
// place, in one of the two forms:
//   recurrent (params.chunk 1, and the backend's choice below kChunk tokens): per token two
//     passes along S's rows,
//     r = Sᵀk (before the decay, which is applied to r instead),  u = β (v − α r),
//     S[d] ← α S[d] + k[d] u  and, on the new row, o += s·q[d]·S[d];
//   chunk-wise (params.chunk > 1, and the backend's choice from kChunk tokens, in chunks of
//     kChunk): per chunk of n tokens the products KKᵀ and QKᵀ (n × n), U = (I + L)^(-1)(βV − βγ·K S_0)
//     by forward substitution, O = γ·Q S_0 + (decayed QKᵀ) U and S ← γ_n S_0 + Kᵀ(decayed U).
// The chunk-wise form has no fewer FLOPs (at Dk = Dv = 128 both do ~8·Dk·Dv per token by count),
// but its products run as blocked GEMMs where the recurrent form's per-token passes over the
// state are bound by L2: at Qwen3-Next's heads chunks of 16 measured 1.75× faster than the
// recurrent form at 4096 tokens (docs/PERFORMANCE.md).
// With l2_normalize_qk each q and k row is normalised where it is widened, in double as the op
// defines it.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "scratch.h"
#include "simd.h"
#include "strided.h"

namespace ding::cpu {

namespace {

constexpr int64_t kChunk = 16;  // the backend's choice of chunk, and the prompt length from which it chunks

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMajor>;


// Element (b, t, h) of a [B, T, H] tensor of any strides (g and β), as f32; of a [H] one at (0, 0, h).
float scalar_at(const Tensor& t, int64_t b, int64_t i, int64_t h) {
  float v;
  const int64_t at = t.rank == 1 ? h * t.strides[0] : b * t.strides[0] + i * t.strides[1] + h * t.strides[2];
  load_row(&v, static_cast<const char*>(t.data) + at *
                                                       int64_t(dtype_size(t.dtype)),
           t.dtype, 1);
  return v;
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

struct Head {  // one (sequence, value head): where its rows are, and its state
  const ops::GatedDeltaRuleArgs& a;
  int64_t b, h, kh, Dk, Dv;
  // Token t's log decay g_t and write strength β_t, through the gates where the call has them.
  float g(int64_t t) const {
    if (!a.g.defined()) return 0.0f;
    const float g = scalar_at(a.g, b, t, h);
    const ops::DeltaRuleGates& gates = a.params.gates;
    if (!gates.given()) return g;
    return -std::exp(scalar_at(gates.a_log, 0, 0, h)) * softplus(g + scalar_at(gates.dt_bias, 0, 0, h));
  }
  float beta(int64_t t) const {
    if (!a.beta.defined()) return 1.0f;
    const float b_t = scalar_at(a.beta, b, t, h);
    return a.params.gates.given() ? 1.0f / (1.0f + std::exp(-b_t)) : b_t;
  }
  // Row of token t in a [B, T, H, D] tensor: rows run over (b, t, head).
  int64_t row(const Tensor& x, int64_t t, int64_t head) const { return (b * x.dim(1) + t) * x.dim(2) + head; }
  float scale;
  float* S;
};

// Row `row` of q or k (D elements) widened into dst; with l2_normalize_qk, x·(Σx² + ε)^-½ rounded
// to f32 and then to x's dtype.
void load_key_row(float* dst, const Tensor& x, int64_t row, int64_t D, bool l2_normalize) {
  load_row(dst, row_bytes(x, row), x.dtype, D);
  if (!l2_normalize) return;
  double squares = 0;
  for (int64_t d = 0; d < D; ++d) squares += double(dst[d]) * dst[d];
  const double inverse = 1.0 / std::sqrt(squares + double(ops::kDeltaRuleL2Eps));
  for (int64_t d = 0; d < D; ++d) dst[d] = float(dst[d] * inverse);
  if (x.dtype == DType::f32) return;
  thread_local std::vector<uint16_t> narrow;  // f16 or bf16
  narrow.resize(size_t(D));
  store_row(narrow.data(), x.dtype, dst, D);
  load_row(dst, narrow.data(), x.dtype, D);
}

// y[0, n) += a · x[0, n)
void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void recurrent(const Head& x, int64_t t0, int64_t t1) {
  const ops::GatedDeltaRuleArgs& a = x.a;
  const int64_t Dk = x.Dk, Dv = x.Dv;
  float* const q = thread_scratch(ScratchSlot::first, size_t(2 * Dk));
  float* const k = q + Dk;
  float* const u = thread_scratch(ScratchSlot::second, size_t(3 * Dv));
  float* const r = u + Dv;
  float* const o = r + Dv;
  for (int64_t t = t0; t < t1; ++t) {
    load_key_row(q, a.q, x.row(a.q, t, x.kh), Dk, a.params.l2_normalize_qk);
    load_key_row(k, a.k, x.row(a.k, t, x.kh), Dk, a.params.l2_normalize_qk);
    load_row(u, row_bytes(a.v, x.row(a.v, t, x.h)), a.v.dtype, Dv);
    for (int64_t d = 0; d < Dk; ++d) q[d] *= x.scale;
    const float alpha = std::exp(x.g(t)), beta = x.beta(t);
    std::fill(r, r + Dv, 0.0f);
    if (a.params.delta)
      for (int64_t d = 0; d < Dk; ++d) axpy(r, k[d], x.S + d * Dv, Dv);
    for (int64_t e = 0; e < Dv; ++e) u[e] = beta * (u[e] - alpha * r[e]);
    std::fill(o, o + Dv, 0.0f);
    for (int64_t d = 0; d < Dk; ++d) {
      float* const row = x.S + d * Dv;
      for (int64_t e = 0; e < Dv; ++e) row[e] = alpha * row[e] + k[d] * u[e];
      axpy(o, q[d], row, Dv);
    }
    store_row(row_bytes_out(a.out, x.row(a.out, t, x.h)), a.out.dtype, o, Dv);
  }
}

// Tokens [t0, t0 + n) as one chunk (n ≤ chunk, the scratch's size). The chunk's products are
// Eigen's blocked GEMMs (single-threaded: the heads are the parallel loop).
void chunk_wise(const Head& x, int64_t t0, int64_t n, int64_t chunk) {
  const ops::GatedDeltaRuleArgs& a = x.a;
  const int64_t Dk = x.Dk, Dv = x.Dv;
  float* const q_data = thread_scratch(ScratchSlot::first, size_t(2 * chunk * Dk));  // [n][Dk], scaled
  float* const k_data = q_data + chunk * Dk;                                         // [n][Dk]
  float* const r_data = thread_scratch(ScratchSlot::second, size_t(3 * chunk * Dv));  // [n][Dv]: βV − βγ K S_0
  float* const u_data = r_data + chunk * Dv;                                           // [n][Dv]
  float* const o_data = u_data + chunk * Dv;                                           // [n][Dv]
  float* const mixed = thread_scratch(ScratchSlot::third, size_t(2 * chunk * chunk + chunk));  // [n][n] twice
  float* const beta = mixed + 2 * chunk * chunk;
  // The cumulative log decay in double: a strongly decaying head's G_i reach −1000s within a
  // chunk, where f32 would keep e^(G_i − G_j) of neighbours to only ~1e-4.
  thread_local std::vector<double> G;
  G.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    load_key_row(q_data + i * Dk, a.q, x.row(a.q, t0 + i, x.kh), Dk, a.params.l2_normalize_qk);
    load_key_row(k_data + i * Dk, a.k, x.row(a.k, t0 + i, x.kh), Dk, a.params.l2_normalize_qk);
    load_row(r_data + i * Dv, row_bytes(a.v, x.row(a.v, t0 + i, x.h)), a.v.dtype, Dv);
    G[size_t(i)] = (i > 0 ? G[size_t(i - 1)] : 0.0) + x.g(t0 + i);
    beta[i] = x.beta(t0 + i);
  }
  Map Q(q_data, n, Dk), K(k_data, n, Dk), R(r_data, n, Dv), U(u_data, n, Dv), O(o_data, n, Dv);
  Map S(x.S, Dk, Dv), KK(mixed, n, n), QK(mixed + chunk * chunk, n, n);
  Q *= x.scale;
  auto decay = [&](int64_t i, int64_t j) { return float(std::exp(G[size_t(i)] - G[size_t(j)])); };
  const bool delta = a.params.delta;  // without it L = 0: W = I and no K S_0 term
  // R = β(V − γ K S_0); O = γ Q S_0 (+ the chunk's own part below).
  if (delta) U.noalias() = K * S;
  O.noalias() = Q * S;
  for (int64_t i = 0; i < n; ++i) {
    const float gamma = float(std::exp(G[size_t(i)]));
    if (delta)
      R.row(i) = beta[i] * (R.row(i) - gamma * U.row(i));
    else
      R.row(i) *= beta[i];
    O.row(i) *= gamma;
  }
  // U = (I + L)^(-1) R, L_ij = β_i e^(G_i − G_j) k_i·k_j (j < i), by forward substitution; then
  // O += (decayed Q Kᵀ) U over j ≤ i.
  QK.noalias() = Q * K.transpose();
  if (delta) KK.noalias() = K * K.transpose();
  for (int64_t i = 0; i < n; ++i) {
    U.row(i) = R.row(i);
    for (int64_t j = 0; j < i; ++j) {
      const float d = decay(i, j);
      if (delta) U.row(i) -= (beta[i] * d * KK(i, j)) * U.row(j);
      QK(i, j) *= d;
    }
    for (int64_t j = i + 1; j < n; ++j) QK(i, j) = 0.0f;  // QK(i, i) keeps decay 1
  }
  O.noalias() += QK * U;
  for (int64_t i = 0; i < n; ++i) store_row(row_bytes_out(a.out, x.row(a.out, t0 + i, x.h)), a.out.dtype, o_data + i * Dv, Dv);
  // S ← γ_n S_0 + Σ_j (γ_n/γ_j) k_j u_jᵀ.
  for (int64_t j = 0; j < n; ++j) K.row(j) *= decay(n - 1, j);
  S *= float(std::exp(G[size_t(n - 1)]));
  S.noalias() += K.transpose() * U;
}

}  // namespace

void gated_delta_rule(Stream& stream, const ops::GatedDeltaRuleArgs& a) {
  if (a.params.out_norm.given()) return ops::gated_delta_rule_with_staged_norm_on_host(stream, a, gated_delta_rule, rms_norm);
  const int64_t B = a.q.dim(0), T = a.q.dim(1), Hk = a.q.dim(2), Dk = a.q.dim(3), Hv = a.v.dim(2), Dv = a.v.dim(3);
  const int64_t chunk = a.params.chunk > 1 ? a.params.chunk : a.params.chunk == 0 && T >= kChunk ? kChunk : 0;
  const float scale = ops::delta_rule_scale(a);
#pragma omp parallel for schedule(dynamic, 1) if (B * Hv * T * Dk * Dv >= (1 << 16))
  for (int64_t bh = 0; bh < B * Hv; ++bh) {
    const int64_t b = bh / Hv, h = bh % Hv;
    const Head x{a, b, h, h / (Hv / Hk), Dk, Dv, scale, a.state.ptr<float>() + bh * Dk * Dv};
    if (chunk == 0)
      recurrent(x, 0, T);
    else
      for (int64_t t0 = 0; t0 < T; t0 += chunk) chunk_wise(x, t0, std::min(chunk, T - t0), chunk);
  }
}

}  // namespace ding::cpu
