// causal_conv1d on the GPU (ops/conv.h), two launches on the stream:
//   outputs  a thread per output element (b, t, c), channels along x so a warp reads consecutive
//            channels of each of its K input rows (state rows, then x rows: u[t] … u[t + K − 1]);
//            f32 sums, the silu in its overflow-free form (σ from e^(−|v|)).
//   state    a thread per (b, c): the channel's K − 1 new rows u[T] … u[T + K − 2] gathered into
//            registers from the old state and x, then written, so the roll reads every old row
//            before any is overwritten; it runs after the outputs, which read the old state.
// Every element goes through AnyFloat (its dtype read at run time): the op moves B·T·C elements
// K times at most, a small share of the layer it belongs to.
#include <algorithm>

#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "stream.h"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;

struct ConvShape {
  int64_t B, T, C;
  int K;
  bool silu;
  int64_t x_b, x_t, out_b, out_t;  // element strides of x and out (channels contiguous)
};

// Row i of u = [state ; x] of sequence b, element c.
__device__ inline float u_at(AnyFloat state, AnyFloat x, const ConvShape& sh, int64_t b, int64_t i, int64_t c) {
  const int64_t S = sh.K - 1;
  return i < S ? state.load((b * S + i) * sh.C + c) : x.load(b * sh.x_b + (i - S) * sh.x_t + c);
}

__global__ void __launch_bounds__(kThreads)
    causal_conv1d_kernel(AnyFloat out, AnyFloat x, AnyFloat weight, AnyFloat state, AnyFloat bias, ConvShape sh) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= sh.C) return;
  for (int64_t r = blockIdx.y; r < sh.B * sh.T; r += gridDim.y) {
    const int64_t b = r / sh.T, t = r % sh.T;
    float v = bias.p ? bias.load(c) : 0.0f;
    for (int j = 0; j < sh.K; ++j) v = fmaf(weight.load(c * sh.K + j), u_at(state, x, sh, b, t + j, c), v);
    if (sh.silu) {
      const float e = expf(-fabsf(v));
      v = v >= 0.0f ? v / (1.0f + e) : v * e / (1.0f + e);
    }
    out.store(b * sh.out_b + t * sh.out_t + c, v);
  }
}

__global__ void __launch_bounds__(kThreads) causal_conv1d_state_kernel(AnyFloat state, AnyFloat x, ConvShape sh) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= sh.B * sh.C) return;
  const int64_t b = i / sh.C, c = i % sh.C, S = sh.K - 1;
  float rows[ops::kMaxCausalConvKernel - 1];
#pragma unroll
  for (int s = 0; s < ops::kMaxCausalConvKernel - 1; ++s)
    if (s < S) rows[s] = u_at(state, x, sh, b, sh.T + s, c);
#pragma unroll
  for (int s = 0; s < ops::kMaxCausalConvKernel - 1; ++s)
    if (s < S) state.store((b * S + s) * sh.C + c, rows[s]);
}

}  // namespace

void causal_conv1d(Stream& stream, const ops::CausalConv1dArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const ConvShape sh{a.x.dim(0),        a.x.dim(1),        a.x.dim(2),          int(a.weight.dim(1)),
                     a.activation == ops::ConvActivation::silu,
                     a.x.strides[0],    a.x.strides[1],    a.out.strides[0],    a.out.strides[1]};
  if (sh.B * sh.C == 0) return;
  const unsigned channel_blocks = unsigned(ceil_div(sh.C, int64_t(kThreads)));
  if (sh.T > 0) {
    const dim3 grid(channel_blocks, unsigned(std::min<int64_t>(sh.B * sh.T, 65535)));
    causal_conv1d_kernel<<<grid, kThreads, 0, s.handle()>>>(any_float(a.out), any_float(a.x), any_float(a.weight),
                                                            any_float(a.state), any_float(a.bias), sh);
    DING_GPU_CHECK_LAUNCH("causal_conv1d_kernel");
  }
  causal_conv1d_state_kernel<<<unsigned(ceil_div(sh.B * sh.C, int64_t(kThreads))), kThreads, 0, s.handle()>>>(
      any_float(a.state), any_float(a.x), sh);
  DING_GPU_CHECK_LAUNCH("causal_conv1d_state_kernel");
}

DING_GPU_END
