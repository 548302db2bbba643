// launch_gemv_mma (gemv_mma.cuh) for 16-bit x and 8-bit w (i8, f8e4m3 with row scales): one of the
// matmul cores' units (matmul_cores.h). NVIDIA only; a HIP build compiles it to nothing.
#include "gemv_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
template void launch_gemv_mma<ding::f16, int8_t>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv_mma<ding::f16, ding::f8e4m3>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv_mma<ding::bf16, int8_t>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv_mma<ding::bf16, ding::f8e4m3>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
#endif

DING_GPU_END
