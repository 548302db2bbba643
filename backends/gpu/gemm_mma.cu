// launch_gemm_mma and launch_gemm_mma_segments (gemm_mma.cuh) for f16 and bf16: one of the matmul cores' units
// (matmul_cores.h). NVIDIA only; a HIP build compiles it to nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
template void launch_gemm_mma<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_mma<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_mma_segments<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int, int);
template void launch_gemm_mma_segments<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int,
                                                   int);
#endif

DING_GPU_END
