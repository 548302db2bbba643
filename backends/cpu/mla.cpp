// CPU multi-head latent attention, prefill and decode alike in the absorbed form (ops/mla.h): each
// query is moved into latent space once, q_lat = (W_uk)ᵀ q_nope, and then every key costs one dot
// over its L + Dr cached elements and one axpy of its latent into the running output (online
// softmax), so the cache is read as stored and no per-head key or value is ever formed; W_uv is
// applied to the attended latent at the end. Decode is multi-query attention over the cache
// (keys: the cache rows, values: their latents; every head reads the one cache) on the shared
// core (attention_core.h): a task takes every head over one split of the keys, so a cache row is
// read from memory once for all heads. Prefill runs a task per (query, head).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_core.h"
#include "ding/error.h"
#include "ding/ops/mla.h"
#include "kernels.h"
#include "scratch.h"
#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {
namespace {

// One query row of one head: out[e] = W_uv[e] · Σ_t p_t c_t / Σ_t p_t over keys t < keys of the
// cache rows (cache_row + t·cache_step, in the cache's dtype T).
template <class T>
void attend_latent(const ops::MlaDims& d, float scale, const float* q, const float* w_head, const T* cache_row,
                   int64_t cache_step, int64_t keys, float* q_lat, float* acc, float* out) {
  const int64_t L = d.latent;
  std::fill(q_lat, q_lat + L, 0.0f);
  for (int64_t r = 0; r < d.nope; ++r) axpy(q_lat, q[r], w_head + r * L, L);  // q_lat = W_ukᵀ q_nope
  const float* q_rope = q + d.nope;
  std::fill(acc, acc + L, 0.0f);
  float max_score = -std::numeric_limits<float>::infinity(), denominator = 0.0f;
  for (int64_t t = 0; t < keys; ++t) {
    const T* c = cache_row + t * cache_step;
    const float score = scale * (dot(q_lat, c, L) + dot(q_rope, c + L, d.rope));
    if (score > max_score) {  // rescale what was summed under the old maximum
      const float shrink = std::exp(max_score - score);
      for (int64_t l = 0; l < L; ++l) acc[l] *= shrink;
      denominator *= shrink;
      max_score = score;
    }
    const float p = std::exp(score - max_score);
    denominator += p;
    axpy(acc, p, c, L);
  }
  const float* w_uv = w_head + d.nope * L;
  for (int64_t e = 0; e < d.value; ++e) out[e] = dot(acc, w_uv + e * L, L) / denominator;
}

// Every (row, head) task: row r of `rows` reads query q_at(r), keys keys(r) of cache entry
// batch(r), and writes out_at(r). W is widened to f32 once per call (it is read by every task),
// a head per thread.
template <class Q, class K, class O, class B>
void latent_attention(const ops::MlaDims& d, float scale, const Tensor& q, const Tensor& cache, const Tensor& w_kv,
                      const Tensor& out, int64_t rows, Q q_at, K keys, O out_at, B batch) {
  const int64_t H = d.heads, L = d.latent, E = d.nope + d.rope;
  float* w = thread_scratch(ScratchSlot::first, size_t(w_kv.numel()));
  const int64_t head_elements = (d.nope + d.value) * L;
  const char* w_data = static_cast<const char*>(w_kv.data);
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h)
    load_row(w + h * head_elements, w_data + h * head_elements * int64_t(dtype_size(w_kv.dtype)), w_kv.dtype, head_elements);
  const int64_t tasks = rows * H;
  with_float_type(cache.dtype, cache.data, [&](const auto* cache_data) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t r = task / H, h = task % H;
      float* scratch = thread_scratch(ScratchSlot::second, size_t(E + 2 * L + d.value));
      float *q_row = scratch, *q_lat = scratch + E, *acc = q_lat + L, *o = acc + L;
      load_row(q_row, static_cast<const char*>(q.data) + q_at(r, h) * int64_t(dtype_size(q.dtype)), q.dtype, E);
      const auto* cache_row = cache_data + batch(r) * cache.strides[0];
      attend_latent(d, scale, q_row, w + h * (d.nope + d.value) * L, cache_row, cache.strides[1], keys(r), q_lat, acc, o);
      store_row(static_cast<char*>(out.data) + out_at(r, h) * int64_t(dtype_size(out.dtype)), out.dtype, o, d.value);
    }
  });
}

}  // namespace

