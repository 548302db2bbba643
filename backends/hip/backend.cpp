// The "hip" backend: backends/gpu's device and kernels compiled for HIP (AMD GPUs, or NVIDIA
// ones through HIP's NVIDIA headers), registered here.
#include "../gpu/device.h"

namespace ding {

void register_hip_backend() { registry::add(gpu::hip_api::backend_info("hip")); }

}  // namespace ding
