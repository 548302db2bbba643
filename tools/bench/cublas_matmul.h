// ding-bench's cuBLAS comparison path for matmul (--matmul cublas), installed on a cuda device
// with ding::gpu::set_matmul_override. Built only with the CUDA backend.
#pragma once
#include <memory>

#include "ding/gpu.h"

namespace ding::bench {

std::shared_ptr<gpu::MatmulOverride> make_cublas_matmul();

}  // namespace ding::bench
