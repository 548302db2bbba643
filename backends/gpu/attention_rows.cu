// The generic attention kernel: one query row per block, any head dim, any mix of k and v
// dtypes. Prefill takes it for head dims above 256, decode for those and for k and v caches of
// different dtypes (attention.cuh has the shared contract).
#include <string>

#include "attention.cuh"
#include "check.h"
#include "reduce.cuh"

DING_GPU_BEGIN
namespace attn {
namespace {

// Any head dim: the scaled q and the f32 accumulator live in shared memory (2·D floats). Each
// step, every warp scores one key (lanes stride over D), then every thread folds the step's
// keys into the columns it owns (d ≡ threadIdx.x mod 256), so acc needs no barrier of its own.
// Slow, and only used where the tiled kernels do not apply.
constexpr int kRowThreads = 256;

template <class K, class V>
__global__ void __launch_bounds__(kRowThreads)
    attention_row_kernel(Operand out, Operand q, const K* k, Strides3 ks, const V* v, Strides3 vs, RowShape sh,
                         float scale) {
  constexpr int kWarps = kRowThreads / warp_size();
  extern __shared__ float4 shared4[];
  float* qs = reinterpret_cast<float*>(shared4);  // [D]
  float* acc = qs + sh.D;                          // [D]
  __shared__ float score[kWarps];

  const int64_t h = blockIdx.x % sh.H, i = (blockIdx.x / sh.H) % sh.Tq, b = blockIdx.x / (sh.H * sh.Tq);
  const int64_t kv_head = h / sh.group;
  const int D = sh.D, lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  // Keys [first, keys): a query at position keys − 1 (decode, causal prefill), cut to the window.
  int64_t keys = sh.Tk;
  if (sh.seq_lens) keys = sh.rolling ? max(int64_t(sh.seq_lens[b]), int64_t(1)) : min(max(int64_t(sh.seq_lens[b]), int64_t(1)), sh.Tk);
  else if (sh.causal) keys = min(sh.Tk, i + sh.Tk - sh.Tq + 1);
  const int64_t first = sh.window > 0 ? max(int64_t(0), keys - sh.window) : int64_t(0);
  const KeySlots slot(sh.S, first);

  with_element_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* row = static_cast<const T*>(q.data) + q.at.at(b, i, h);
    for (int d = threadIdx.x; d < D; d += kRowThreads) {
      qs[d] = scale * to_float(row[d]);
      acc[d] = 0.0f;
    }
  });
  __syncthreads();

  const K* k_head = k + b * ks.b + kv_head * ks.h;
  const V* v_head = v + b * vs.b + kv_head * vs.h;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int64_t j0 = first; j0 < keys; j0 += kWarps) {
    const int64_t j = j0 + warp;
    float dot = 0.0f;
    if (j < keys) {
      const K* k_row = k_head + slot(j) * ks.t;
      for (int d = lane; d < D; d += warp_size()) dot = fmaf(qs[d], to_float(k_row[d]), dot);
    }
    dot = warp_sum(dot);
    if (lane == 0) score[warp] = j < keys ? dot : -INFINITY;
    __syncthreads();
    // Every thread computes the same weights from the same scores.
    float p[kWarps], step_max = m_run;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) step_max = fmaxf(step_max, score[w]);
    const float alpha = exp_from(m_run, step_max);
    float step_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      p[w] = exp_from(score[w], step_max);
      step_sum += p[w];
    }
    l_run = l_run * alpha + step_sum;
    m_run = step_max;
    for (int d = threadIdx.x; d < D; d += kRowThreads) {
      float a = acc[d] * alpha;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        if (j0 + w < keys) a = fmaf(p[w], to_float(v_head[slot(j0 + w) * vs.t + d]), a);
      acc[d] = a;
    }
    __syncthreads();  // score[] is rewritten by the next step
  }

  const float inv_l = 1.0f / l_run;
  with_element_type(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* row = static_cast<T*>(out.data) + out.at.at(b, i, h);
    for (int d = threadIdx.x; d < D; d += kRowThreads) row[d] = from_float<T>(acc[d] * inv_l);
  });
}

}  // namespace

void launch_rows(GpuStream& s, Operand out, Operand q, const Tensor& k, Strides3 ks, const Tensor& v, Strides3 vs,
                 const RowShape& sh, float scale) {
  const size_t shared = 2 * sizeof(float) * size_t(sh.D);
  if (shared > s.props().shared_per_block_optin)
    throw Error(ErrorCode::not_implemented,
                "attention on the GPU: head dim D = " + std::to_string(sh.D) + " needs " + std::to_string(shared) +
                    " bytes of shared memory per block; this device allows " +
                    std::to_string(s.props().shared_per_block_optin));
  const int64_t blocks = sh.B * sh.Tq * sh.H;
  with_float_type(k.dtype, [&](auto k_tag) {
    with_float_type(v.dtype, [&](auto v_tag) {
      using K = decltype(k_tag);
      using V = decltype(v_tag);
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(&attention_row_kernel<K, V>), int(shared)));
      attention_row_kernel<K, V><<<unsigned(blocks), kRowThreads, shared, s.handle()>>>(
          out, q, static_cast<const K*>(k.data), ks, static_cast<const V*>(v.data), vs, sh, scale);
    });
  });
  DING_GPU_CHECK_LAUNCH("attention_row_kernel");
}

}  // namespace attn
DING_GPU_END
