// Reference attention: o = softmax(s · q·kᵀ) · v for one query row at a time, in double.
// Formula: Vaswani et al. 2017, "Attention Is All You Need", eq. 1 (scaled dot-product attention);
// grouped kv heads: Ainslie et al. 2023, "GQA" (HF transformers: eager_attention_forward with repeat_kv);
// sliding window: Jiang et al. 2023, "Mistral 7B" §2 (HF masking_utils:
// sliding_window_causal_mask_function, kv_idx > q_idx − window and kv_idx ≤ q_idx).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ding/error.h"
#include "ding/ops/attention.h"
#include "reference.h"

namespace ding::reference {
namespace {

// The keys [first, end) that a query at position p sees among keys 0 … p.
struct KeyRange {
  int64_t first, end;
};
KeyRange visible(int64_t p, int64_t window) { return {window > 0 ? std::max<int64_t>(0, p - window + 1) : 0, p + 1}; }

// One output row: out[out_at + d] = Σ_j softmax_j(scale · q·k_j) · v_j[d] over keys j ∈ [first, end)
// of kv head `kv_head` in batch entry b. k and v are [B, S, Hkv, D]; key j is at slot j mod S
// (a rolling cache; slot j itself for j < S).
void attend_row(const Tensor& out, int64_t out_at, const Tensor& q, int64_t q_at, const Tensor& k, const Tensor& v,
                int64_t b, int64_t kv_head, KeyRange keys, double scale) {
  const int64_t D = k.dim(3), S = k.dim(1);
  std::vector<double> q_row(size_t(D), 0.0), o(size_t(D), 0.0);
  for (int64_t d = 0; d < D; ++d) q_row[size_t(d)] = load(q, q_at + d * q.strides[q.rank - 1]);
  std::vector<double> score(size_t(keys.end - keys.first), 0.0);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = keys.first; j < keys.end; ++j) {
    const int64_t k_at = offset(k, {b, j % S, kv_head, 0});
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += q_row[size_t(d)] * load(k, k_at + d * k.strides[3]);
    score[size_t(j - keys.first)] = scale * s;
    max_score = std::max(max_score, score[size_t(j - keys.first)]);
  }
  // softmax is shift-invariant; subtracting the max keeps exp from overflowing.
  double denominator = 0;
  for (double& s : score) {
    s = std::exp(s - max_score);
    denominator += s;
  }
  // Each o[d] sums its keys in order j = first, …, end − 1.
  for (int64_t j = keys.first; j < keys.end; ++j) {
    const int64_t v_at = offset(v, {b, j % S, kv_head, 0});
    for (int64_t d = 0; d < D; ++d) o[size_t(d)] += score[size_t(j - keys.first)] * load(v, v_at + d * v.strides[3]);
  }
  for (int64_t d = 0; d < D; ++d) store(out, out_at + d * out.strides[out.rank - 1], o[size_t(d)] / denominator);
}

}  // namespace

void attention_prefill(Stream&, const ops::AttentionPrefillArgs& a) {
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), H = a.q.dim(2), Tk = ops::key_positions(a), Hkv = a.k.dim(2);
  const int64_t group = H / Hkv;
  const double scale = ops::attention_scale(a.params, a.q.dim(3));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        // The queries are the last Tq of Tk positions: query i sits at position i + Tk - Tq.
        const KeyRange keys = a.params.causal ? visible(i + (Tk - Tq), a.params.window) : KeyRange{0, Tk};
        attend_row(a.out, offset(a.out, {b, i, h, 0}), a.q, offset(a.q, {b, i, h, 0}), a.k, a.v, b, h / group, keys,
                   scale);
      }
}

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  if (a.qk_norm || a.rope) {  // copies in q's and k_new's dtypes, as ops::rms_norm and ops::rope would leave them
    std::vector<double> q(size_t(a.q.numel())), k(size_t(a.k_new.numel()));  // 8-byte aligned, any dtype fits
    const Tensor q_out = Tensor::view(q.data(), a.q.device, a.q.dtype, {a.q.dim(0), a.q.dim(1), a.q.dim(2)});
    const Tensor k_out =
        Tensor::view(k.data(), a.q.device, a.k_new.dtype, {a.k_new.dim(0), a.k_new.dim(1), a.k_new.dim(2)});
    reference::attention_decode(stream, ops::transformed_first(stream, a, q_out, k_out));
    return;
  }
  const int64_t B = a.q.dim(0), H = a.q.dim(1), S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2);
  const int64_t group = H / Hkv;
  const double scale = ops::attention_scale(a.params, a.q.dim(2));
  // Every length is checked before anything is written. A rolling cache holds any length's window.
  const int64_t max_len = ops::rolling_cache(a.params, S) ? std::numeric_limits<int32_t>::max() : S;
  std::vector<int64_t> seq_len(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    seq_len[size_t(b)] = int64_t(load(a.seq_lens, b * a.seq_lens.strides[0]));
    if (seq_len[size_t(b)] < 1 || seq_len[size_t(b)] > max_len)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("attention_decode: seq_lens[{}] = {} is outside [1, {}] (k_cache {})", b,
                              seq_len[size_t(b)], max_len, a.k_cache.shape_str()));
  }
  if (a.k_new.defined()) {
    std::vector<int32_t> start(seq_len.begin(), seq_len.end());
    for (int32_t& s : start) --s;
    kv_append(stream, ops::decode_append(a, Tensor::view(start.data(), a.seq_lens.device, DType::i32, {B})));
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      attend_row(a.out, offset(a.out, {b, h, 0}), a.q, offset(a.q, {b, h, 0}), a.k_cache, a.v_cache, b, h / group,
                 visible(seq_len[size_t(b)] - 1, a.params.window), scale);
}

void kv_append(Stream&, const ops::KvAppendArgs& a) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = int64_t(load(a.start, b * a.start.strides[0]));
    if (start < 0 || (!a.rolling && start + T > S))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("kv_append: start[{}] = {} with T = {} new positions does not fit S = {} (k_cache {})", b,
                              start, T, S, a.k_cache.shape_str()));
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = int64_t(load(a.start, b * a.start.strides[0]));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          store(a.k_cache, offset(a.k_cache, {b, (start + t) % S, h, d}), load(a.k, offset(a.k, {b, t, h, d})));
          store(a.v_cache, offset(a.v_cache, {b, (start + t) % S, h, d}), load(a.v, offset(a.v, {b, t, h, d})));
        }
  }
}

}  // namespace ding::reference
