// attention_prefill, attention_decode and kv_append. One team per output row (b, query, head):
// q widened to f32 once into team scratch, the visible keys' scores beside it (a thread per key,
// each a D-long dot), their max and the softmax denominator team reductions, then a thread per
// output dim sums the values.
// Key j lives at cache slot j mod S (a rolling cache; slot j itself while j < S).
#include <cfloat>

#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

// A [B, S, Hkv, D] key or value cache (or a prefill's k / v).
struct Cache {
  Elements e;
  Strides s;
  int64_t slots;
  KOKKOS_INLINE_FUNCTION int64_t at(int64_t b, int64_t position, int64_t head) const {
    return b * s[0] + position % slots * s[1] + head * s[2];
  }
};

Cache cache_of(const Tensor& t) { return {elements(t), strides(t), t.dim(1)}; }

// out[out_at + d·out_step] = Σ_j softmax_j(scale · q·k_j) · v_j[d] over the keys [first, end)
// of kv head `head` in batch entry b. `scratch` holds the D elements of q widened to f32 (once,
// for every key's dot), then the scores.
KOKKOS_INLINE_FUNCTION void attend_row(const Team& team, const ScratchFloats& scratch, Elements out, int64_t out_at,
                                       int64_t out_step, Elements q, int64_t q_at, int64_t q_step, const Cache& k,
                                       const Cache& v, int64_t b, int64_t head, int64_t first, int64_t end, int64_t D,
                                       float scale) {
  float* const qs = scratch.data();
  float* const scores = qs + D;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D), [&](const int64_t d) { qs[d] = q.load(q_at + d * q_step); });
  team.team_barrier();
  float max = -FLT_MAX;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, first, end),
      [&](const int64_t j, float& m) {
        const float s = scale * dot_with(qs, k.e, k.at(b, j, head), k.s[3], D);
        scores[j - first] = s;
        m = fmaxf(m, s);
      },
      Kokkos::Max<float>(max));
  team.team_barrier();
  // softmax is shift-invariant; subtracting the max keeps expf from overflowing.
  float sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, first, end),
      [&](const int64_t j, float& s) {
        scores[j - first] = expf(scores[j - first] - max);
        s += scores[j - first];
      },
      sum);
  team.team_barrier();
  const float inverse = 1.0f / sum;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, D), [&](const int64_t d) {
    // Value rows one slot stride apart up to the ring's wrap (a rolling cache), as one dot each.
    float o = 0;
    for (int64_t j0 = first, j1; j0 < end; j0 = j1) {
      j1 = (j0 / v.slots + 1) * v.slots < end ? (j0 / v.slots + 1) * v.slots : end;
      o += dot_with(scores + (j0 - first), v.e, v.at(b, j0, head) + d * v.s[3], v.s[1], j1 - j0);
    }
    out.store(out_at + d * out_step, o * inverse);
  });
}

// Teams of `league` rows with room for a row of q (D) and `keys` scores each.
TeamPolicy rows_with_scores(int64_t league, int64_t keys, int64_t D) {
  const size_t bytes = ScratchFloats::shmem_size(D + keys);
  return TeamPolicy(int(league), Kokkos::AUTO).set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}

// kv_append with start[b] = starts[b] + delta (delta −1: attention_decode's seq_lens − 1).
void append(const ops::KvAppendArgs& a, int64_t delta) {
  const int64_t T = a.k.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  const Cache k_cache = cache_of(a.k_cache), v_cache = cache_of(a.v_cache);
  const Elements k = elements(a.k), v = elements(a.v), start = elements(a.start);
  const Strides k_s = strides(a.k), v_s = strides(a.v);
  const int64_t start_step = a.start.strides[0], S = a.k_cache.dim(1);
  const bool rolling = a.rolling;
  Kokkos::parallel_for("ding::kv_append", Range(0, a.k.dim(0) * T * Hkv * D), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t d = item % D, h = item / D % Hkv, t = item / D / Hkv % T, b = item / D / Hkv / T;
    const int64_t first = start.load_int(b * start_step) + delta;
    if (first < 0 || (!rolling && first + T > S)) return;  // out of the cache: nothing written (kernels.h)
    k_cache.e.store(k_cache.at(b, first + t, h) + d * k_cache.s[3], k.load(b * k_s[0] + t * k_s[1] + h * k_s[2] + d * k_s[3]));
    v_cache.e.store(v_cache.at(b, first + t, h) + d * v_cache.s[3], v.load(b * v_s[0] + t * v_s[1] + h * v_s[2] + d * v_s[3]));
  });
}

}  // namespace

