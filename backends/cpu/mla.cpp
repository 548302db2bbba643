// CPU multi-head latent attention, prefill and decode alike in the absorbed form (ops/mla.h): each
// query is moved into latent space once, q_lat = (W_uk)ᵀ q_nope, and attends over the cache as
// stored: multi-query attention whose keys are the cached rows [c ; k^R] (L + Dr) and whose values
// are their latents c (L), every head reading the one cache, on the shared online-softmax core
// (attention_core.h). No per-head key or value is ever formed; W_uv is applied to each attended
// latent. A task takes every head of a query (prefill) or of a split of the keys (decode), so a
// cache row comes from memory once for all heads.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "attention_core.h"
#include "ding/error.h"
#include "ding/ops/mla.h"
#include "kernels.h"
#include "scratch.h"
#include "simd.h"
#include "strided.h"
#include "vec_math.h"

namespace ding::cpu {
namespace {

// The absorbed form's projections of one call, W_kv read as stored (widened in registers).
template <class W>
struct Absorbed {
  const ops::MlaDims& d;
  const W* w;  // [H, Dn + Dv, L]: head h's W_uk rows, then its W_uv rows
  float scale;

  // q_cat[0, L + Dr) = scale · (W_ukᵀ q_nope ; q_rope) for head h's query at byte address q_row.
  void latent_query(int64_t h, const void* q_row, DType q_dtype, float* q_cat) const {
    const int64_t L = d.latent;
    float* q = thread_scratch(ScratchSlot::second, size_t(d.nope + d.rope));
    load_row(q, q_row, q_dtype, d.nope + d.rope);
    std::fill(q_cat, q_cat + L, 0.0f);
    const W* w_uk = w + h * (d.nope + d.value) * L;
    for (int64_t r = 0; r < d.nope; ++r) axpy(q_cat, q[r], w_uk + r * L, L);
    std::copy_n(q + d.nope, d.rope, q_cat + L);
    scale_in_place(q_cat, scale, L + d.rope);
  }

  // The row at byte address out_row = W_uv · latent for head h.
  void output(int64_t h, const float* latent, void* out_row, DType out_dtype) const {
    const int64_t L = d.latent;
    const W* w_uv = w + (h * (d.nope + d.value) + d.nope) * L;
    float* o = thread_scratch(ScratchSlot::second, size_t(d.value));
    for (int64_t e = 0; e < d.value; ++e) o[e] = dot(latent, w_uv + e * L, L);
    store_row(out_row, out_dtype, o, d.value);
  }
};

// The cache as keys (whole rows) and values (their first L elements) of one kv head.
KvLayout cache_layout(const Tensor& cache) {
  return {cache.dim(1), cache.strides[0], cache.strides[1], 0, cache.strides[0], cache.strides[1], 0};
}

// Calls f(absorbed, cache) with W_kv's and the cache's data as typed pointers.
template <class F>
void with_types(const ops::MlaDims& d, float scale, const Tensor& w_kv, const Tensor& cache, F&& f) {
  with_float_type(w_kv.dtype, static_cast<const void*>(w_kv.data), [&](const auto* w) {
    const Absorbed<std::remove_cv_t<std::remove_pointer_t<decltype(w)>>> absorbed{d, w, scale};
    with_float_type(cache.dtype, static_cast<const void*>(cache.data), [&](const auto* c) { f(absorbed, c); });
  });
}

}  // namespace

void mla_prefill(Stream&, const ops::MlaPrefillArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), Tk = a.cache.dim(1), L = d.latent;
  with_types(d, ops::mla_scale(a.params, d), a.w_kv, a.cache, [&](const auto& absorbed, const auto* c) {
    // Each (query, head) is loaded once, by its task: its latent query is formed there.
    prefill_attention(
        c, c, cache_layout(a.cache), B, Tq, Tk, d.heads, 1, L + d.rope, L, /*causal=*/true, /*window=*/0,
        [&](int64_t b, int64_t i, int64_t h, float* q) {
          absorbed.latent_query(h, row_bytes(a.q, (b * Tq + i) * d.heads + h), a.q.dtype, q);
        },
        [&](int64_t b, int64_t i, int64_t h, const float* latent) {
          absorbed.output(h, latent, row_bytes_out(a.out, (b * Tq + i) * d.heads + h), a.out.dtype);
        });
  });
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
  with_types(d, ops::mla_scale(a.params, d), a.w_kv, a.cache, [&](const auto& absorbed, const auto* c) {
    // Every head's latent query, [B, H, L + Dr], formed once here: each split's task reads it.
    thread_local std::vector<float> query_rows;  // this thread's; the parallel loops reach it by pointer
    query_rows.resize(size_t(B * H * E));
    float* const queries = query_rows.data();
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh)
      absorbed.latent_query(bh % H, row_bytes(a.q, bh), a.q.dtype, queries + bh * E);
    decode_attention(
        c, c, cache_layout(a.cache), B, H, 1, E, L, lens, 0,
        [&](int64_t b, int64_t h, float* q) { std::copy_n(queries + (b * H + h) * E, E, q); },
        [&](int64_t b, int64_t h, const float* latent) { absorbed.output(h, latent, row_bytes_out(a.out, b * H + h), a.out.dtype); });
  });
}

}  // namespace ding::cpu
