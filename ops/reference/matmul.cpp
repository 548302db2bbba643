// Reference matmul and matmul_chain: the formulas as plain loops, accumulated in double.
//   matmul:       y[b,m,n] = act(Σ_k x[b,m,k]·w[b?,n,k] + bias[n]) + residual[b,m,n], x normalised first
//                 (a quantized w: w[n,k] = q[n,k]·scale[n], exactly, in double)
//                 by the reference layer_norm / rms_norm when a norm prologue is given
//                 (torch.nn.functional.linear followed by the activation; GELU is the tanh form of
//                 Hendrycks & Gimpel 2016, HF transformers `NewGELUActivation` / "gelu_new")
//                 swiglu: y[b,m,j] = silu(g)·u + residual[b,m,j] with g and u the sums (bias included)
//                 of rows j and N + j of w = [W_gate; W_up] (Shazeer 2020, "GLU Variants Improve
//                 Transformer", SwiGLU with β = 1; HF transformers `LlamaMLP`: act_fn(gate_proj(x)) *
//                 up_proj(x), act_fn = nn.SiLU, x·σ(x) of Elfwing et al. 2017)
//   matmul_chain: y = A0·A1·…·An, a plain product of the factors in order; the kernels' row chunking
//                 is a cache schedule that must not change the result, so the oracle ignores it.
//                 The oracle keeps the intermediates exact (double); the op's rounding of them to
//                 ops::matmul_chain_intermediate_dtype (16-bit for 16-bit chains, ops/matmul.h) is
//                 an error the backends are allowed, budgeted in the parity tolerance
//                 (tests/ops/matmul_cases.cpp).
#include <vector>

#include "reference.h"

namespace ding::reference {

void matmul(Stream& stream, const ops::MatmulArgs& a) {
  if (a.params.norm.kind != ops::NormKind::none)
    return ops::matmul_with_staged_prologue(stream, a, {layer_norm, rms_norm, matmul});
  const bool batched = a.x.rank == 3;
  const int64_t B = batched ? a.x.dim(0) : 1, M = a.x.dim(-2), K = a.x.dim(-1), N = a.out.dim(-1);
  const bool w_batched = a.w.rank == 3;
  const Tensor& bias = a.params.bias;
  const Tensor& residual = a.params.residual;
  // Offsets of element (b, i, j) of a rank-2 or rank-3 tensor; rank-2 tensors ignore b.
  auto at = [](const Tensor& t, int64_t b, int64_t i, int64_t j) {
    return t.rank == 3 ? offset(t, {b, i, j}) : offset(t, {i, j});
  };
  // Row r of w applied to row m of x, plus bias[r]; a quantized w's row scaled by its scale.
  const int64_t w_rows = a.w.dim(-2);
  auto linear = [&](int64_t b, int64_t m, int64_t r) {
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += load(a.x, at(a.x, b, m, k)) * load(a.w, at(a.w, w_batched ? b : 0, r, k));
    if (a.w.scales) acc *= double(a.w.scales[(w_batched ? b * w_rows : 0) + r]);
    if (bias.defined()) acc += load(bias, offset(bias, {r}));
    return acc;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = linear(b, m, n);
        if (a.params.activation == ops::Activation::gelu_tanh) acc = gelu_value(acc);
        if (a.params.activation == ops::Activation::swiglu) acc = silu_value(acc) * linear(b, m, N + n);
        // Read the residual before writing out: they may be the same tensor (in place).
        if (residual.defined()) acc += load(residual, at(residual, b, m, n));
        store(a.out, at(a.out, b, m, n), acc);
      }
}

void matmul_chain(Stream&, const ops::MatmulChainArgs& a) {
  const Tensor& first = a.factors[0];
  const int64_t R = first.dim(0);
  for (int64_t r = 0; r < R; ++r) {
    // One row of A0 carried through the chain: row ← row · A_i.
    std::vector<double> row(size_t(first.dim(1)));
    for (int64_t j = 0; j < first.dim(1); ++j) row[size_t(j)] = load(first, offset(first, {r, j}));
    for (int i = 1; i < a.count; ++i) {
      const Tensor& f = a.factors[i];
      std::vector<double> next(size_t(f.dim(1)), 0.0);
      for (int64_t k = 0; k < f.dim(0); ++k)
        for (int64_t j = 0; j < f.dim(1); ++j) next[size_t(j)] += row[size_t(k)] * load(f, offset(f, {k, j}));
      row = std::move(next);
    }
    for (int64_t j = 0; j < a.out.dim(1); ++j) store(a.out, offset(a.out, {r, j}), row[size_t(j)]);
  }
}

}  // namespace ding::reference
