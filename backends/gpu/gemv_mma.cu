// launch_gemv_mma and launch_gemv_mma_segments (gemv_mma.cuh) for f16 and bf16: one of the matmul cores' units
// (matmul_cores.h). NVIDIA only; a HIP build compiles it to nothing.
#include "gemv_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
template void launch_gemv_mma<ding::f16, ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv_mma<ding::bf16, ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv_mma_segments<ding::f16, ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*,
                                                              int, int, bool);
template void launch_gemv_mma_segments<ding::bf16, ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&,
                                                                const int32_t*, int, int, bool);
#endif

DING_GPU_END
