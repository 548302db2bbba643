// Reference multi-head latent attention, in double: prefill in the expanded form (per-head keys
// and values formed from the latents, then softmax attention, as transformers' DeepseekV2Attention
// computes it), decode in the absorbed form (DeepSeek-V2 §2.1.2: W_uk folded into the query, W_uv
// applied to the attended latent). The two agree in exact arithmetic; a test holds them to it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ding/error.h"
#include "ding/ops/mla.h"
#include "reference.h"

namespace ding::reference {
namespace {

// Σ_t softmax_t(score_t) · value(t), for the scores of keys 0 … n−1 and value(t, i) the value's
// element i: the weights come out normalised so the caller sums p_t · value.
std::vector<double> softmax(std::vector<double> score) {
  const double top = *std::max_element(score.begin(), score.end());
  double sum = 0;
  for (double& s : score) sum += (s = std::exp(s - top));  // shift-invariant; keeps exp finite
  for (double& s : score) s /= sum;
  return score;
}

// W's element [h, r, l] (w_kv [H, Dn + Dv, L]).
double weight(const Tensor& w, int64_t h, int64_t r, int64_t l) { return load(w, offset(w, {h, r, l})); }

}  // namespace

void mla_prefill(Stream&, const ops::MlaPrefillArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), Tk = a.cache.dim(1), H = d.heads, L = d.latent;
  const double scale = ops::mla_scale(a.params, d);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      // Head h's keys [W_uk c_t ; k_t^R] and values W_uv c_t for every position t.
      std::vector<double> key(size_t(Tk * (d.nope + d.rope))), value(size_t(Tk * d.value));
      for (int64_t t = 0; t < Tk; ++t) {
        double* k = &key[size_t(t * (d.nope + d.rope))];
        for (int64_t r = 0; r < d.nope + d.value; ++r) {
          double up = 0;
          for (int64_t l = 0; l < L; ++l) up += weight(a.w_kv, h, r, l) * load(a.cache, offset(a.cache, {b, t, l}));
          if (r < d.nope) k[r] = up;
          else value[size_t(t * d.value + r - d.nope)] = up;
        }
        for (int64_t i = 0; i < d.rope; ++i) k[d.nope + i] = load(a.cache, offset(a.cache, {b, t, L + i}));
      }
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t keys = i + (Tk - Tq) + 1;  // the queries are the last Tq positions; causal
        std::vector<double> score(static_cast<size_t>(keys));
        for (int64_t t = 0; t < keys; ++t) {
          double s = 0;
          for (int64_t e = 0; e < d.nope + d.rope; ++e)
            s += load(a.q, offset(a.q, {b, i, h, e})) * key[size_t(t * (d.nope + d.rope) + e)];
          score[size_t(t)] = scale * s;
        }
        const std::vector<double> p = softmax(std::move(score));
        for (int64_t e = 0; e < d.value; ++e) {
          double o = 0;
          for (int64_t t = 0; t < keys; ++t) o += p[size_t(t)] * value[size_t(t * d.value + e)];
          store(a.out, offset(a.out, {b, i, h, e}), o);
        }
      }
    }
}

void mla_decode(Stream&, const ops::MlaDecodeArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), S = a.cache.dim(1), H = d.heads, L = d.latent;
  const double scale = ops::mla_scale(a.params, d);
  std::vector<int64_t> seq_len(static_cast<size_t>(B));  // every length is checked before anything is written
  for (int64_t b = 0; b < B; ++b) {
    seq_len[size_t(b)] = int64_t(load(a.seq_lens, b * a.seq_lens.strides[0]));
    if (seq_len[size_t(b)] < 1 || seq_len[size_t(b)] > S)
      throw Error(ErrorCode::invalid_argument, fmt::format("mla_decode: seq_lens[{}] = {} is outside [1, {}] (cache {})", b,
                                                           seq_len[size_t(b)], S, a.cache.shape_str()));
  }
  if (a.latent_new.defined())
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < L + d.rope; ++e)
        store(a.cache, offset(a.cache, {b, seq_len[size_t(b)] - 1, e}), load(a.latent_new, offset(a.latent_new, {b, e})));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      // q_lat = (W_uk)ᵀ q_nope: the query in latent space.
      std::vector<double> q_lat(size_t(L), 0.0);
      for (int64_t r = 0; r < d.nope; ++r) {
        const double q = load(a.q, offset(a.q, {b, h, r}));
        for (int64_t l = 0; l < L; ++l) q_lat[size_t(l)] += q * weight(a.w_kv, h, r, l);
      }
      const int64_t keys = seq_len[size_t(b)];
      std::vector<double> score(static_cast<size_t>(keys));
      for (int64_t t = 0; t < keys; ++t) {
        double s = 0;
        for (int64_t l = 0; l < L; ++l) s += q_lat[size_t(l)] * load(a.cache, offset(a.cache, {b, t, l}));
        for (int64_t i = 0; i < d.rope; ++i)
          s += load(a.q, offset(a.q, {b, h, d.nope + i})) * load(a.cache, offset(a.cache, {b, t, L + i}));
        score[size_t(t)] = scale * s;
      }
      const std::vector<double> p = softmax(std::move(score));
      std::vector<double> attended(size_t(L), 0.0);  // Σ_t p_t c_t
      for (int64_t t = 0; t < keys; ++t)
        for (int64_t l = 0; l < L; ++l) attended[size_t(l)] += p[size_t(t)] * load(a.cache, offset(a.cache, {b, t, l}));
      for (int64_t e = 0; e < d.value; ++e) {
        double o = 0;
        for (int64_t l = 0; l < L; ++l) o += weight(a.w_kv, h, d.nope + e, l) * attended[size_t(l)];
        store(a.out, offset(a.out, {b, h, e}), o);
      }
    }
}

}  // namespace ding::reference
