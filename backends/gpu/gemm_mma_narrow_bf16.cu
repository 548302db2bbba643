// The tensor-core GEMM's kernels (gemm_mma.cuh) for bf16 x and 8-bit w (i8, E4M3; widened in
// registers), the large and wide tiles: one of the matmul cores' units (matmul_cores.h). NVIDIA
// only; a HIP build compiles it to nothing.
#include "gemm_mma.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
template void launch_gemm_mma_tile<ding::bf16, int8_t, mma::TileLarge4>(GpuStream&, const GemmShape&, const Epilogue&,
                                                                      const SplitK&, const RowSegments&);
template void launch_gemm_mma_tile<ding::bf16, int8_t, mma::TileWide>(GpuStream&, const GemmShape&, const Epilogue&,
                                                                    const SplitK&, const RowSegments&);
template void launch_gemm_mma_tile<ding::bf16, ding::f8e4m3, mma::TileLarge4>(GpuStream&, const GemmShape&,
                                                                            const Epilogue&, const SplitK&,
                                                                            const RowSegments&);
template void launch_gemm_mma_tile<ding::bf16, ding::f8e4m3, mma::TileWide>(GpuStream&, const GemmShape&,
                                                                          const Epilogue&, const SplitK&,
                                                                          const RowSegments&);
#endif

DING_GPU_END
