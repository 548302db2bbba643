// ding-bench's cuBLAS comparison path for matmul (--matmul cublas), installed on a cuda device
// with ding::cuda::set_matmul_override. Built only with the CUDA backend.
#pragma once
#include <memory>

#include "ding/cuda.h"

namespace ding::bench {

std::shared_ptr<cuda::MatmulOverride> make_cublas_matmul();

}  // namespace ding::bench
