// gelu, silu and swiglu on the GPU. Tensors are contiguous, so element i is at offset i in
// each: a grid-stride loop moves N-element vectors (16 bytes on the widest side) while every
// base pointer is aligned for them, else single elements; the n mod N elements past the last
// vector go one to each of the grid's first threads. Each element is read and written by one
// thread, the read first, so out may be the input itself.
#include "access.cuh"
#include "activation_math.cuh"
#include "check.h"
#include "kernels.h"
#include "stream.h"

namespace ding::gpu {
namespace {

constexpr int kThreads = 256;

struct Gelu {
  __device__ float operator()(float x) const { return gelu(x); }
};
struct Silu {
  __device__ float operator()(float x) const { return x_sigmoid(x, 1.0f, x, 0.0f); }
};

// out, x: [n], contiguous.
template <int N, class Op, class Out, class In>
__global__ void __launch_bounds__(kThreads) unary_kernel(Out out, In x, int64_t n, Op op) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t body = n - n % N;
  for (int64_t i = first * N; i < body; i += stride * N) {
    float v[N];
    x.template load<N>(i, v);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = op(v[j]);
    out.template store<N>(i, v);
  }
  if (first < n - body) out.store(body + first, op(x.load(body + first)));
}

// out, gate, up: [n], contiguous.
template <int N, class Out, class Gate, class Up>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(Out out, Gate gate, Up up, int64_t n) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t body = n - n % N;
  for (int64_t i = first * N; i < body; i += stride * N) {
    float g[N], u[N];
    gate.template load<N>(i, g);
    up.template load<N>(i, u);
#pragma unroll
    for (int j = 0; j < N; ++j) g[j] = x_sigmoid(g[j], u[j], g[j], 0.0f);
    out.template store<N>(i, g);
  }
  if (first < n - body) {
    const float g = gate.load(body + first);
    out.store(body + first, x_sigmoid(g, up.load(body + first), g, 0.0f));
  }
}

// Enough blocks for one vector per thread, at most 16 per multiprocessor (the loop strides).
unsigned grid_for(const GpuStream& s, int64_t n, int N) {
  return unsigned(std::min<int64_t>(ceil_div(std::max<int64_t>(n / N, 1), kThreads), int64_t(s.props().sm_count) * 16));
}

template <class Op>
void unary(Stream& stream, const Tensor& out, const Tensor& x, Op op) {
  GpuStream& s = gpu_stream(stream);
  const int64_t n = x.numel();
  with_float_type(out.dtype, [&](auto out_tag) {
    with_float_type(x.dtype, [&](auto x_tag) {
      using O = decltype(out_tag);
      using X = decltype(x_tag);
      constexpr int N = 16 / int(sizeof(O) > sizeof(X) ? sizeof(O) : sizeof(X));
      if (aligned_for(out, N) && aligned_for(x, N))
        unary_kernel<N><<<grid_for(s, n, N), kThreads, 0, s.handle()>>>(typed<O>(out), typed<X>(x), n, op);
      else
        unary_kernel<1><<<grid_for(s, n, 1), kThreads, 0, s.handle()>>>(typed<O>(out), typed<X>(x), n, op);
    });
  });
  DING_GPU_CHECK_LAUNCH("unary_kernel");
}

}  // namespace

void gelu(Stream& stream, const ops::GeluArgs& a) { unary(stream, a.out, a.x, Gelu{}); }

void silu(Stream& stream, const ops::SiluArgs& a) { unary(stream, a.out, a.x, Silu{}); }

// Typed when gate and up share a dtype; any other mix element by element through AnyFloat.
void swiglu(Stream& stream, const ops::SwigluArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const int64_t n = a.out.numel();
  if (a.gate.dtype != a.up.dtype) {
    swiglu_kernel<1><<<grid_for(s, n, 1), kThreads, 0, s.handle()>>>(any_float(a.out), any_float(a.gate),
                                                                     any_float(a.up), n);
    DING_GPU_CHECK_LAUNCH("swiglu_kernel");
    return;
  }
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.gate.dtype, [&](auto in_tag) {
      using O = decltype(out_tag);
      using I = decltype(in_tag);
      constexpr int N = 16 / int(sizeof(O) > sizeof(I) ? sizeof(O) : sizeof(I));
      if (aligned_for(a.out, N) && aligned_for(a.gate, N) && aligned_for(a.up, N))
        swiglu_kernel<N><<<grid_for(s, n, N), kThreads, 0, s.handle()>>>(typed<O>(a.out), typed<I>(a.gate),
                                                                         typed<I>(a.up), n);
      else
        swiglu_kernel<1><<<grid_for(s, n, 1), kThreads, 0, s.handle()>>>(typed<O>(a.out), typed<I>(a.gate),
                                                                         typed<I>(a.up), n);
    });
  });
  DING_GPU_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace ding::gpu
