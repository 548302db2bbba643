// CUDA-only controls of a "cuda" device. Defined when ding is built with the CUDA backend
// (DING_HAVE_CUDA); for benchmarks and experiments, not needed to run models.
#pragma once
#include <memory>

#include "ding/device.h"
#include "ding/ops/matmul.h"

namespace ding::cuda {

// Who computes ops::matmul on the device: ding's own kernels (the default), or another library
// for comparison (ding-bench --matmul cublas installs one). The library links no vendor BLAS
// itself; the override brings its own.
class MatmulOverride {
 public:
  virtual ~MatmulOverride() = default;
  // Computes the call on `stream` (the device's cudaStream_t) and returns true, or returns false
  // without doing anything for a call it does not take: ding's kernels then run it. Called after
  // ops::matmul has checked the arguments.
  virtual bool matmul(void* stream, const ops::MatmulArgs& args) = 0;
};

// nullptr returns matmul to ding's kernels. Throws Error(invalid_argument) if `device` is not a
// CUDA device.
void set_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);

}  // namespace ding::cuda
