// The "kokkos" backend: the device of device.h and the kernels of this folder.
#include <fmt/format.h>

#include "ding/error.h"
#include "device.h"
#include "elements.h"
#include "kernels.h"

namespace ding {

namespace kokkos {

const ops::Kernels& KokkosDevice::kernels() const {
  static const ops::Kernels k = [] {
    ops::Kernels t;
#define DING_KOKKOS_SLOT(op, Args) t.op = kokkos::op;
    DING_OP_LIST(DING_KOKKOS_SLOT)
#undef DING_KOKKOS_SLOT
    return t;
  }();
  return k;
}

}  // namespace kokkos

// Known at compile time, so the registry can order backends without initialising Kokkos.
bool kokkos_memory_is_host() { return Kokkos::SpaceAccessibility<Kokkos::HostSpace, kokkos::Memory>::accessible; }

// One device: Kokkos' default execution space, whatever it was built for.
void register_kokkos_backend() {
  registry::add({"kokkos", [] { return true; }, [](int index) {
                   if (index != 0)
                     throw Error(ErrorCode::backend_unavailable,
                                 fmt::format("kokkos: one device (Kokkos' default execution space), not kokkos:{}", index));
                   return std::make_unique<kokkos::KokkosDevice>();
                 }});
}

}  // namespace ding
