// The backends compiled into this library, in the order "auto" prefers them. The DING_HAVE_*
// definitions come from CMake options and are set on ding alone: ding_cpu (ding::cpu) compiles
// this file without them, so it registers cpu and ref and links no GPU runtime.
#include "ding/device.h"

namespace ding {

void register_reference_backend();
void register_cpu_backend();
#ifdef DING_HAVE_CUDA
void register_cuda_backend();
#endif
#ifdef DING_HAVE_HIP
void register_hip_backend();
#endif
#ifdef DING_HAVE_KOKKOS
void register_kokkos_backend();
bool kokkos_memory_is_host();
#endif

void register_builtin_backends() {
#ifdef DING_HAVE_CUDA
  register_cuda_backend();
#endif
#ifdef DING_HAVE_HIP
  register_hip_backend();
#endif
#ifdef DING_HAVE_KOKKOS
  // A Kokkos built for a GPU is preferred to the cpu backend; one running on the host (Serial,
  // OpenMP) is not, since the cpu backend's kernels are the faster ones there.
  const bool kokkos_on_host = kokkos_memory_is_host();
  if (!kokkos_on_host) register_kokkos_backend();
#endif
  register_cpu_backend();
#ifdef DING_HAVE_KOKKOS
  if (kokkos_on_host) register_kokkos_backend();
#endif
  register_reference_backend();
}

}  // namespace ding
