// causal_conv1d on the GPU (ops/conv.h). A few tokens a sequence (a decode step): one launch,
//   a thread per (b, c) slides the channel's window of K rows through registers, the old state
//   first, then x's T rows, writing each output as it goes and the last K − 1 rows back as the
//   state. A channel's state is read and written by its thread alone, so nothing waits on another
//   thread; the kernel is chained (vendor.h) and loads its weights before it waits (the state
//   waits: the kernel before may be this op's previous call).
// Longer inputs (prefill): two launches,
//   outputs  a thread per output element (b, t, c), channels along x so a warp reads consecutive
//            channels of each of its K input rows (state rows, then x rows: u[t] … u[t + K − 1]);
//   state    a thread per (b, c): the channel's K − 1 new rows u[T] … u[T + K − 2] gathered into
//            registers from the old state and x, then written, so the roll reads every old row
//            before any is overwritten; it runs after the outputs, which read the old state.
// Sums in f32, the silu in its overflow-free form (silu_times, elements.cuh).
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

// Inputs of at most this many tokens a sequence take the one-launch window kernel: its threads walk
// the tokens one after another. Only the decode step (1 token) has been timed; 8 is not tuned.
constexpr int64_t kWindowTokens = 8;

__device__ inline float conv_activation(const ConvShape& sh, float v) { return sh.silu ? silu_times(v, 1.0f) : v; }

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
    out.store(b * sh.out_b + t * sh.out_t + c, conv_activation(sh, v));
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

// For output t, window[j] holds u[t + j] (j < K − 1) and x's row t is the newest, u[t + K − 1].
__global__ void __launch_bounds__(kThreads)
    causal_conv1d_window_kernel(AnyFloat out, AnyFloat x, AnyFloat weight, AnyFloat state, AnyFloat bias, ConvShape sh) {
  constexpr int kMax = int(ops::kMaxCausalConvKernel);
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const bool mine = i < sh.B * sh.C;
  const int64_t b = mine ? i / sh.C : 0, c = mine ? i % sh.C : 0, S = sh.K - 1;
  float w[kMax - 1], window[kMax - 1];  // the weights of the state rows, and those rows
  float w_newest = 0.0f, v0 = 0.0f;
  if (mine) {
    v0 = bias.p ? bias.load(c) : 0.0f;
    w_newest = weight.load(c * sh.K + S);
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j)
      if (j < S) w[j] = weight.load(c * sh.K + j);
  }
  wait_for_prior_kernels();  // x is the kernel before's output
  release_dependents();
  if (!mine) return;
#pragma unroll
  for (int j = 0; j < kMax - 1; ++j)
    if (j < S) window[j] = state.load((b * S + j) * sh.C + c);
  for (int64_t t = 0; t < sh.T; ++t) {
    float v = v0;
    const float newest = x.load(b * sh.x_b + t * sh.x_t + c);
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j)
      if (j < S) v = fmaf(w[j], window[j], v);
    v = fmaf(w_newest, newest, v);
    out.store(b * sh.out_b + t * sh.out_t + c, conv_activation(sh, v));
#pragma unroll
    for (int j = 0; j < kMax - 1; ++j)
      if (j < S) window[j] = j + 1 < S ? window[j + 1] : newest;
  }
#pragma unroll
  for (int j = 0; j < kMax - 1; ++j)
    if (j < S) state.store((b * S + j) * sh.C + c, window[j]);
}

}  // namespace

void causal_conv1d(Stream& stream, const ops::CausalConv1dArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const ConvShape sh{a.x.dim(0),        a.x.dim(1),        a.x.dim(2),          int(a.weight.dim(1)),
                     a.activation == ops::ConvActivation::silu,
                     a.x.strides[0],    a.x.strides[1],    a.out.strides[0],    a.out.strides[1]};
  if (sh.B * sh.C == 0) return;
  if (sh.T <= kWindowTokens) {
    DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), causal_conv1d_window_kernel,
                                  dim3(unsigned(ceil_div(sh.B * sh.C, int64_t(kThreads)))), dim3(kThreads), 0, s.handle(),
                                  any_float(a.out), any_float(a.x), any_float(a.weight), any_float(a.state),
                                  any_float(a.bias), sh));
    DING_GPU_CHECK_LAUNCH("causal_conv1d_window_kernel");
    return;
  }
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
