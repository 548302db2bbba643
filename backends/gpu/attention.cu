// Attention on the GPU: the KV-cache append; fused causal prefill (FlashAttention) and split-
// sequence decode (flash-decoding) follow.
#include "check.h"
#include "elements.cuh"
#include "kernels.h"
#include "stream.h"

namespace ding::gpu {
namespace {

// Strides (elements) of a [B, S|T, Hkv, D] tensor whose last dim is contiguous.
struct Strides3 {
  int64_t b, t, h;
  __device__ int64_t at(int64_t bi, int64_t ti, int64_t hi) const { return bi * b + ti * t + hi * h; }
};

Strides3 strides3(const Tensor& x) { return {x.strides[0], x.strides[1], x.strides[2]}; }

// One block per (b, t): all Hkv·D elements of that position, for k and v. A start that does not
// fit leaves the cache untouched (the host backends raise an Error instead; see ops/attention.h).
template <class Cache, class In>
__global__ void kv_append_kernel(Cache* k_cache, Strides3 kc, Cache* v_cache, Strides3 vc, const In* k, Strides3 ks,
                                 const In* v, Strides3 vs, const int32_t* start, int64_t T, int64_t S, int64_t Hkv,
                                 int64_t D) {
  const int64_t b = blockIdx.x / T, t = blockIdx.x % T;
  const int64_t first = start[b];
  if (first < 0 || first + T > S) return;
  const int64_t pos = first + t;
  for (int64_t i = threadIdx.x; i < Hkv * D; i += blockDim.x) {
    const int64_t h = i / D, d = i % D;
    k_cache[kc.at(b, pos, h) + d] = from_float<Cache>(to_float(k[ks.at(b, t, h) + d]));
    v_cache[vc.at(b, pos, h) + d] = from_float<Cache>(to_float(v[vs.at(b, t, h) + d]));
  }
}

}  // namespace

void kv_append(Stream& stream, const ops::KvAppendArgs& a) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  if (B * T * Hkv * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const int threads = int(std::min<int64_t>(256, ceil_div(Hkv * D, 32) * 32));
  with_float_type(a.k_cache.dtype, [&](auto cache_tag) {
    with_float_type(a.k.dtype, [&](auto in_tag) {
      using Cache = decltype(cache_tag);
      using In = decltype(in_tag);
      kv_append_kernel<Cache, In><<<unsigned(B * T), threads, 0, s.handle()>>>(
          static_cast<Cache*>(a.k_cache.data), strides3(a.k_cache), static_cast<Cache*>(a.v_cache.data),
          strides3(a.v_cache), static_cast<const In*>(a.k.data), strides3(a.k), static_cast<const In*>(a.v.data),
          strides3(a.v),
          static_cast<const int32_t*>(a.start.data), T, S, Hkv, D);
    });
  });
  DING_GPU_CHECK_LAUNCH("kv_append_kernel");
}

}  // namespace ding::gpu
