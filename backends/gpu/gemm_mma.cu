// launch_gemm_mma and launch_gemm_mma_segments (gemm_mma.cuh) for 16-bit x with w of x's type or
// 8 bits: one of the matmul cores' units (matmul_cores.h). NVIDIA only; a HIP build compiles it to
// nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
#define DING_GEMM_MMA(X, W)                                                                                   \
  template void launch_gemm_mma<X, W>(GpuStream&, const GemmShape&, const Epilogue&);                          \
  template void launch_gemm_mma_segments<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int, \
                                               int);
DING_GEMM_MMA(ding::f16, ding::f16)
DING_GEMM_MMA(ding::bf16, ding::bf16)
DING_GEMM_MMA(ding::f16, int8_t)
DING_GEMM_MMA(ding::bf16, int8_t)
DING_GEMM_MMA(ding::f16, ding::f8e4m3)
DING_GEMM_MMA(ding::bf16, ding::f8e4m3)
#undef DING_GEMM_MMA
#endif

DING_GPU_END
