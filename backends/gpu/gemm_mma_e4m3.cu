// Prefill products of 16-bit x and E4M3 weights on E4M3 tensor cores (NVIDIA sm_89+): each row of
// x rounded to E4M3 with a scale of its own, then gemm_mma_kernel<f8e4m3, f8e4m3> (gemm_mma.cuh),
// whose epilogue multiplies each f32 sum by its x row's scale and its w row's. One of the matmul
// cores' units (matmul_cores.h); a HIP build compiles it to nothing.
//
// The rounding: scale = max |x[m, :]| / 448 (E4M3's largest finite value), x / scale rounded to
// nearest and saturated. Each element then carries a relative error of at most 2^-4 (3 mantissa
// bits), which is what ops/matmul.h allows this path (W8A8, as fp8 serving engines run it). In
// exchange each m16n8k32 mma takes twice the K of a 16-bit m16n8k16, and both operands are half
// the bytes in shared memory.
#include "check.h"
#include "gemm_mma.cuh"
#include "matmul_cores.h"
#include "reduce.cuh"

DING_GPU_BEGIN

#if defined(DING_GPU_NVIDIA)
namespace {

constexpr int kRoundThreads = 128;

// Grid-stride over rows: q[m, :] = E4M3(x[m, :] / scale[m]), scale[m] = max |x[m, :]| / 448 (1 for
// a zero row). K % 16 == 0 (the GEMM's chunks), so a thread's 8 elements are one 16-byte load.
template <class X>
__global__ void __launch_bounds__(kRoundThreads) round_rows_e4m3_kernel(const X* x, uint8_t* q, float* scales,
                                                                        int64_t rows, int64_t K) {
#if defined(DING_GPU_E4M3_MMA)
  __shared__ float red[32];
  const int64_t vectors = K / 8;
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const uint4* row = reinterpret_cast<const uint4*>(x + m * K);
    float peak = 0.0f;
    for (int64_t v = threadIdx.x; v < vectors; v += kRoundThreads) {
      Pack<X, 8> pk;
      *reinterpret_cast<uint4*>(pk.v) = row[v];
#pragma unroll
      for (int e = 0; e < 8; ++e) peak = fmaxf(peak, fabsf(to_float(pk.v[e])));
    }
    peak = block_max(peak, red);
    const float scale = peak > 0.0f ? peak / 448.0f : 1.0f, inverse = 1.0f / scale;
    if (threadIdx.x == 0) scales[m] = scale;
    uint2* out = reinterpret_cast<uint2*>(q + m * K);
    for (int64_t v = threadIdx.x; v < vectors; v += kRoundThreads) {
      Pack<X, 8> pk;
      *reinterpret_cast<uint4*>(pk.v) = row[v];
      uint32_t bytes[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = to_e4m3x2(to_float(pk.v[4 * h]) * inverse, to_float(pk.v[4 * h + 1]) * inverse);
        const uint32_t hi = to_e4m3x2(to_float(pk.v[4 * h + 2]) * inverse, to_float(pk.v[4 * h + 3]) * inverse);
        bytes[h] = lo | hi << 16;
      }
      out[v] = make_uint2(bytes[0], bytes[1]);
    }
    __syncthreads();  // red is reused by the next row's reduction
  }
#endif
}

// Whether this build's E4M3 kernels carry the sm_89 instructions on this device: a build whose
// code for the GPU is PTX for an older architecture would trap in them.
bool e4m3_kernels_compiled() {
  static const bool compiled = [] {
    const auto kernel = mma::gemm_mma_kernel<ding::f8e4m3, ding::f8e4m3, mma::TileLarge4>;
    return kernel_compiled_for(reinterpret_cast<const void*>(kernel), 89);
  }();
  return compiled;
}

}  // namespace

bool gemm_mma_e4m3_available(const GpuStream& s) {
  return s.props().has_e4m3_mma() && s.matmul_tuning().e4m3_mma && e4m3_kernels_compiled();
}

template <class X>
void launch_gemm_mma_e4m3(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets, int E) {
  const int64_t rows = p.batches * p.M;
  // The rounded rows, then their scales (16-byte aligned: K % 16 == 0).
  uint8_t* const q = static_cast<uint8_t*>(
      s.scratch(size_t(rows * p.K) + size_t(rows) * sizeof(float), GpuStream::ScratchSlot::intermediate));
  float* const scales = reinterpret_cast<float*>(q + rows * p.K);
  const unsigned blocks = unsigned(std::min<int64_t>(rows, int64_t(s.props().sm_count) * 16));
  round_rows_e4m3_kernel<X><<<blocks, kRoundThreads, 0, s.handle()>>>(static_cast<const X*>(p.x), q, scales, rows, p.K);
  DING_GPU_CHECK_LAUNCH("round_rows_e4m3_kernel");
  GemmShape rounded = p;
  rounded.x = q;
  Epilogue scaled = ep;
  scaled.x_scales = scales;
  if (offsets)
    launch_gemm_mma_segments<ding::f8e4m3>(s, rounded, scaled, offsets, E, int(p.M));
  else
    launch_gemm_mma<ding::f8e4m3>(s, rounded, scaled);
}

template void launch_gemm_mma_e4m3<ding::f16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int);
template void launch_gemm_mma_e4m3<ding::bf16>(GpuStream&, const GemmShape&, const Epilogue&, const int32_t*, int);
DING_GEMM_MMA_NARROW_TILES(, ding::f8e4m3, ding::f8e4m3)
#endif

DING_GPU_END
