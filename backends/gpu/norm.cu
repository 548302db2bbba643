// layer_norm and rms_norm on the GPU. Each row of C elements belongs to one row group (a warp
// for C ≤ 8·warp size, else a block of up to 1024 threads; see row_group.cuh):
//  - C ≤ 8·threads: every thread keeps its ≤ 8 elements of h = x (+ residual) in registers, so
//    the row is read once; the mean, then Σ(h − mean)² (two passes: no cancellation of Σh² −
//    C·mean²), then the output come from the registers.
//  - longer rows (C > 8192), and mixes of dtypes: h is re-read from x and residual for every
//    pass.
// All statistics are f32. sum_out may be x or residual itself: every element of h is read and
// written by one thread only, and in the streaming form sum_out is written in the last pass,
// after the passes that read x and residual. Each row tensor has its own row layout
// (strided.cuh): views of fused products, such as the q part of a q/k/v product or its heads.
// rms_norm's gate (a row tensor too) is read where out is written: out = normalised · silu(gate).
#include <type_traits>

#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "row_group.cuh"
#include "stream.h"
#include "strided.cuh"

DING_GPU_BEGIN
namespace {

// X: access to the row tensors (x, residual, sum_out, out: [..., C], the last dim contiguous,
// rows where their layouts put them); W: to weight and bias ([weight_rows, C], contiguous; row r
// of x takes weight row r mod weight_rows, ops::weight_row).
template <class X, class W>
struct NormTensors {
  X out, x, residual, sum_out, gate;  // residual.p, sum_out.p, gate.p null when absent
  RowLayout out_rows, x_rows, residual_rows, sum_out_rows, gate_rows;
  W weight, bias;               // bias.p null when absent
  int64_t weight_rows;
};

// Where row r starts in each row tensor, and its weight row.
struct RowStarts {
  int64_t out, x, residual, sum_out, gate, weight;
};

template <class X, class W>
__device__ RowStarts row_starts(const NormTensors<X, W>& t, int64_t r, int64_t C) {
  return {row_offset(t.out_rows, r), row_offset(t.x_rows, r), row_offset(t.residual_rows, r),
          row_offset(t.sum_out_rows, r), row_offset(t.gate_rows, r), r % t.weight_rows * C};
}

// h[0..V) ← x (+ residual) at column c of the row.
template <int V, class X, class W>
__device__ void load_h(const NormTensors<X, W>& t, const RowStarts& row, int64_t c, float* h) {
  t.x.template load<V>(row.x + c, h);
  if (t.residual.p) {
    float r[V];
    t.residual.template load<V>(row.residual + c, r);
#pragma unroll
    for (int j = 0; j < V; ++j) h[j] += r[j];
  }
}

// sum_out ← h, out ← (h − mean)·rstd·weight + bias (· silu(gate)), for the V elements at column c
// of the row.
template <int V, class X, class W>
__device__ void store_normalized(const NormTensors<X, W>& t, const RowStarts& row, int64_t c, const float* h,
                                 float mean, float rstd) {
  if (t.sum_out.p) t.sum_out.template store<V>(row.sum_out + c, h);
  float w[V], b[V] = {};
  t.weight.template load<V>(row.weight + c, w);
  if (t.bias.p) t.bias.template load<V>(row.weight + c, b);
  float y[V];
#pragma unroll
  for (int j = 0; j < V; ++j) y[j] = (h[j] - mean) * rstd * w[j] + b[j];
  if (t.gate.p) {
    float g[V];
    t.gate.template load<V>(row.gate + c, g);
#pragma unroll
    for (int j = 0; j < V; ++j) y[j] = silu_times(g[j], y[j]);
  }
  t.out.template store<V>(row.out + c, y);
}

// center: layer_norm (subtract the mean, add bias); else rms_norm. The row loop is uniform
// across a block group (blockDim.y == 1), so the reductions' barriers are reached by all.
// The AnyFloat instance always streams: eight cached elements, each behind seven run-time dtype
// switches, do not fit the 64 registers a 1024-thread block allows.
template <int V, class X, class W>
__global__ void __launch_bounds__(kRowMaxThreads)
    norm_kernel(NormTensors<X, W> t, int64_t rows, int64_t C, float eps, bool center) {
  constexpr bool cache_rows = !std::is_same<X, AnyFloat>::value;
  __shared__ float shared[32];
  // Chained (vendor.h): rows, residuals and weights may come from the kernel before; the kernel
  // after (a decode step's GEMV) may start streaming its weights while this one runs.
  wait_for_prior_kernels();
  release_dependents();
  const int64_t tid = threadIdx.x, threads = blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; r < rows; r += int64_t(gridDim.x) * blockDim.y) {
    const RowStarts row = row_starts(t, r, C);
    if (cache_rows && C <= kRowCached * threads) {
      // Vector k of this thread starts at column (k·threads + tid)·V; C is a multiple of V, so
      // a vector that starts inside the row ends inside it.
      float h[kRowCached];
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        const int64_t c = (k * threads + tid) * V;
        if (c < C) {
          load_h<V>(t, row, c, h + k * V);
#pragma unroll
          for (int j = 0; j < V; ++j) sum += h[k * V + j];
        }
      }
      const float mean = center ? row_group_sum(sum, shared) / float(C) : 0.0f;
      float squares = 0.0f;
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        if ((k * threads + tid) * V < C) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float d = h[k * V + j] - mean;
            squares += d * d;
          }
        }
      }
      const float rstd = 1.0f / sqrtf(row_group_sum(squares, shared) / float(C) + eps);
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        const int64_t c = (k * threads + tid) * V;
        if (c < C) store_normalized<V>(t, row, c, h + k * V, mean, rstd);
      }
    } else {
      // Streaming: the same columns for this thread in every pass.
      float mean = 0.0f;
      if (center) {
        float sum = 0.0f;
        for (int64_t c = tid * V; c < C; c += threads * V) {
          float h[V];
          load_h<V>(t, row, c, h);
#pragma unroll
          for (int j = 0; j < V; ++j) sum += h[j];
        }
        mean = row_group_sum(sum, shared) / float(C);
      }
      float squares = 0.0f;
      for (int64_t c = tid * V; c < C; c += threads * V) {
        float h[V];
        load_h<V>(t, row, c, h);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = h[j] - mean;
          squares += d * d;
        }
      }
      const float rstd = 1.0f / sqrtf(row_group_sum(squares, shared) / float(C) + eps);
      for (int64_t c = tid * V; c < C; c += threads * V) {
        float h[V];
        load_h<V>(t, row, c, h);
        store_normalized<V>(t, row, c, h, mean, rstd);
      }
    }
  }
}

