// The "cuda" backend: backends/gpu's device and kernels compiled for CUDA, registered here.
#include <fmt/format.h>

#include "../gpu/device.h"
#include "ding/error.h"

namespace ding {

void register_cuda_backend() {
  registry::add({"cuda", [] { return gpu::cuda_api::device_count() > 0; }, [](int index) -> std::unique_ptr<Device> {
                   const int count = gpu::cuda_api::device_count();
                   if (index >= count)
                     throw Error(ErrorCode::backend_unavailable,
                                 fmt::format("Device::open: cuda:{} does not exist ({} CUDA devices)", index, count));
                   return std::make_unique<gpu::cuda_api::GpuDevice>("cuda", index);
                 }});
}

}  // namespace ding
