#include "ding/ops/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

float attention_scale(const AttentionParams& p, int64_t head_dim) {
  return p.scale > 0 ? p.scale : float(1.0 / std::sqrt(double(head_dim)));
}

int64_t key_positions(const AttentionPrefillArgs& a) { return a.params.rolling_keys > 0 ? a.params.rolling_keys : a.k.dim(1); }

namespace {

// The head-grouping rule shared by prefill and decode: H query heads over Hkv kv heads.
void validate_heads(const Check& c, const Tensor& q, const Tensor& k, int head_axis) {
  const int64_t H = q.dim(-2), Hkv = k.dim(head_axis);
  if (H % Hkv != 0)
    c.fail(ErrorCode::shape_mismatch, fmt::format("{} query heads cannot be grouped over {} kv heads (q {}, k {})", H,
                                                  Hkv, shape_of(q), shape_of(k)));
}

void validate_scale(const Check& c, const AttentionParams& p) {
  if (!(p.scale >= 0) || !std::isfinite(p.scale))
    c.fail(ErrorCode::invalid_argument, fmt::format("scale must be ≥ 0 (0 = 1/√D), got {}", p.scale));
  if (p.window < 0) c.fail(ErrorCode::invalid_argument, fmt::format("window must be ≥ 0 (0 = none), got {}", p.window));
  if (p.rolling_keys < 0)
    c.fail(ErrorCode::invalid_argument, fmt::format("rolling_keys must be ≥ 0 (0 = not a rolling cache), got {}", p.rolling_keys));
}

// Keys scored by a query at position p over keys 0 … p: all p + 1, or the last `window` of them.
double visible_keys(double p, int64_t window) { return window > 0 ? std::min(p + 1, double(window)) : p + 1; }

}  // namespace

void validate(const Device& device, const AttentionPrefillArgs& a) {
  Check c("attention_prefill", device);
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}}) {
    c.tensor(name, *t, 4, 4);
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.same_shape("out", a.out, "q", a.q);
  c.same_shape("v", a.v, "k", a.k);
  c.dim("k", a.k, 0, a.q.dim(0), "B (from q)");
  c.dim("k", a.k, 3, a.q.dim(3), "D (from q)");
  validate_heads(c, a.q, a.k, 2);
  validate_scale(c, a.params);
  const int64_t Tq = a.q.dim(1), Tk = key_positions(a), S = a.k.dim(1);
  if (a.params.causal && Tk < Tq)
    c.fail(ErrorCode::shape_mismatch, fmt::format("causal needs Tk ≥ Tq, got Tq = {} (q {}), Tk = {} (k {}{})", Tq,
                                                  shape_of(a.q), Tk, shape_of(a.k),
                                                  a.params.rolling_keys > 0 ? ", rolling_keys" : ""));
  if (a.params.window > 0 && !a.params.causal)
    c.fail(ErrorCode::invalid_argument,
           fmt::format("window = {} needs causal = true (a sliding window is a band below the diagonal)", a.params.window));
  if (a.params.rolling_keys > 0 && !(a.params.window > 0 && a.params.window + Tq - 1 <= S))
    c.fail(ErrorCode::invalid_argument,
           fmt::format("rolling_keys = {} needs a window whose keys and the chunk's fit the cache: window {} + Tq {} − 1 > S = {} "
                       "(k {})", a.params.rolling_keys, a.params.window, Tq, S, shape_of(a.k)));
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k", &a.k}, {"v", &a.v}}) c.disjoint("out", a.out, name, *t);
}

