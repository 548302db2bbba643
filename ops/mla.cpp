#include "ding/ops/mla.h"

#include <fmt/format.h>

#include <cmath>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

MlaDims mla_dims(const Tensor& q, const Tensor& cache, const Tensor& w_kv) {
  MlaDims d{};
  d.heads = w_kv.dim(0);
  d.latent = w_kv.dim(2);
  d.rope = cache.dim(-1) - d.latent;
  d.nope = q.dim(-1) - d.rope;
  d.value = w_kv.dim(1) - d.nope;
  return d;
}

float mla_scale(const MlaParams& p, const MlaDims& d) {
  return p.scale > 0 ? p.scale : float(1.0 / std::sqrt(double(d.nope + d.rope)));
}

namespace {

// The shape rules both forms share: q's heads and W's, and the split of the last dims into
// latent, rope, nope and value parts, each at least one element.
// q and out have rank q_rank (prefill 4: [B, Tq, H, ·]; decode 3: [B, H, ·]).
MlaDims validate_mla(const Check& c, const Tensor& out, const Tensor& q, const Tensor& cache, const Tensor& w_kv,
                     const MlaParams& p, int q_rank) {
  c.tensor("q", q, q_rank, q_rank);
  c.tensor("out", out, q_rank, q_rank);
  c.tensor("cache", cache, 3, 3);
  c.tensor("w_kv", w_kv, 3, 3);
  for (auto [name, t] : {std::pair{"q", &q}, {"cache", &cache}, {"w_kv", &w_kv}, {"out", &out}}) {
    c.float_dtype(name, *t);
    c.last_dim_contiguous(name, *t);
  }
  c.contiguous("w_kv", w_kv);
  const MlaDims d = mla_dims(q, cache, w_kv);
  c.dim("q", q, q.rank - 2, d.heads, "H (from w_kv [H, Dn + Dv, L])");
  if (d.rope < 1)
    c.fail(ErrorCode::shape_mismatch, fmt::format("cache's last dim must be L + Dr with Dr ≥ 1, L = {} from w_kv: cache {}, w_kv {}",
                                                  d.latent, shape_of(cache), shape_of(w_kv)));
  if (d.nope < 1)
    c.fail(ErrorCode::shape_mismatch, fmt::format("q's last dim must be Dn + Dr with Dn ≥ 1, Dr = {} from cache: q {}, cache {}",
                                                  d.rope, shape_of(q), shape_of(cache)));
  if (d.value < 1)
    c.fail(ErrorCode::shape_mismatch, fmt::format("w_kv's dim 1 must be Dn + Dv with Dv ≥ 1, Dn = {} from q: w_kv {}, q {}",
                                                  d.nope, shape_of(w_kv), shape_of(q)));
  c.dim("out", out, out.rank - 2, d.heads, "H (from w_kv)");
  c.dim("out", out, out.rank - 1, d.value, "Dv (from w_kv and q)");
  c.dim("cache", cache, 0, q.dim(0), "B (from q)");
  if (!(p.scale >= 0) || !std::isfinite(p.scale))
    c.fail(ErrorCode::invalid_argument, fmt::format("scale must be ≥ 0 (0 = 1/√(Dn + Dr)), got {}", p.scale));
  for (auto [name, t] : {std::pair{"q", &q}, {"cache", &cache}, {"w_kv", &w_kv}}) c.disjoint("out", out, name, *t);
  return d;
}

}  // namespace

void validate(const Device& device, const MlaPrefillArgs& a) {
  Check c("mla_prefill", device);
  validate_mla(c, a.out, a.q, a.cache, a.w_kv, a.params, 4);
  c.dim("out", a.out, 0, a.q.dim(0), "B (from q)");
  c.dim("out", a.out, 1, a.q.dim(1), "Tq (from q)");
  if (a.cache.dim(1) < a.q.dim(1))
    c.fail(ErrorCode::shape_mismatch, fmt::format("the cache holds Tk = {} positions, fewer than the Tq = {} queries (q {}, cache {})",
                                                  a.cache.dim(1), a.q.dim(1), shape_of(a.q), shape_of(a.cache)));
}

void validate(const Device& device, const MlaDecodeArgs& a) {
  Check c("mla_decode", device);
  validate_mla(c, a.out, a.q, a.cache, a.w_kv, a.params, 3);
  c.dim("out", a.out, 0, a.q.dim(0), "B (from q)");
  c.tensor("seq_lens", a.seq_lens, 1, 1);
  c.dtype_in("seq_lens", a.seq_lens, {DType::i32});
  c.contiguous("seq_lens", a.seq_lens);
  c.dim("seq_lens", a.seq_lens, 0, a.q.dim(0), "B (from q)");
  c.disjoint("out", a.out, "seq_lens", a.seq_lens);
  if (a.latent_new.defined()) {
    c.tensor("latent_new", a.latent_new, 2, 2);
    c.float_dtype("latent_new", a.latent_new);
    c.last_dim_contiguous("latent_new", a.latent_new);
    c.dim("latent_new", a.latent_new, 0, a.q.dim(0), "B (from q)");
    c.dim("latent_new", a.latent_new, 1, a.cache.dim(2), "L + Dr (from cache)");
    c.disjoint("cache", a.cache, "latent_new", a.latent_new);
    c.disjoint("out", a.out, "latent_new", a.latent_new);
  }
}

Cost cost(const MlaPrefillArgs& a) {
  const MlaDims d = mla_dims(a.q, a.cache, a.w_kv);
  const double B = double(a.q.dim(0)), Tq = double(a.q.dim(1)), Tk = double(a.cache.dim(1)), H = double(d.heads);
  double pairs = 0;  // the causal band: query i sees i + Tk − Tq + 1 keys
  for (int64_t i = 0; i < a.q.dim(1); ++i) pairs += double(i) + Tk - Tq + 1;
  const double expand = 2.0 * B * Tk * H * double(d.nope + d.value) * double(d.latent);
  const double attend = 2.0 * B * H * pairs * double(d.nope + d.rope + d.value);
  return {expand + attend, double(a.q.nbytes() + a.cache.nbytes() + a.w_kv.nbytes() + a.out.nbytes())};
}

Cost cost(const MlaDecodeArgs& a) {
  // Full caches assumed (the lengths live on the device): an upper bound.
  const MlaDims d = mla_dims(a.q, a.cache, a.w_kv);
  const double B = double(a.q.dim(0)), S = double(a.cache.dim(1)), H = double(d.heads), L = double(d.latent);
  const double absorb = 2.0 * B * H * double(d.nope + d.value) * L;
  const double attend = 2.0 * B * H * S * (L + double(d.rope) + L);
  const double appended = a.latent_new.defined() ? double(a.latent_new.nbytes() + a.cache.dim(2) * dtype_size(a.cache.dtype) * a.q.dim(0)) : 0.0;
  return {absorb + attend,
          double(a.q.nbytes() + a.cache.nbytes() + a.w_kv.nbytes() + a.out.nbytes() + a.seq_lens.nbytes()) + appended};
}

void mla_prefill(Stream& stream, Tensor out, Tensor q, Tensor cache, Tensor w_kv, const MlaParams& params) {
  dispatch(stream, MlaPrefillArgs{out, q, cache, w_kv, params});
}

void mla_decode(Stream& stream, Tensor out, Tensor q, Tensor cache, Tensor seq_lens, Tensor w_kv, const MlaParams& params,
                Tensor latent_new) {
  dispatch(stream, MlaDecodeArgs{out, q, cache, seq_lens, w_kv, params, latent_new});
}

}  // namespace ding::ops
