// The tensor-core GEMM's kernels (gemm_mma.cuh) for bf16 x and 8-bit w (i8, E4M3; widened in
// registers), the large and wide tiles: one of the matmul cores' units (matmul_cores.h). NVIDIA
// only; a HIP build compiles it to nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
DING_GEMM_MMA_NARROW_TILES(, ding::bf16, int8_t)
DING_GEMM_MMA_NARROW_TILES(, ding::bf16, ding::f8e4m3)
#endif

DING_GPU_END
