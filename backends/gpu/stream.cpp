#include "stream.h"

#include <string>

#include "ding/error.h"

namespace ding::gpu {

GpuStream& gpu_stream(Stream& stream) {
  if (auto* s = dynamic_cast<GpuStream*>(&stream)) return *s;
  throw Error(ErrorCode::device_mismatch,
              "gpu kernels: given a stream of backend '" + stream.device().name() + "', not of a GPU backend");
}

}  // namespace ding::gpu
