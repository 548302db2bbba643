// The "cuda" backend: backends/gpu's device and kernels compiled for CUDA, registered here.
#include "../gpu/device.h"

namespace ding {

void register_cuda_backend() { registry::add(gpu::cuda_api::backend_info("cuda")); }

}  // namespace ding
