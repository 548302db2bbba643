// The "hip" backend: backends/gpu's device and kernels compiled for HIP (AMD GPUs, or NVIDIA
// ones through HIP's NVIDIA headers), registered here.
#include <fmt/format.h>

#include "../gpu/device.h"
#include "ding/error.h"

namespace ding {

void register_hip_backend() {
  registry::add({"hip", [] { return gpu::hip_api::device_count() > 0; }, [](int index) -> std::unique_ptr<Device> {
                   const int count = gpu::hip_api::device_count();
                   if (index >= count)
                     throw Error(ErrorCode::backend_unavailable,
                                 fmt::format("Device::open: hip:{} does not exist ({} HIP devices)", index, count));
                   return std::make_unique<gpu::hip_api::GpuDevice>("hip", index);
                 }});
}

}  // namespace ding
