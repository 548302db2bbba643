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

constexpr int64_t kPrefillRows = 16;    // query rows per prefill task (group heads × positions)

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
  const int64_t Tk = ops::key_positions(a), S = a.k.dim(1), Hkv = a.k.dim(2), group = H / Hkv;
  const float scale = ops::attention_scale(a.params, D);
  const int64_t window = a.params.window;  // validated: > 0 only with causal
  // A task: the `group` heads of one kv head × `positions` consecutive queries.
  const int64_t positions = std::max<int64_t>(1, kPrefillRows / group);
  const int64_t position_blocks = (Tq + positions - 1) / positions;
  const int64_t tasks = B * position_blocks * Hkv;
  with_kv_types(a.k, a.v, [&](auto* k_data, auto* v_data) {
    // Round-robin (static, 1): causal tasks grow with the position block, so interleave them.
#pragma omp parallel for schedule(static, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t hk = t % Hkv, block = (t / Hkv) % position_blocks, b = t / (Hkv * position_blocks);
      const int64_t i0 = block * positions, i1 = std::min(Tq, i0 + positions);
      thread_local Scratch scratch;
      RowBlock rows = row_block(scratch, (i1 - i0) * group, D, D, true);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (i - i0) * group + g;
          load_query(rows, r, element(a.q, {b, i, hk * group + g, 0}), a.q.dtype, scale);
          // Query i sits at position i + Tk - Tq of the keys.
          rows.first[r] = window > 0 ? std::max<int64_t>(0, i + (Tk - Tq) - window + 1) : 0;
          rows.keys[r] = a.params.causal ? i + (Tk - Tq) + 1 : Tk;
          rows.k_at[r] = rows.v_at[r] = 0;
        }
      reset_state(rows);
      // Keys from the first that the task's first row sees to the last that its last row sees.
      const int64_t kv_begin = rows.first[0], kv_end = a.params.causal ? i1 + (Tk - Tq) : Tk;
      attend_keys(rows, k_data + b * a.k.strides[0] + hk * a.k.strides[2], a.k.strides[1],
                  v_data + b * a.v.strides[0] + hk * a.v.strides[2], a.v.strides[1], S, kv_begin, kv_end);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = (i - i0) * group + g;
          float* o = rows.acc + r * D;
          scale_in_place(o, 1.0f / rows.l[r], D);
          store_row(const_cast<char*>(element(a.out, {b, i, hk * group + g, 0})), a.out.dtype, o, D);
        }
    }
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

  const DecodeCache cache{S,
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
