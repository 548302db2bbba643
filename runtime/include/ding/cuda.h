// CUDA-only controls of a "cuda" device. Defined when ding is built with the CUDA backend
// (DING_HAVE_CUDA); for benchmarks and experiments, not needed to run models.
#pragma once
#include "ding/device.h"

namespace ding::cuda {

// Who computes ops::matmul on the device: ding's own kernels (the default), or cuBLAS as a
// comparison (cublasGemmEx with f32 accumulation) for the products it can take as they are:
// x and w of one dtype, out of that dtype or f32, no bias, activation or residual. Every
// other call still runs ding's kernels.
enum class MatmulPath { ding, cublas };

// Throws Error(invalid_argument) if `device` is not a CUDA device.
void set_matmul_path(Device& device, MatmulPath path);

}  // namespace ding::cuda
