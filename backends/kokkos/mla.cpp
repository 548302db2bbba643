// mla_prefill and mla_decode, both in the absorbed form (ops/mla.h). One team per (query row,
// head): the query moved into latent space, q_lat = (W_uk)ᵀ q_nope, goes to team scratch (a
// thread per latent element), then the keys' scores (a thread per key, each a dot over the
// key's L + Dr cached elements), their softmax, the attended latent Σ p_t c_t (a thread per
// latent element) and finally W_uv applied to it (a thread per output element).
#include <cfloat>

#include <fmt/format.h>

#include "ding/ops/mla.h"
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

struct LatentAttention {
  Elements q, cache, w, out;
  Strides q_s, cache_s, out_s;
  int64_t H, L, Dr, Dn, Dv;
  float scale;

  // Query row (b, i) of head h at q_at against keys [0, keys) of cache entry b, into out_at.
  KOKKOS_INLINE_FUNCTION void operator()(const Team& team, int64_t b, int64_t h, int64_t q_at, int64_t out_at,
                                         int64_t keys, int64_t max_keys) const {
    const ScratchFloats q_lat(team.team_scratch(scratch_level(bytes(L, max_keys))), L);
    const ScratchFloats attended(team.team_scratch(scratch_level(bytes(L, max_keys))), L);
    const ScratchFloats score(team.team_scratch(scratch_level(bytes(L, max_keys))), max_keys);
    const int64_t w_head = h * (Dn + Dv) * L, cache_b = b * cache_s[0];
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, L), [&](const int64_t l) {
      float s = 0;
      for (int64_t r = 0; r < Dn; ++r) s += q.load(q_at + r) * w.load(w_head + r * L + l);
      q_lat(l) = s;
    });
    team.team_barrier();
    float max = -FLT_MAX;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, keys),
        [&](const int64_t t, float& m) {
          const int64_t c = cache_b + t * cache_s[1];
          float s = 0;
          for (int64_t l = 0; l < L; ++l) s += q_lat(l) * cache.load(c + l);
          for (int64_t i = 0; i < Dr; ++i) s += q.load(q_at + (Dn + i)) * cache.load(c + L + i);
          score(t) = scale * s;
          m = fmaxf(m, scale * s);
        },
        Kokkos::Max<float>(max));
    team.team_barrier();
    float sum = 0;  // softmax is shift-invariant; subtracting the max keeps expf from overflowing
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, keys),
        [&](const int64_t t, float& s) {
          score(t) = expf(score(t) - max);
          s += score(t);
        },
        sum);
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, L), [&](const int64_t l) {
      float a = 0;
      for (int64_t t = 0; t < keys; ++t) a += score(t) * cache.load(cache_b + t * cache_s[1] + l);
      attended(l) = a;
    });
    team.team_barrier();
    const float inverse = 1.0f / sum;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Dv), [&](const int64_t e) {
      float o = 0;
      for (int64_t l = 0; l < L; ++l) o += w.load(w_head + (Dn + e) * L + l) * attended(l);
      out.store(out_at + e, o * inverse);
    });
  }

  static size_t bytes(int64_t L, int64_t keys) { return ScratchFloats::shmem_size(L) * 2 + ScratchFloats::shmem_size(keys); }
};

LatentAttention latent_attention(const Tensor& out, const Tensor& q, const Tensor& cache, const Tensor& w_kv,
                                 const ops::MlaParams& params) {
  const ops::MlaDims d = ops::mla_dims(q, cache, w_kv);
  return {elements(q), elements(cache), elements(w_kv), elements(out), strides(q), strides(cache), strides(out),
          d.heads, d.latent, d.rope, d.nope, d.value, ops::mla_scale(params, d)};
}

TeamPolicy teams(int64_t league, int64_t L, int64_t keys) {
  const size_t bytes = LatentAttention::bytes(L, keys);
  return TeamPolicy(int(league), Kokkos::AUTO).set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}

}  // namespace

void mla_prefill(Stream&, const ops::MlaPrefillArgs& a) {
  const LatentAttention attend = latent_attention(a.out, a.q, a.cache, a.w_kv, a.params);
  const int64_t Tq = a.q.dim(1), Tk = a.cache.dim(1), H = attend.H;
  Kokkos::parallel_for("ding::mla_prefill", teams(a.q.dim(0) * Tq * H, attend.L, Tk), KOKKOS_LAMBDA(const Team& team) {
    const int64_t h = team.league_rank() % H, i = team.league_rank() / H % Tq, b = team.league_rank() / H / Tq;
    // The queries are the last Tq of Tk positions: query i sees keys 0 … i + Tk − Tq.
    attend(team, b, h, b * attend.q_s[0] + i * attend.q_s[1] + h * attend.q_s[2],
           b * attend.out_s[0] + i * attend.out_s[1] + h * attend.out_s[2], i + Tk - Tq + 1, Tk);
  });
}

void mla_decode(Stream&, const ops::MlaDecodeArgs& a) {
  const LatentAttention attend = latent_attention(a.out, a.q, a.cache, a.w_kv, a.params);
  const int64_t S = a.cache.dim(1), H = attend.H, row = a.cache.dim(2);
  const Elements seq_lens = elements(a.seq_lens);
  if (a.latent_new.defined()) {  // the token's [c ; k^R] at position seq_lens − 1
    const Elements latent = elements(a.latent_new), cache = attend.cache;
    const int64_t latent_step = a.latent_new.strides[0], cache_b = a.cache.strides[0], cache_t = a.cache.strides[1];
    Kokkos::parallel_for("ding::mla_append", Range(0, a.q.dim(0) * row), KOKKOS_LAMBDA(const int64_t item) {
      const int64_t e = item % row, b = item / row, position = seq_lens.load_int(b) - 1;
      if (position < 0 || position >= S) return;  // not a cache length: nothing written (kernels.h)
      cache.store(b * cache_b + position * cache_t + e, latent.load(b * latent_step + e));
    });
  }
  Kokkos::parallel_for("ding::mla_decode", teams(a.q.dim(0) * H, attend.L, S), KOKKOS_LAMBDA(const Team& team) {
    const int64_t h = team.league_rank() % H, b = team.league_rank() / H;
    const int64_t length = seq_lens.load_int(b);
    if (length < 1 || length > S) return;  // not a cache length: nothing written (kernels.h)
    attend(team, b, h, b * attend.q_s[0] + h * attend.q_s[1], b * attend.out_s[0] + h * attend.out_s[1], length, S);
  });
}

}  // namespace ding::kokkos