template <int V, class X, class W>
void launch_norm(GpuStream& s, const NormTensors<X, W>& t, int64_t rows, int64_t C, float eps, bool center) {
  const dim3 block = row_group_block(C, s.props().warp_size);
  const unsigned grid = unsigned(std::min<int64_t>(ceil_div(rows, block.y), int64_t(s.props().sm_count) * 32));
  DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), norm_kernel<V, X, W>, dim3(grid), block, 0, s.handle(), t,
                                rows, C, eps, center));
  DING_GPU_CHECK_LAUNCH("norm_kernel");
}

// The shared host half of layer_norm (center) and rms_norm. When the row tensors share one
// dtype and weight and bias another, the kernel is typed and moves 16 bytes of the row tensors
// per access where alignment allows; any other mix runs element by element through AnyFloat.
void norm(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias,
          const Tensor& residual, const Tensor& sum_out, const Tensor& gate, float eps, bool center) {
  const int64_t C = x.dim(-1), rows = x.numel() / C;
  GpuStream& s = gpu_stream(stream);
  const RowLayout out_rows = row_layout(out), x_rows = row_layout(x), residual_rows = row_layout(residual),
                  sum_out_rows = row_layout(sum_out), gate_rows = row_layout(gate);
  auto same = [](const Tensor& t, DType d) { return !t.defined() || t.dtype == d; };
  if (out.dtype == x.dtype && same(residual, x.dtype) && same(sum_out, x.dtype) && same(gate, x.dtype) &&
      same(bias, weight.dtype)) {
    with_float_type(x.dtype, [&](auto x_tag) {
      with_float_type(weight.dtype, [&](auto w_tag) {
        using XT = decltype(x_tag);
        using WT = decltype(w_tag);
        const NormTensors<Typed<XT>, Typed<WT>> t{
            typed<XT>(out),   typed<XT>(x),  typed<XT>(residual), typed<XT>(sum_out),  typed<XT>(gate),
            out_rows,         x_rows,        residual_rows,       sum_out_rows,        gate_rows,
            typed<WT>(weight), typed<WT>(bias), weight.numel() / C};
        // Vectors start at multiples of V within a row (C % V == 0); with aligned bases and rows
        // that start at multiples of V, every vector is aligned.
        constexpr int V = kPack16<XT>;
        bool vectors = C % V == 0;
        for (const Tensor* u : {&out, &x, &residual, &sum_out, &gate, &weight, &bias})
          vectors = vectors && aligned_for(*u, V) && rows_start_at_multiples(*u, V);
        if (vectors)
          launch_norm<V>(s, t, rows, C, eps, center);
        else
          launch_norm<1>(s, t, rows, C, eps, center);
      });
    });
    return;
  }
  const NormTensors<AnyFloat, AnyFloat> t{
      any_float(out),    any_float(x),    any_float(residual), any_float(sum_out), any_float(gate),
      out_rows,          x_rows,          residual_rows,       sum_out_rows,       gate_rows,
      any_float(weight), any_float(bias), weight.numel() / C};
  launch_norm<1>(s, t, rows, C, eps, center);
}

}  // namespace

void layer_norm(Stream& stream, const ops::LayerNormArgs& a) {
  const ops::LayerNormParams& p = a.params;
  norm(stream, a.out, a.x, a.weight, p.bias, p.residual, p.sum_out, Tensor{}, p.eps, /*center=*/true);
}

void rms_norm(Stream& stream, const ops::RmsNormArgs& a) {
  const ops::RmsNormParams& p = a.params;
  norm(stream, a.out, a.x, a.weight, Tensor{}, p.residual, p.sum_out, p.gate, p.eps, /*center=*/false);
}

DING_GPU_END
