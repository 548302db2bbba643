// layer_norm and rms_norm: one team per row of C. The row's statistics are team reductions over
// h = x (+ residual); then each column is read, normalised and written by the same thread, so
// sum_out may be x or residual itself (a column's h is read before its sum_out is written).
// The row sums are in double: a serial f32 sum over thousands of columns (a Serial or OpenMP
// team is one thread) drifts past the op's tolerance, and it is one add per element.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

// h[r, c] = x (+ residual) of one row, the residual stream of the pre-norm block.
struct RowSum {
  Elements x, residual;
  KOKKOS_INLINE_FUNCTION float operator()(int64_t i) const { return x.load(i) + (residual.defined() ? residual.load(i) : 0.0f); }
};

int64_t rows_of(const Tensor& x) { return x.numel() / x.dim(-1); }

}  // namespace

void layer_norm(Stream&, const ops::LayerNormArgs& a) {
  const int64_t C = a.x.dim(-1);
  const RowSum h{elements(a.x), elements(a.params.residual)};
  const Elements out = elements(a.out), weight = elements(a.weight), bias = elements(a.params.bias),
                 sum_out = elements(a.params.sum_out);
  const float eps = a.params.eps;
  Kokkos::parallel_for("ding::layer_norm", TeamPolicy(rows_of(a.x), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const int64_t row = team.league_rank() * C;
    double sum = 0;
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, C), [&](const int64_t c, double& s) { s += h(row + c); }, sum);
    const float mean = float(sum / double(C));
    // The variance about the mean (a second pass) rather than E[h²] − mean²: no cancellation.
    double squares = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, C),
        [&](const int64_t c, double& s) {
          const double d = double(h(row + c)) - double(mean);
          s += d * d;
        },
        squares);
    const float rstd = float(1.0 / sqrt(squares / double(C) + double(eps)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int64_t c) {
      const float v = h(row + c);
      out.store(row + c, (v - mean) * rstd * weight.load(c) + (bias.defined() ? bias.load(c) : 0.0f));
      if (sum_out.defined()) sum_out.store(row + c, v);
    });
  });
}

void rms_norm(Stream&, const ops::RmsNormArgs& a) {
  const int64_t C = a.x.dim(-1);
  const RowSum h{elements(a.x), elements(a.params.residual)};
  const Elements out = elements(a.out), weight = elements(a.weight), sum_out = elements(a.params.sum_out);
  const float eps = a.params.eps;
  Kokkos::parallel_for("ding::rms_norm", TeamPolicy(rows_of(a.x), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const int64_t row = team.league_rank() * C;
    double squares = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, C),
        [&](const int64_t c, double& s) {
          const double v = h(row + c);
          s += v * v;
        },
        squares);
    const float rstd = float(1.0 / sqrt(squares / double(C) + double(eps)));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](const int64_t c) {
      const float v = h(row + c);
      out.store(row + c, v * rstd * weight.load(c));
      if (sum_out.defined()) sum_out.store(row + c, v);
    });
  });
}

}  // namespace ding::kokkos
