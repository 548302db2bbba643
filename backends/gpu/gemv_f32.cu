// launch_gemv (gemv.cuh) for f32 x and every w type, 8-bit ones with row scales included: one of
// the matmul cores' units (matmul_cores.h).
#include "gemv.cuh"
#include "matmul_cores.h"

DING_GPU_BEGIN

template void launch_gemv<float, float>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv<float, ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv<float, ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv<float, int8_t>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);
template void launch_gemv<float, ding::f8e4m3>(GpuStream&, const GemmShape&, const Epilogue&, const ops::MatmulNorm&);

DING_GPU_END
