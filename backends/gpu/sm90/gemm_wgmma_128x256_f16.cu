// The wgmma matmul core's 128 × 256 tile (gemm_wgmma.cuh) for f16: one tile and one dtype
// per unit, so the sm_90a units build in parallel.
#include "gemm_wgmma.cuh"

DING_GPU_BEGIN

template void wgmma::launch_gemm_wgmma_tile<ding::f16, wgmma::Tile256>(GpuStream&, const GemmShape&, const Epilogue&,
                                                                     const SplitK&);

DING_GPU_END
