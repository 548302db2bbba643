// launch_gemm_mma and launch_gemm_mma_segments (gemm_mma.cuh) for 16-bit x with w of x's type or
// 8 bits: one of the matmul cores' units (matmul_cores.h). NVIDIA only; a HIP build compiles it to
// nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
#define DING_GEMM_MMA_DEFINE(X, W) DING_GEMM_MMA_LAUNCHES(, X, W)
DING_GEMM_MMA_OPERANDS(DING_GEMM_MMA_DEFINE)
#undef DING_GEMM_MMA_DEFINE
#endif

DING_GPU_END