void validate(const Device& device, const AttentionDecodeArgs& a) {
  Check c("attention_decode", device);
  c.tensor("q", a.q, 3, 3);
  c.tensor("out", a.out, 3, 3);
  c.tensor("k_cache", a.k_cache, 4, 4);
  c.tensor("v_cache", a.v_cache, 4, 4);
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"out", &a.out}}) {
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.same_shape("out", a.out, "q", a.q);
  c.same_shape("v_cache", a.v_cache, "k_cache", a.k_cache);
  c.dim("k_cache", a.k_cache, 0, a.q.dim(0), "B (from q)");
  c.dim("k_cache", a.k_cache, 3, a.q.dim(2), "D (from q)");
  validate_heads(c, a.q, a.k_cache, 2);
  c.tensor("seq_lens", a.seq_lens, 1, 1);
  c.dtype_in("seq_lens", a.seq_lens, {DType::i32});
  c.contiguous("seq_lens", a.seq_lens);
  c.dim("seq_lens", a.seq_lens, 0, a.q.dim(0), "B (from q)");
  validate_scale(c, a.params);
  for (auto [name, t] : {std::pair{"q", &a.q}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"seq_lens", &a.seq_lens}})
    c.disjoint("out", a.out, name, *t);
  if (a.k_new.defined() || a.v_new.defined()) {
    for (auto [name, t] : {std::pair{"k_new", &a.k_new}, {"v_new", &a.v_new}}) {
      c.tensor(name, *t, 3, 3);
      c.float_dtype(name, *t);
      c.last_dim_contiguous(name, *t);
      c.dim(name, *t, 0, a.q.dim(0), "B (from q)");
      c.dim(name, *t, 1, a.k_cache.dim(2), "Hkv (from k_cache)");
      c.dim(name, *t, 2, a.q.dim(2), "D (from q)");
      c.disjoint("out", a.out, name, *t);
      c.disjoint("k_cache", a.k_cache, name, *t);
      c.disjoint("v_cache", a.v_cache, name, *t);
    }
    c.disjoint("k_cache", a.k_cache, "v_cache", a.v_cache);
  }
  if (a.rope) {
    if (!a.k_new.defined())
      c.fail(ErrorCode::invalid_argument, "rope is applied to q and k_new: it needs k_new and v_new");
    if (a.rope->positions.defined() || a.rope->position_offset != 0)
      c.fail(ErrorCode::invalid_argument,
             fmt::format("rope's positions are seq_lens − 1: give neither positions nor position_offset (got {}{})",
                         a.rope->positions.defined() ? "positions " + shape_of(a.rope->positions) + ", " : "",
                         fmt::format("offset {}", a.rope->position_offset)));
    validate(device, decode_rope(a, a.q, a.q));
  }
  if (a.qk_norm) {
    const QkNorm& n = *a.qk_norm;
    if (!a.k_new.defined())
      c.fail(ErrorCode::invalid_argument, "qk_norm normalises q and k_new: it needs k_new and v_new");
    const int64_t H = a.q.dim(1), Hkv = a.k_cache.dim(2), D = a.q.dim(2);
    for (auto [name, w, heads] :
         {std::tuple{"qk_norm.q_weight", &n.q_weight, H}, {"qk_norm.k_weight", &n.k_weight, Hkv}}) {
      c.tensor(name, *w, 1, 1);
      c.float_dtype(name, *w);
      c.contiguous(name, *w);
      c.dim(name, *w, 0, n.whole ? heads * D : D,
            n.whole ? "heads · D (whole: a token's projection)" : "D (each head)");
    }
    if (!(n.eps >= 0.0f) || !std::isfinite(n.eps))
      c.fail(ErrorCode::invalid_argument, fmt::format("qk_norm.eps = {} must be finite and ≥ 0", n.eps));
    if (n.whole)
      for (auto [name, t] : {std::pair{"q", &a.q}, {"k_new", &a.k_new}})
        if (t->stride(1) != t->dim(2))
          c.fail(ErrorCode::invalid_argument,
                 fmt::format("qk_norm.whole normalises a token's heads as one row: {}'s heads must be adjacent "
                             "(stride {} between heads, D = {})", name, t->stride(1), t->dim(2)));
  }
}

namespace {

// [B, heads, D] as [B, heads·D] where qk_norm is whole (its heads adjacent, as validate checks).
Tensor norm_rows(const Tensor& x, bool whole) {
  if (!whole) return x;
  Tensor rows = x;
  rows.rank = 2;
  rows.shape = {x.dim(0), x.dim(1) * x.dim(2)};
  rows.strides = {x.stride(0), 1};
  return rows;
}

}  // namespace

RmsNormArgs decode_norm(const AttentionDecodeArgs& a, Tensor out, Tensor x, Tensor weight) {
  const bool whole = a.qk_norm && a.qk_norm->whole;
  return {norm_rows(out, whole), norm_rows(x, whole), weight, {.eps = a.qk_norm ? a.qk_norm->eps : 1e-6f}};
}

AttentionDecodeArgs transformed_first(Stream& stream, const AttentionDecodeArgs& a, Tensor q_out, Tensor k_out) {
  Tensor q = a.q, k = a.k_new;
  if (a.qk_norm) {
    for (const RmsNormArgs& n :
         {decode_norm(a, q_out, q, a.qk_norm->q_weight), decode_norm(a, k_out, k, a.qk_norm->k_weight)})
      rms_norm(stream, n.out, n.x, n.weight, n.params);
    q = q_out, k = k_out;
  }
  if (a.rope) {
    for (const RopeArgs& r : {decode_rope(a, q_out, q), decode_rope(a, k_out, k)}) rope(stream, r.out, r.x, r.params);
    q = q_out, k = k_out;
  }
  AttentionDecodeArgs b = a;  // cache_from_earlier_op holds still: these ops write neither seq_lens nor the cache
  b.q = q;
  b.k_new = k;
  b.qk_norm.reset();
  b.rope.reset();
  return b;
}

RopeArgs decode_rope(const AttentionDecodeArgs& a, Tensor out, Tensor x) {
  RopeParams p = a.rope.value_or(RopeParams{});
  p.positions = a.seq_lens.reshape({a.seq_lens.dim(0), 1});
  p.position_offset = -1;
  return {out.unsqueeze(1), x.unsqueeze(1), p};
}

