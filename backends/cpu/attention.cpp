// CPU attention on the online-softmax core (attention_core.h). Prefill tasks gather the query rows
// that read one kv head (the group's heads × a run of positions), so a block of K/V rows is
// fetched from memory once and reused from cache by all of them; decode is the core's
// decode_attention (flash-decoding over fixed splits of the keys). A sliding window narrows each
// row's keys to the band [p − window + 1, p]: prefill tasks start at the first key their first row
// sees, and decode splits cover only the window's keys.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "attention_core.h"
#include "ding/error.h"
#include "ding/ops/attention.h"
#include "kernels.h"

namespace ding::cpu {
namespace {

const char* element(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t at = 0, d = 0;
  for (int64_t i : index) at += i * t.strides[d++];
  return static_cast<const char*>(t.data) + at * int64_t(dtype_size(t.dtype));
}

// Calls f(k, v) with the two tensors' data as typed pointers.
template <class F>
void with_kv_types(const Tensor& k, const Tensor& v, F&& f) {
  with_float_type(k.dtype, static_cast<const void*>(k.data), [&](auto* kp) {
    with_float_type(v.dtype, static_cast<const void*>(v.data), [&](auto* vp) { f(kp, vp); });
  });
}

}  // namespace

void attention_prefill(Stream&, const ops::AttentionPrefillArgs& a) {
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), H = a.q.dim(2), D = a.q.dim(3);
  const int64_t Tk = ops::key_positions(a), S = a.k.dim(1), Hkv = a.k.dim(2);
  const float scale = ops::attention_scale(a.params, D);
  const int64_t window = a.params.window;  // validated: > 0 only with causal
  const KvLayout layout{S, a.k.strides[0], a.k.strides[1], a.k.strides[2], a.v.strides[0], a.v.strides[1], a.v.strides[2]};
  with_kv_types(a.k, a.v, [&](auto* k_data, auto* v_data) {
    prefill_attention(
        k_data, v_data, layout, B, Tq, Tk, H, Hkv, D, D, a.params.causal, window,
        [&](int64_t b, int64_t i, int64_t h, float* q) {
          load_row(q, element(a.q, {b, i, h, 0}), a.q.dtype, D);
          scale_in_place(q, scale, D);
        },
        [&](int64_t b, int64_t i, int64_t h, const float* o) {
          store_row(const_cast<char*>(element(a.out, {b, i, h, 0})), a.out.dtype, o, D);
        });
  });
}

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  if (a.qk_norm || a.rope) {  // copies in q's and k_new's dtypes, as separate rms_norm and rope would leave them
    thread_local std::vector<char> q, k;
    q.resize(a.q.nbytes());
    k.resize(a.k_new.nbytes());
    const Tensor q_out = Tensor::view(q.data(), a.q.device, a.q.dtype, {a.q.dim(0), a.q.dim(1), a.q.dim(2)});
    const Tensor k_out =
        Tensor::view(k.data(), a.q.device, a.k_new.dtype, {a.k_new.dim(0), a.k_new.dim(1), a.k_new.dim(2)});
    cpu::attention_decode(stream, ops::transformed_first(stream, a, q_out, k_out));
    return;
  }
  const int64_t B = a.q.dim(0), H = a.q.dim(1), D = a.q.dim(2);
  const int64_t S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2);
  const float scale = ops::attention_scale(a.params, D);
  const int32_t* seq_lens = a.seq_lens.ptr<const int32_t>();
  // A rolling cache holds any length's window.
  const int64_t max_len = ops::rolling_cache(a.params, S) ? std::numeric_limits<int32_t>::max() : S;
  for (int64_t b = 0; b < B; ++b)
    if (seq_lens[b] < 1 || seq_lens[b] > max_len)
      throw Error(ErrorCode::invalid_argument, fmt::format("attention_decode: seq_lens[{}] = {} is outside [1, {}] (k_cache {})",
                                                           b, seq_lens[b], max_len, a.k_cache.shape_str()));
  if (a.k_new.defined()) {
    std::vector<int32_t> start(seq_lens, seq_lens + B);
    for (int32_t& s : start) --s;
    kv_append(stream, ops::decode_append(a, Tensor::view(start.data(), a.seq_lens.device, DType::i32, {B})));
  }

  const KvLayout cache{S,
                       a.k_cache.strides[0], a.k_cache.strides[1], a.k_cache.strides[2],
                       a.v_cache.strides[0], a.v_cache.strides[1], a.v_cache.strides[2]};
  with_kv_types(a.k_cache, a.v_cache, [&](auto* k_data, auto* v_data) {
    decode_attention(
        k_data, v_data, cache, B, H, Hkv, D, D, seq_lens, a.params.window,
        [&](int64_t b, int64_t h, float* q) {
          load_row(q, element(a.q, {b, h, 0}), a.q.dtype, D);
          scale_in_place(q, scale, D);
        },
        [&](int64_t b, int64_t h, const float* o) {
          store_row(const_cast<char*>(element(a.out, {b, h, 0})), a.out.dtype, o, D);
        });
  });
}

void kv_append(Stream&, const ops::KvAppendArgs& a) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t start = static_cast<const int32_t*>(a.start.data)[b * a.start.strides[0]];
    if (start < 0 || (!a.rolling && start + T > S))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("kv_append: start[{}] = {} with T = {} new positions does not fit S = {} (k_cache {})", b,
                              start, T, S, a.k_cache.shape_str()));
  }
  const size_t in_size = dtype_size(a.k.dtype), out_size = dtype_size(a.k_cache.dtype);
  // One row of D elements: a memcpy when the dtypes agree, else converted through f32 in
  // stack-sized pieces (no allocation: this runs every decode step).
  auto append_row = [&](const Tensor& cache, const Tensor& x, int64_t b, int64_t pos, int64_t t, int64_t h) {
    char* dst = static_cast<char*>(cache.data) +
                (b * cache.strides[0] + pos * cache.strides[1] + h * cache.strides[2]) * int64_t(out_size);
    const char* src = static_cast<const char*>(x.data) + (b * x.strides[0] + t * x.strides[1] + h * x.strides[2]) * int64_t(in_size);
    if (a.k.dtype == a.k_cache.dtype) {
      std::memcpy(dst, src, size_t(D) * in_size);
      return;
    }
    float piece[256];
    for (int64_t d = 0; d < D; d += 256) {
      const int64_t n = std::min<int64_t>(256, D - d);
      load_row(piece, src + d * int64_t(in_size), a.k.dtype, n);
      store_row(dst + d * int64_t(out_size), a.k_cache.dtype, piece, n);
    }
  };
#pragma omp parallel for collapse(2) schedule(static) if (B * T * Hkv * D >= (1 << 15))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = (static_cast<const int32_t*>(a.start.data)[b * a.start.strides[0]] + t) % S;
      for (int64_t h = 0; h < Hkv; ++h) {
        append_row(a.k_cache, a.k, b, pos, t, h);
        append_row(a.v_cache, a.v, b, pos, t, h);
      }
    }
}

}  // namespace ding::cpu
