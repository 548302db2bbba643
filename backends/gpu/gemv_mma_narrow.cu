// launch_gemv_mma and launch_gemv_mma_segments (gemv_mma.cuh) for 16-bit x and 8-bit w (i8, f8e4m3 with row scales): one of the
// matmul cores' units (matmul_cores.h). NVIDIA only; a HIP build compiles it to nothing.
#include "gemv_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
#define DING_GEMV_MMA_NARROW(X, W)                                                                         \
  template void launch_gemv_mma<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&); \
  template void launch_gemv_mma_segments<X, W>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int, int, bool);
DING_GEMV_MMA_NARROW(ding::f16, int8_t)
DING_GEMV_MMA_NARROW(ding::f16, ding::f8e4m3)
DING_GEMV_MMA_NARROW(ding::bf16, int8_t)
DING_GEMV_MMA_NARROW(ding::bf16, ding::f8e4m3)
#undef DING_GEMV_MMA_NARROW
#endif

DING_GPU_END
