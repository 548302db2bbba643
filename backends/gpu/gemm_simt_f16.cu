// launch_gemm_simt (gemm_simt.cuh) for f16 x and every w type, w as [N, K] (matmul) and as [K, N]
// (matmul_chain): one of the matmul cores' units (matmul_cores.h).
#include "gemm_simt.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

template void launch_gemm_simt<ding::f16, float, false>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_simt<ding::f16, ding::f16, false>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_simt<ding::f16, ding::bf16, false>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_simt<ding::f16, float, true>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_simt<ding::f16, ding::f16, true>(GpuStream&, const GemmShape&, const Epilogue&);
template void launch_gemm_simt<ding::f16, ding::bf16, true>(GpuStream&, const GemmShape&, const Epilogue&);

DING_GPU_END
