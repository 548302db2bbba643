#include "stream.h"

#include <string>

#include "ding/error.h"

DING_GPU_BEGIN

GpuStream& gpu_stream(Stream& stream) {
  if (auto* s = dynamic_cast<GpuStream*>(&stream)) return *s;
  throw Error(ErrorCode::device_mismatch,
              "gpu kernels: given a stream of backend '" + stream.device().name() + "', not of a GPU backend");
}

DING_GPU_END
