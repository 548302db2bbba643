// The TMA matmul core's 64 × 128 tile (gemm_tma.cuh) for f16: one tile and one dtype per unit,
// so the sm_90a units build in parallel.
#include "gemm_tma.cuh"

DING_GPU_BEGIN

template void tma::launch_gemm_tma_tile<ding::f16, tma::Tile64x128>(GpuStream&, const GemmShape&, const Epilogue&,
                                                                 const SplitK&);

DING_GPU_END
