// The tensor-core GEMM's TileSmall kernels (gemm_mma.cuh) for f16 and bf16: one of the matmul cores'
// units (matmul_cores.h). NVIDIA only; a HIP build compiles it to nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

namespace ding::gpu {

#if defined(DING_GPU_NVIDIA)
template void launch_gemm_mma_tile<ding::f16, mma::TileSmall>(GpuStream&, const GemmShape&, const Epilogue&, const SplitK&);
template void launch_gemm_mma_tile<ding::bf16, mma::TileSmall>(GpuStream&, const GemmShape&, const Epilogue&, const SplitK&);
#endif

}  // namespace ding::gpu
