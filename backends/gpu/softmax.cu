// softmax over the last dimension on the GPU. Each row of Tk logits belongs to one row group (a
// warp for Tk ≤ 8·warp size, else a block of up to 1024 threads; see row_group.cuh):
//  - Tk ≤ 8·threads: the row is read once into registers; max, Σ exp and the output come from
//    there.
//  - longer rows (Tk > 8192, e.g. a vocabulary): one streaming pass keeps a running max and a
//    sum rescaled whenever the max grows (online softmax), a second pass re-reads the row and
//    writes it.
// Exponents are s·(x − m) with m the max of the raw logits (s > 0): x − m is exact when x is
// near m, and where it is rounded its relative error ε costs e^(s(x−m))·|s(x−m)|·ε ≤ ε/e of
// the largest term; no product feeds an add, so FMA contraction cannot change the rounding.
// Masked (causal) columns and −inf logits contribute 0. out may be x itself: each element is
// read and written by one thread only, the read first.
#include <cmath>

#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "row_group.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {

// Row r keeps columns [0, kept(r)): all of them, or with the causal mask of ops/softmax.h
// (rows are [..., Tq, Tk]; query i = r mod Tq keeps j ≤ i + Tk − Tq).
struct SoftmaxShape {
  int64_t rows, Tk, Tq;
  bool causal;
  float scale;
  __device__ int64_t kept(int64_t r) const { return causal ? r % Tq + (Tk - Tq) + 1 : Tk; }
};

// out, x: [rows, Tk], contiguous.
template <int V, class X, class O>
__global__ void __launch_bounds__(kRowMaxThreads) softmax_kernel(O out, X x, SoftmaxShape shape) {
  __shared__ float shared[32];
  const int64_t tid = threadIdx.x, threads = blockDim.x, Tk = shape.Tk;
  const float scale = shape.scale;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; r < shape.rows;
       r += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r * Tk, kept = shape.kept(r);
    if (Tk <= kRowCached * threads) {
      // Vector k of this thread starts at column (k·threads + tid)·V; Tk is a multiple of V, so
      // a vector that starts inside the row ends inside it.
      float v[kRowCached];
      float m = -INFINITY;
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        const int64_t c = (k * threads + tid) * V;
        if (c < kept) {
          x.template load<V>(row + c, v + k * V);
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (c + j < kept) m = fmaxf(m, v[k * V + j]);
        }
      }
      const float row_max = row_group_max(m, shared);
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        const int64_t c = (k * threads + tid) * V;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float& e = v[k * V + j];
          e = c + j < kept ? expf(scale * (e - row_max)) : 0.0f;
          sum += e;
        }
      }
      const float inv_sum = 1.0f / row_group_sum(sum, shared);
#pragma unroll
      for (int k = 0; k < kRowCached / V; ++k) {
        const int64_t c = (k * threads + tid) * V;
        if (c < Tk) {
#pragma unroll
          for (int j = 0; j < V; ++j) v[k * V + j] *= inv_sum;
          out.template store<V>(row + c, v + k * V);
        }
      }
    } else {
      // Pass 1: this thread's running max m of its kept logits and sum = Σ e^(s(x − m)).
      float m = -INFINITY, sum = 0.0f;
      for (int64_t c = tid * V; c < kept; c += threads * V) {
        float v[V];
        x.template load<V>(row + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (c + j >= kept || v[j] == -INFINITY) continue;  // e^−∞ = 0; skipping avoids −∞ − (−∞)
          if (v[j] > m) {
            sum *= expf(scale * (m - v[j]));  // 0 while m = −∞ (sum is 0 then too)
            m = v[j];
          }
          sum += expf(scale * (v[j] - m));
        }
      }
      const float row_max = row_group_max(m, shared);
      // Rescale every thread's sum to the row's max (a thread with no finite logit adds 0).
      const float own = m == -INFINITY ? 0.0f : sum * expf(scale * (m - row_max));
      const float inv_sum = 1.0f / row_group_sum(own, shared);
      // Pass 2: the same columns for this thread as in pass 1.
      for (int64_t c = tid * V; c < Tk; c += threads * V) {
        float v[V];
        if (c < kept) x.template load<V>(row + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = c + j < kept ? expf(scale * (v[j] - row_max)) * inv_sum : 0.0f;
        out.template store<V>(row + c, v);
      }
    }
  }
}

template <int V, class X, class O>
void launch_softmax(GpuStream& s, O out, X x, const SoftmaxShape& shape) {
  const dim3 block = row_group_block(shape.Tk, s.props().warp_size);
  const unsigned grid = unsigned(std::min<int64_t>(ceil_div(shape.rows, block.y), int64_t(s.props().sm_count) * 32));
  softmax_kernel<V><<<grid, block, 0, s.handle()>>>(out, x, shape);
  DING_GPU_CHECK_LAUNCH("softmax_kernel");
}

}  // namespace

void softmax(Stream& stream, const ops::SoftmaxArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const int64_t Tk = a.x.dim(-1);
  const SoftmaxShape shape{a.x.numel() / Tk, Tk, a.params.causal ? a.x.dim(-2) : 1, a.params.causal, a.params.scale};
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.x.dtype, [&](auto x_tag) {
      using O = decltype(out_tag);
      using X = decltype(x_tag);
      // 16-byte accesses on the wider side; rows start at multiples of Tk, so Tk % V == 0 and
      // aligned bases keep every vector aligned.
      constexpr int V = 16 / int(sizeof(O) > sizeof(X) ? sizeof(O) : sizeof(X));
      if (Tk % V == 0 && aligned_for(a.out, V) && aligned_for(a.x, V))
        launch_softmax<V>(s, typed<O>(a.out), typed<X>(a.x), shape);
      else
        launch_softmax<1>(s, typed<O>(a.out), typed<X>(a.x), shape);
    });
  });
}

DING_GPU_END