void validate(const Device& device, const KvAppendArgs& a) {
  Check c("kv_append", device);
  for (auto [name, t] : {std::pair{"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}, {"k", &a.k}, {"v", &a.v}}) {
    c.tensor(name, *t, 4, 4);
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.same_shape("v_cache", a.v_cache, "k_cache", a.k_cache);
  c.same_shape("v", a.v, "k", a.k);
  c.dim("k", a.k, 0, a.k_cache.dim(0), "B (from k_cache)");
  c.dim("k", a.k, 2, a.k_cache.dim(2), "Hkv (from k_cache)");
  c.dim("k", a.k, 3, a.k_cache.dim(3), "D (from k_cache)");
  if (a.k.dim(1) > a.k_cache.dim(1))
    c.fail(ErrorCode::shape_mismatch, fmt::format("T = {} new positions (k {}) exceed the cache's S = {} (k_cache {})",
                                                  a.k.dim(1), shape_of(a.k), a.k_cache.dim(1), shape_of(a.k_cache)));
  c.tensor("start", a.start, 1, 1);
  c.dtype_in("start", a.start, {DType::i32});
  c.contiguous("start", a.start);
  c.dim("start", a.start, 0, a.k_cache.dim(0), "B (from k_cache)");
  c.disjoint("k_cache", a.k_cache, "v_cache", a.v_cache);
  for (auto [name, t] : {std::pair{"k", &a.k}, {"v", &a.v}, {"start", &a.start}}) {
    c.disjoint("k_cache", a.k_cache, name, *t);
    c.disjoint("v_cache", a.v_cache, name, *t);
  }
}

KvAppendArgs decode_append(const AttentionDecodeArgs& a, Tensor start) {
  return {a.k_cache, a.v_cache, a.k_new.unsqueeze(1), a.v_new.unsqueeze(1), start, rolling_cache(a.params, a.k_cache.dim(1))};
}

Cost cost(const AttentionPrefillArgs& a) {
  const double B = double(a.q.dim(0)), Tq = double(a.q.dim(1)), H = double(a.q.dim(2)), D = double(a.q.dim(3));
  const double Tk = double(key_positions(a));
  // Pairs (i, j) actually scored: all of them, or the causal band (cut to the window).
  double pairs = Tq * Tk;
  if (a.params.causal) {
    pairs = 0;
    for (int64_t i = 0; i < a.q.dim(1); ++i) pairs += visible_keys(double(i) + Tk - Tq, a.params.window);
  }
  return {4.0 * B * H * D * pairs, double(a.q.nbytes() + a.k.nbytes() + a.v.nbytes() + a.out.nbytes())};
}

Cost cost(const AttentionDecodeArgs& a) {
  // The cache lengths live on the device; cost assumes full caches (an upper bound), of which a
  // window reads only its last `window` positions.
  const double B = double(a.q.dim(0)), H = double(a.q.dim(1)), D = double(a.q.dim(2)), S = double(a.k_cache.dim(1));
  const double keys = visible_keys(S - 1, a.params.window);
  const double cache_bytes = double(a.k_cache.nbytes() + a.v_cache.nbytes()) * (keys / S);
  // With k_new and v_new, the append's bytes as kv_append counts them (seq_lens in start's place).
  const double appended = a.k_new.defined() ? cost(decode_append(a, a.seq_lens)).bytes : 0.0;
  Cost c{4.0 * B * H * D * keys, double(a.q.nbytes() + a.out.nbytes()) + cache_bytes + appended};
  if (a.qk_norm) {  // as the two rms_norms count it, less their outputs, which stay in the kernel
    for (const RmsNormArgs& n : {decode_norm(a, a.q, a.q, a.qk_norm->q_weight),
                                 decode_norm(a, a.k_new, a.k_new, a.qk_norm->k_weight)}) {
      const Cost norm = cost(n);
      c.flops += norm.flops;
      c.bytes += norm.bytes - double(n.out.nbytes());
    }
  }
  return c;
}

Cost cost(const KvAppendArgs& a) {
  // Reads k and v once, writes the same number of cache elements.
  const double written = double(a.k.numel()) * 2;
  return {0.0, double(a.k.nbytes() + a.v.nbytes() + a.start.nbytes()) + written * double(dtype_size(a.k_cache.dtype))};
}

void attention_prefill(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, const AttentionParams& params) {
  dispatch(stream, AttentionPrefillArgs{out, q, k, v, params});
}

void attention_decode(Stream& stream, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor seq_lens,
                      const AttentionParams& params, Tensor k_new, Tensor v_new, const std::optional<RopeParams>& rope,
                      const std::optional<QkNorm>& qk_norm) {
  dispatch(stream, AttentionDecodeArgs{out, q, k_cache, v_cache, seq_lens, params, k_new, v_new, rope, qk_norm});
}

void attention_decode(Stream& stream, const AttentionDecodeArgs& args) { dispatch(stream, args); }

void kv_append(Stream& stream, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor start, bool rolling) {
  dispatch(stream, KvAppendArgs{k_cache, v_cache, k, v, start, rolling});
}

}  // namespace ding::ops
