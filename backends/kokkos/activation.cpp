// Pointwise activations, one element per work item; each element is read before it is written,
// so out may be the input itself.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void gelu(Stream&, const ops::GeluArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  Kokkos::parallel_for("ding::gelu", Range(0, a.x.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, gelu_tanh(x.load(i))); });
}

void silu(Stream&, const ops::SiluArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  Kokkos::parallel_for("ding::silu", Range(0, a.x.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, kokkos::silu(x.load(i))); });
}

void swiglu(Stream&, const ops::SwigluArgs& a) {
  const Elements out = elements(a.out), gate = elements(a.gate), up = elements(a.up);
  Kokkos::parallel_for("ding::swiglu", Range(0, a.out.numel()),
                       KOKKOS_LAMBDA(const int64_t i) { out.store(i, kokkos::silu(gate.load(i)) * up.load(i)); });
}

}  // namespace ding::kokkos