void mla_prefill(Stream&, const ops::MlaPrefillArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t Tq = a.q.dim(1), Tk = a.cache.dim(1);
  latent_attention(
      d, ops::mla_scale(a.params, d), a.q, a.cache, a.w_kv, a.out, a.q.dim(0) * Tq,
      [&](int64_t r, int64_t h) { return (r / Tq) * a.q.strides[0] + (r % Tq) * a.q.strides[1] + h * a.q.strides[2]; },
      [&](int64_t r) { return r % Tq + (Tk - Tq) + 1; },  // causal: the queries are the last Tq positions
      [&](int64_t r, int64_t h) { return (r / Tq) * a.out.strides[0] + (r % Tq) * a.out.strides[1] + h * a.out.strides[2]; },
      [&](int64_t r) { return r / Tq; });
}

void mla_decode(Stream&, const ops::MlaDecodeArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), S = a.cache.dim(1);
  const auto* lens = static_cast<const int32_t*>(a.seq_lens.data);
  for (int64_t b = 0; b < B; ++b)  // every length is checked before anything is written
    if (lens[b] < 1 || lens[b] > S)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("mla_decode: seq_lens[{}] = {} is outside [1, {}] (cache {})", b, lens[b], S, a.cache.shape_str()));
  if (a.latent_new.defined()) {
    const int64_t n = a.cache.dim(2);
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t b = 0; b < B; ++b) {
      load_row(row.data(), static_cast<const char*>(a.latent_new.data) + b * a.latent_new.strides[0] * int64_t(dtype_size(a.latent_new.dtype)),
               a.latent_new.dtype, n);
      store_row(static_cast<char*>(a.cache.data) + (b * a.cache.strides[0] + (lens[b] - 1) * a.cache.strides[1]) * int64_t(dtype_size(a.cache.dtype)),
                a.cache.dtype, row.data(), n);
    }
  }
  const int64_t H = d.heads, L = d.latent, E = L + d.rope;
  const float scale = ops::mla_scale(a.params, d);
  // Every head's query in latent space, [B, H, L + Dr]: scale · (W_ukᵀ q_nope ; q_rope), formed
  // once here rather than by each split's task.
  thread_local std::vector<float> query_rows;  // this thread's; the parallel loops reach it by pointer
  query_rows.resize(size_t(B * H * E));
  float* const queries = query_rows.data();
  with_float_type(a.w_kv.dtype, static_cast<const void*>(a.w_kv.data), [&](const auto* w) {
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      float* q_row = thread_scratch(ScratchSlot::second, size_t(d.nope + d.rope));
      load_row(q_row, static_cast<const char*>(a.q.data) + (b * a.q.strides[0] + h * a.q.strides[1]) * int64_t(dtype_size(a.q.dtype)),
               a.q.dtype, d.nope + d.rope);
      float* q_cat = queries + bh * E;
      std::fill(q_cat, q_cat + L, 0.0f);
      const auto* w_uk = w + h * (d.nope + d.value) * L;
      for (int64_t r = 0; r < d.nope; ++r) axpy(q_cat, q_row[r], w_uk + r * L, L);
      std::copy_n(q_row + d.nope, d.rope, q_cat + L);
      scale_in_place(q_cat, scale, E);
    }
    const DecodeCache cache{S, a.cache.strides[0], a.cache.strides[1], 0, a.cache.strides[0], a.cache.strides[1], 0};
    with_float_type(a.cache.dtype, static_cast<const void*>(a.cache.data), [&](const auto* c) {
      decode_attention(
          c, c, cache, B, H, 1, E, L, lens, 0,
          [&](int64_t b, int64_t h, float* q) { std::copy_n(queries + (b * H + h) * E, E, q); },
          [&](int64_t b, int64_t h, const float* latent) {  // out = W_uv · the attended latent
            const auto* w_uv = w + (h * (d.nope + d.value) + d.nope) * L;
            float* o = thread_scratch(ScratchSlot::second, size_t(d.value));
            for (int64_t e = 0; e < d.value; ++e) o[e] = dot(latent, w_uv + e * L, L);
            store_row(static_cast<char*>(a.out.data) + (b * a.out.strides[0] + h * a.out.strides[1]) * int64_t(dtype_size(a.out.dtype)),
                      a.out.dtype, o, d.value);
          });
    });
  });
}

}  // namespace ding::cpu
