// The tensor-core GEMM's TileLarge4 kernel (gemm_mma.cuh) for bf16: one of the matmul cores' units
// (matmul_cores.h). One tile and one dtype per unit: a single tile kernel takes ~40 s to compile
// for sm_89 + sm_90 on a 2-core machine. NVIDIA only; a HIP build compiles it to nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
template void launch_gemm_mma_tile<ding::bf16, ding::bf16, mma::TileLarge4>(GpuStream&, const GemmShape&, const Epilogue&, const SplitK&,
                                                         const RowSegments&);
#endif

DING_GPU_END
