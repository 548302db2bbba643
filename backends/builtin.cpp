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

void register_builtin_backends() {
#ifdef DING_HAVE_CUDA
  register_cuda_backend();
#endif
#ifdef DING_HAVE_HIP
  register_hip_backend();
#endif
  register_cpu_backend();
  register_reference_backend();
}

}  // namespace ding
