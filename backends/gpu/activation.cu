// gelu, silu, swiglu, clamp, sigmoid_gate and activation on the GPU. Contiguous tensors have element i at offset i in
// each: a grid-stride loop moves N-element vectors (16 bytes on the widest side) while every
// base pointer is aligned for them, else single elements; the n mod N elements past the last
// vector go one to each of the grid's first threads. clamp's strided views go row by row
// (strided.cuh), in vectors where every row start allows them. Each element is read and written
// by one thread, the read first, so out may be the input itself.
#include <type_traits>

#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "stream.h"
#include "strided.cuh"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;

struct Gelu {
  __device__ float operator()(float x) const { return gelu_tanh(x); }
};
struct Silu {
  __device__ float operator()(float x) const { return x_sigmoid(x, 1.0f, x, 0.0f); }
};
// The comparisons are false for a NaN x, which is kept (torch.clamp; fminf/fmaxf would drop it).
struct Clamp {
  float lo, hi;
  __device__ float operator()(float x) const { return x < lo ? lo : x > hi ? hi : x; }
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

// out, x: [..., cols], rows where their layouts put them; cols % N == 0, and every row start
// aligned for N-element vectors.
template <int N, class Op, class Out, class In>
__global__ void unary_rows_kernel(Out out, RowLayout out_rows, In x, RowLayout x_rows, int64_t rows, int64_t cols,
                                  Op op) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < rows; r += int64_t(gridDim.x) * blockDim.y) {
    const int64_t out_at = row_offset(out_rows, r), x_at = row_offset(x_rows, r);
    for (int64_t c = int64_t(threadIdx.x) * N; c < cols; c += int64_t(blockDim.x) * N) {
      float v[N];
      x.template load<N>(x_at + c, v);
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = op(v[j]);
      out.template store<N>(out_at + c, v);
    }
  }
}

// out, x: [..., cols] and gate [..., cols] (gate_step 1) or [..., 1] (gate_step 0), rows where their
// layouts put them; one element per thread.
template <class Out, class In, class Gate>
__global__ void sigmoid_gate_kernel(Out out, RowLayout out_rows, In x, RowLayout x_rows, Gate gate, RowLayout gate_rows,
                                    int64_t rows, int64_t cols, int64_t gate_step) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < rows; r += int64_t(gridDim.x) * blockDim.y) {
    const int64_t out_at = row_offset(out_rows, r), x_at = row_offset(x_rows, r), gate_at = row_offset(gate_rows, r);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float t = gate.load(gate_at + c * gate_step);
      out.store(out_at + c, x_sigmoid(x.load(x_at + c), 1.0f, t, 0.0f));
    }
  }
}

// transformers' ACT2FN functions (ops::ActivationFn) on one element, with a gated row's up factor.
__device__ inline float activation_value(ops::ActivationFn fn, float x, float up) {
  float y = x;
  switch (fn) {
    case ops::ActivationFn::silu: y = x_sigmoid(x, 1.0f, x, 0.0f); break;
    case ops::ActivationFn::gelu_erf: y = 0.5f * x * erfcf(-x * 0.70710678118654752f); break;
    case ops::ActivationFn::gelu_tanh: y = gelu_tanh(x); break;
    case ops::ActivationFn::quick_gelu: {  // t = 1.702·x in two floats, as gelu_tanh forms its t
      constexpr float c_hi = 1.702f, c_lo = float(1.702 - double(c_hi));
      const float t = mul_rn(c_hi, x);
      y = x_sigmoid(x, 1.0f, t, fmaf(c_hi, x, -t) + c_lo * x);
      break;
    }
    case ops::ActivationFn::relu: y = x > 0.0f || x != x ? x : 0.0f; break;
  }
  return y * up;
}

// out [rows, N], x [rows, N] or gated [rows, 2N] (gate, then up): one element per thread, any
// dtypes through AnyFloat (the op serves rare configs; the fused products serve the common ones).
__global__ void __launch_bounds__(kThreads) activation_kernel(AnyFloat out, AnyFloat x, int64_t n, int64_t N, bool gated,
                                                              ops::ActivationFn fn) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t in_cols = gated ? 2 * N : N;
  for (int64_t i = first; i < n; i += stride) {
    const int64_t r = i / N, j = i % N;
    out.store(i, activation_value(fn, x.load(r * in_cols + j), gated ? x.load(r * in_cols + N + j) : 1.0f));
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

// Rows of strided views: N-element vectors when the row length and every row start allow them.
template <class Op>
void unary_rows(Stream& stream, const Tensor& out, const Tensor& x, Op op) {
  GpuStream& s = gpu_stream(stream);
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  const RowLayout out_rows = row_layout(out), x_rows = row_layout(x);
  with_float_type(out.dtype, [&](auto out_tag) {
    with_float_type(x.dtype, [&](auto x_tag) {
      using O = decltype(out_tag);
      using X = decltype(x_tag);
      constexpr int N = 16 / int(sizeof(O) > sizeof(X) ? sizeof(O) : sizeof(X));
      auto launch = [&](auto width) {
        constexpr int V = decltype(width)::value;
        const dim3 block = row_block(ceil_div(cols, V));
        unary_rows_kernel<V><<<row_grid(s, rows, block), block, 0, s.handle()>>>(typed<O>(out), out_rows, typed<X>(x),
                                                                                  x_rows, rows, cols, op);
      };
      const bool vectors = cols % N == 0 && aligned_for(out, N) && aligned_for(x, N) &&
                           rows_start_at_multiples(out, N) && rows_start_at_multiples(x, N);
      if (vectors)
        launch(std::integral_constant<int, N>{});
      else
        launch(std::integral_constant<int, 1>{});
    });
  });
  DING_GPU_CHECK_LAUNCH("unary_rows_kernel");
}

}  // namespace

void gelu(Stream& stream, const ops::GeluArgs& a) { unary(stream, a.out, a.x, Gelu{}); }

// Any dtype mix through AnyFloat: the gates are a small share of a layer's time.
void sigmoid_gate(Stream& stream, const ops::SigmoidGateArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const int64_t cols = a.x.dim(-1), rows = a.x.numel() / cols;
  const dim3 block = row_block(cols);
  sigmoid_gate_kernel<<<row_grid(s, rows, block), block, 0, s.handle()>>>(
      any_float(a.out), row_layout(a.out), any_float(a.x), row_layout(a.x), any_float(a.gate), row_layout(a.gate), rows,
      cols, a.gate.dim(-1) == cols ? 1 : 0);
  DING_GPU_CHECK_LAUNCH("sigmoid_gate_kernel");
}

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

void activation(Stream& stream, const ops::ActivationArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const int64_t n = a.out.numel();
  activation_kernel<<<grid_for(s, n, 1), kThreads, 0, s.handle()>>>(any_float(a.out), any_float(a.x), n, a.out.dim(-1),
                                                                    a.gated, a.fn);
  DING_GPU_CHECK_LAUNCH("activation_kernel");
}

void clamp(Stream& stream, const ops::ClampArgs& a) {
  if (a.x.is_contiguous() && a.out.is_contiguous())
    unary(stream, a.out, a.x, Clamp{a.lo, a.hi});
  else
    unary_rows(stream, a.out, a.x, Clamp{a.lo, a.hi});
}

DING_GPU_END
