// kv_append on the GPU: a step's keys and values copied (and converted) into the KV cache at the
// positions `start` holds on the device. It runs right before attention_decode in a decode step,
// so it is a chained launch (vendor.h): it may start while the previous kernel finishes and lets
// attention_decode start its prologue while it runs.
#include <algorithm>

#include "attention.cuh"
#include "check.h"
#include "kernels.h"

DING_GPU_BEGIN
namespace {

using namespace attn;

// Elements [i, i + 4) of a row, converted: one 16-byte (f32) or 8-byte (f16/bf16) access each way.
template <class Cache, class In>
__device__ inline void copy4(Cache* dst, const In* src) {
  const Pack<In, 4> x = *reinterpret_cast<const Pack<In, 4>*>(src);
  Pack<Cache, 4> y;
#pragma unroll
  for (int c = 0; c < 4; ++c) y.v[c] = from_float<Cache>(to_float(x.v[c]));
  store_pack(dst, y);
}

// One block per (b, t): all Hkv·D elements of that position, for k and v, at slot pos mod S in a
// rolling cache. A start that does not fit leaves the cache untouched (the host backends raise an
// Error instead; see ops/attention.h).
// `vec4`: D is a multiple of 4 and every row start of the four tensors is 4-element aligned, so
// quads never straddle a head and move as single accesses.
template <class Cache, class In>
__global__ void kv_append_kernel(Cache* k_cache, Strides3 kc, Cache* v_cache, Strides3 vc, const In* k, Strides3 ks,
                                 const In* v, Strides3 vs, const int32_t* start, int start_offset, int64_t T, int64_t S,
                                 bool rolling, int64_t Hkv, int64_t D, bool vec4) {
  const int64_t b = blockIdx.x / T, t = blockIdx.x % T;
  wait_for_prior_kernels();  // start, k and v come from earlier kernels; the cache is read by them
  release_dependents();
  const int64_t first = int64_t(start[b]) + start_offset;
  if (first < 0 || (!rolling && first + T > S)) return;
  const int64_t pos = (first + t) % S;
  if (vec4) {
    for (int64_t i = 4 * int64_t(threadIdx.x); i < Hkv * D; i += 4 * int64_t(blockDim.x)) {
      const int64_t h = i / D, d = i % D;
      copy4(k_cache + kc.at(b, pos, h) + d, k + ks.at(b, t, h) + d);
      copy4(v_cache + vc.at(b, pos, h) + d, v + vs.at(b, t, h) + d);
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < Hkv * D; i += blockDim.x) {
    const int64_t h = i / D, d = i % D;
    k_cache[kc.at(b, pos, h) + d] = from_float<Cache>(to_float(k[ks.at(b, t, h) + d]));
    v_cache[vc.at(b, pos, h) + d] = from_float<Cache>(to_float(v[vs.at(b, t, h) + d]));
  }
}

}  // namespace

void kv_append(Stream& stream, const ops::KvAppendArgs& a) { launch_kv_append(gpu_stream(stream), a, 0); }

void launch_kv_append(GpuStream& s, const ops::KvAppendArgs& a, int start_offset) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  if (B * T * Hkv * D == 0) return;
  const bool vec4 = D % 4 == 0 && rows_aligned(a.k_cache, 4) && rows_aligned(a.v_cache, 4) && rows_aligned(a.k, 4) &&
                    rows_aligned(a.v, 4);
  const int64_t per_thread = vec4 ? 4 : 1;
  const int threads = int(std::min<int64_t>(256, ceil_div(ceil_div(Hkv * D, per_thread), 32) * 32));
  with_float_type(a.k_cache.dtype, [&](auto cache_tag) {
    with_float_type(a.k.dtype, [&](auto in_tag) {
      using Cache = decltype(cache_tag);
      using In = decltype(in_tag);
      DING_GPU_CHECK(launch_chained(s.props().has_chained_launch(), kv_append_kernel<Cache, In>, dim3(unsigned(B * T)),
                                    dim3(unsigned(threads)), 0, s.handle(), static_cast<Cache*>(a.k_cache.data),
                                    strides3(a.k_cache), static_cast<Cache*>(a.v_cache.data), strides3(a.v_cache),
                                    static_cast<const In*>(a.k.data), strides3(a.k), static_cast<const In*>(a.v.data),
                                    strides3(a.v), static_cast<const int32_t*>(a.start.data), start_offset, T, S, a.rolling, Hkv, D,
                                    vec4));
    });
  });
}

DING_GPU_END
