// layer_norm and rms_norm: one team per row of C. The row's statistics are team reductions over
// h = x (+ residual); then each column is read, normalised and written by the same thread, so
// sum_out may be x or residual itself (a column's h is read before its sum_out is written).
// The row sums are in double: a serial f32 sum over thousands of columns (a Serial or OpenMP
// team is one thread) drifts past the op's tolerance, and it is one add per element. Each row
// tensor finds its rows through its own strides (RowStarts), so views of fused products work.
// rms_norm's gate multiplies each output by silu(gate) where it is written.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

// The row tensors of a norm: x (+ residual) is h, the residual stream of the pre-norm block.
struct NormRows {
  Elements x, residual, out, sum_out;
  RowStarts x_rows, residual_rows, out_rows, sum_out_rows;
};

NormRows norm_rows(const Tensor& x, const Tensor& residual, const Tensor& out, const Tensor& sum_out) {
  return {elements(x),   elements(residual),   elements(out),   elements(sum_out),
          row_starts(x), row_starts(residual), row_starts(out), row_starts(sum_out)};
}

// Row r's start in each row tensor.
struct RowAt {
  int64_t x, residual, out, sum_out;
};

KOKKOS_INLINE_FUNCTION RowAt row_at(const NormRows& t, int64_t r) {
  return {t.x_rows(r), t.residual_rows(r), t.out_rows(r), t.sum_out_rows(r)};
}

// h at column c of the row that starts at `at`.
KOKKOS_INLINE_FUNCTION float h_at(const NormRows& t, const RowAt& at, int64_t c) {
  return t.x.load(at.x + c) + (t.residual.defined() ? t.residual.load(at.residual + c) : 0.0f);
}

int64_t rows_of(const Tensor& x) { return x.numel() / x.dim(-1); }

}  // namespace

void layer_norm(Stream&, const ops::LayerNormArgs& a) {
  const int64_t C = a.x.dim(-1);
  const NormRows t = norm_rows(a.x, a.params.residual, a.out, a.params.sum_out);
  const Elements weight = elements(a.weight), bias = elements(a.params.bias);
  const int64_t weight_rows = a.weight.numel() / C;  // row r takes weight row r mod weight_rows
  const float eps = a.params.eps;
  Kokkos::parallel_for("ding::layer_norm", TeamPolicy(rows_of(a.x), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const RowAt at = row_at(t, team.league_rank());
    const int64_t w_row = team.league_rank() % weight_rows * C;
    double sum = 0;
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, C), [&](const int64_t c, double& s) { s += h_at(t, at, c); }, sum);
    const float mean = float(sum / double(C));
    // The variance about the mean (a second pass) rather than E[h²] − mean²: no cancellation.
    double squares = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, C),
        [&](const int64_t c, double& s) {
          const double d = double(h_at(t, at, c)) - double(mean);
          s += d * d;
        },
        squares);
    const float rstd = float(1.0 / sqrt(squares / double(C) + double(eps)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int64_t c) {
      const float v = h_at(t, at, c);
      t.out.store(at.out + c, (v - mean) * rstd * weight.load(w_row + c) + (bias.defined() ? bias.load(w_row + c) : 0.0f));
      if (t.sum_out.defined()) t.sum_out.store(at.sum_out + c, v);
    });
  });
}

void rms_norm(Stream&, const ops::RmsNormArgs& a) {
  const int64_t C = a.x.dim(-1);
  const NormRows t = norm_rows(a.x, a.params.residual, a.out, a.params.sum_out);
  const Elements weight = elements(a.weight), gate = elements(a.params.gate);
  const RowStarts gate_rows = row_starts(a.params.gate);
  const int64_t weight_rows = a.weight.numel() / C;  // row r takes weight row r mod weight_rows
  const float eps = a.params.eps;
  Kokkos::parallel_for("ding::rms_norm", TeamPolicy(rows_of(a.x), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const RowAt at = row_at(t, team.league_rank());
    const int64_t w_row = team.league_rank() % weight_rows * C;
    double squares = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, C),
        [&](const int64_t c, double& s) {
          const double v = h_at(t, at, c);
          s += v * v;
        },
        squares);
    const float rstd = float(1.0 / sqrt(squares / double(C) + double(eps)));
    const int64_t gate_at = gate.defined() ? gate_rows(team.league_rank()) : 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int64_t c) {
      const float v = h_at(t, at, c), y = v * rstd * weight.load(w_row + c);
      t.out.store(at.out + c, gate.defined() ? kokkos::silu(gate.load(gate_at + c)) * y : y);
      if (t.sum_out.defined()) t.sum_out.store(at.sum_out + c, v);
    });
  });
}

}  // namespace ding::kokkos