void attention_prefill(Stream&, const ops::AttentionPrefillArgs& a) {
  const int64_t Tq = a.q.dim(1), H = a.q.dim(2), D = a.q.dim(3), Tk = ops::key_positions(a);
  const int64_t group = H / a.k.dim(2), window = a.params.window;
  const bool causal = a.params.causal;
  const float scale = ops::attention_scale(a.params, D);
  const Cache k = cache_of(a.k), v = cache_of(a.v);
  const Elements out = elements(a.out), q = elements(a.q);
  const Strides out_s = strides(a.out), q_s = strides(a.q);
  const int64_t keys = window > 0 && window < Tk ? window : Tk;
  Kokkos::parallel_for("ding::attention_prefill", rows_with_scores(a.q.dim(0) * Tq * H, keys, D),
                       KOKKOS_LAMBDA(const Team& team) {
    const int64_t h = team.league_rank() % H, i = team.league_rank() / H % Tq, b = team.league_rank() / H / Tq;
    // The queries are the last Tq of Tk positions: query i sits at position p = i + Tk − Tq and
    // sees keys (p − window, p] when causal.
    const int64_t p = i + Tk - Tq;
    const int64_t end = causal ? p + 1 : Tk, first = causal && window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const ScratchFloats scratch(team.team_scratch(scratch_level(ScratchFloats::shmem_size(D + keys))), D + keys);
    attend_row(team, scratch, out, b * out_s[0] + i * out_s[1] + h * out_s[2], out_s[3], q,
               b * q_s[0] + i * q_s[1] + h * q_s[2], q_s[3], k, v, b, h / group, first, end, D, scale);
  });
}

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  if (a.qk_norm || a.rope) {
    // q and k_new normalised and rotated into temporaries by those ops' kernels, then the op without them.
    const Buffer q_out = temporary(stream, a.q.nbytes()), k_out = temporary(stream, a.k_new.nbytes());
    const Tensor q_copy = Tensor::view(q_out.data(), a.q.device, a.q.dtype, {a.q.dim(0), a.q.dim(1), a.q.dim(2)});
    const Tensor k_copy =
        Tensor::view(k_out.data(), a.q.device, a.k_new.dtype, {a.k_new.dim(0), a.k_new.dim(1), a.k_new.dim(2)});
    kokkos::attention_decode(stream, ops::transformed_first(stream, a, q_copy, k_copy));
    stream.synchronize();  // before the temporaries are freed
    return;
  }
  if (a.k_new.defined()) append(ops::decode_append(a, a.seq_lens), -1);
  const int64_t H = a.q.dim(1), D = a.q.dim(2), S = a.k_cache.dim(1);
  const int64_t group = H / a.k_cache.dim(2), window = a.params.window;
  const bool rolling = ops::rolling_cache(a.params, S);
  const float scale = ops::attention_scale(a.params, D);
  const Cache k = cache_of(a.k_cache), v = cache_of(a.v_cache);
  const Elements out = elements(a.out), q = elements(a.q), seq_lens = elements(a.seq_lens);
  const Strides out_s = strides(a.out), q_s = strides(a.q);
  const int64_t keys = window > 0 && window < S ? window : S;
  Kokkos::parallel_for("ding::attention_decode", rows_with_scores(a.q.dim(0) * H, keys, D), KOKKOS_LAMBDA(const Team& team) {
    const int64_t h = team.league_rank() % H, b = team.league_rank() / H;
    const int64_t length = seq_lens.load_int(b);
    if (length < 1 || (!rolling && length > S)) return;  // not a cache length: nothing written (kernels.h)
    // The current token sits at position length − 1 and sees the window's positions up to it.
    const int64_t first = window > 0 && length - window > 0 ? length - window : 0;
    const ScratchFloats scratch(team.team_scratch(scratch_level(ScratchFloats::shmem_size(D + keys))), D + keys);
    attend_row(team, scratch, out, b * out_s[0] + h * out_s[1], out_s[2], q, b * q_s[0] + h * q_s[1], q_s[2], k, v, b,
               h / group, first, length, D, scale);
  });
}

void kv_append(Stream&, const ops::KvAppendArgs& a) { append(a, 0); }

}  // namespace ding::kokkos
