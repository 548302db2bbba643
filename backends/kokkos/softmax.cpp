// softmax over the last dimension: one team per row; the max and the sum of exponentials are
// team reductions, then each column is written by the thread that reads it (out may be x). The
// denominator is summed in double: serially in f32 (a host team is one thread) 50257 terms drift
// past the op's tolerance.
#include <cfloat>

#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void softmax(Stream&, const ops::SoftmaxArgs& a) {
  const int64_t Tk = a.x.dim(-1), rows = a.x.numel() / Tk;
  const int64_t Tq = a.params.causal ? a.x.dim(-2) : 1;
  const bool causal = a.params.causal;
  const float scale = a.params.scale;
  const Elements out = elements(a.out), x = elements(a.x);
  Kokkos::parallel_for("ding::softmax", TeamPolicy(rows, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const int64_t r = team.league_rank(), row = r * Tk;
    // Causal: row i of each [Tq, Tk] block keeps the columns j ≤ i + Tk − Tq.
    const int64_t kept = causal ? r % Tq + (Tk - Tq) + 1 : Tk;
    float max = -FLT_MAX;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, kept), [&](const int64_t j, float& m) { m = fmaxf(m, scale * x.load(row + j)); },
        Kokkos::Max<float>(max));
    double sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, kept), [&](const int64_t j, double& s) { s += expf(scale * x.load(row + j) - max); },
        sum);
    const float inverse = float(1.0 / sum);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Tk), [&](const int64_t j) {
      out.store(row + j, j < kept ? expf(scale * x.load(row + j) - max) * inverse : 0.0f);
    });
  });
}

}  // namespace ding::kokkos
