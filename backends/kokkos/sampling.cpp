// argmax, top_k, sample, count_nonfinite: one team per row of logits.
// The op's one order (larger value first, ties by lower index) is the order of a 64-bit key:
// the value's bits made monotone in the high half, the index complemented in the low half. So
// argmax is a team max over keys, and top_k and sample sort each row's keys once (Kokkos::sort),
// read from the largest. sample then walks the sorted row with team reductions and scans in
// double, as the reference forms its probabilities.
#include <Kokkos_Sort.hpp>

#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

namespace {

using Keys = Kokkos::View<uint64_t**, Kokkos::LayoutRight, Memory>;

// Larger key = earlier in the order. −0 is +0 (they compare equal, so the index decides).
KOKKOS_INLINE_FUNCTION uint64_t order_key(float value, int64_t index) {
  const uint32_t bits = float_bits(value == 0.0f ? 0.0f : value);
  const uint32_t monotone = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return uint64_t(monotone) << 32 | uint64_t(0xffffffffu - uint32_t(index));
}

KOKKOS_INLINE_FUNCTION int64_t key_index(uint64_t key) { return int64_t(0xffffffffu - uint32_t(key)); }

KOKKOS_INLINE_FUNCTION float key_value(uint64_t key) {
  const uint32_t monotone = uint32_t(key >> 32);
  return bits_float(monotone & 0x80000000u ? monotone & 0x7fffffffu : ~monotone);
}

// The rows' keys, each row sorted ascending: key (b, V − 1 − i) is rank i of row b.
Keys sorted_keys(const Tensor& logits) {
  const int64_t V = logits.dim(1);
  Keys keys(Kokkos::view_alloc(Kokkos::WithoutInitializing, "ding::sort_keys"), logits.dim(0), V);
  const Elements x = elements(logits);
  const Strides x_s = strides(logits);
  Kokkos::parallel_for("ding::sort_keys", Range(0, logits.numel()), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t b = item / V, v = item % V;
    keys(b, v) = order_key(x.load(b * x_s[0] + v * x_s[1]), v);
  });
  for (int64_t b = 0; b < logits.dim(0); ++b) Kokkos::sort(Kokkos::subview(keys, b, Kokkos::ALL()));
  return keys;
}

void argmax_rows(const Tensor& out_t, const Tensor& logits) {
  const int64_t V = logits.dim(1);
  const Elements out = elements(out_t), x = elements(logits);
  const Strides x_s = strides(logits);
  const int64_t out_step = out_t.strides[0];
  Kokkos::parallel_for("ding::argmax", TeamPolicy(int(logits.dim(0)), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const int64_t b = team.league_rank();
    uint64_t best = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, V),
        [&](const int64_t v, uint64_t& m) {
          const uint64_t key = order_key(x.load(b * x_s[0] + v * x_s[1]), v);
          if (key > m) m = key;
        },
        Kokkos::Max<uint64_t>(best));
    Kokkos::single(Kokkos::PerTeam(team), [&] { out.store_int(b * out_step, int32_t(key_index(best))); });
  });
}

}  // namespace

void argmax(Stream&, const ops::ArgmaxArgs& a) { argmax_rows(a.out, a.logits); }

void count_nonfinite(Stream&, const ops::CountNonfiniteArgs& a) {
  const int64_t N = a.x.dim(1);
  const Elements out = elements(a.out), x = elements(a.x);
  const int64_t out_step = a.out.strides[0];
  Kokkos::parallel_for("ding::count_nonfinite", TeamPolicy(int(a.x.dim(0)), Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
    const int64_t b = team.league_rank();
    int count = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, N), [&](const int64_t i, int& c) { c += is_finite(x.load(b * N + i)) ? 0 : 1; }, count);
    Kokkos::single(Kokkos::PerTeam(team), [&] { out.store_int(b * out_step, count); });
  });
}

void top_k(Stream&, const ops::TopKArgs& a) {
  const int64_t V = a.logits.dim(1), k = a.values.dim(1);
  const Keys keys = sorted_keys(a.logits);
  const Elements values = elements(a.values), indices = elements(a.indices);
  const Strides v_s = strides(a.values), i_s = strides(a.indices);
  Kokkos::parallel_for("ding::top_k", Range(0, a.values.dim(0) * k), KOKKOS_LAMBDA(const int64_t item) {
    const int64_t b = item / k, j = item % k;
    const uint64_t key = keys(b, V - 1 - j);
    values.store(b * v_s[0] + j * v_s[1], key_value(key));
    indices.store_int(b * i_s[0] + j * i_s[1], int32_t(key_index(key)));
  });
}

// Per row, with the logits x sorted descending (rank i) and z = x / temperature:
//   n = V, or top_k; p_i = exp(z_i − z_0) / Σ_{i<n} exp(z_i − z_0)
//   top_p < 1: n = the least m with Σ_{i<m} p_i ≥ top_p
//   min_p > 0: n = the number of i < n with p_i ≥ min_p · p_0 (a prefix: p descends)
//   token = rank (the least i < n with Σ_{i'≤i} p_i' > u · Σ_{i<n} p_i), or rank n − 1.
// The two "least i" are found by team scans: the one i whose running sum crosses the bound
// records itself (an atomic min, in case rounding lets two neighbours both see a crossing).
void sample(Stream&, const ops::SampleArgs& a) {
  if (a.params.temperature == 0) return argmax_rows(a.out, a.logits);
  const int64_t V = a.logits.dim(1);
  const Keys keys = sorted_keys(a.logits);
  const Elements out = elements(a.out), uniforms = elements(a.uniforms);
  const int64_t out_step = a.out.strides[0], u_step = a.uniforms.strides[0];
  const double temperature = a.params.temperature, top_p = a.params.top_p, min_p = a.params.min_p;
  const int64_t top_k = a.params.top_k > 0 && a.params.top_k < V ? a.params.top_k : V;
  using Shared = Kokkos::View<int*, Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const size_t shared_bytes = Shared::shmem_size(2);
  Kokkos::parallel_for(
      "ding::sample", TeamPolicy(int(a.logits.dim(0)), Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(shared_bytes)),
      KOKKOS_LAMBDA(const Team& team) {
        const int64_t b = team.league_rank();
        const Shared least(team.team_scratch(0), 2);  // the two crossings' ranks
        const double z0 = double(key_value(keys(b, V - 1))) / temperature;
        const auto weight = [&](int64_t i) { return exp(double(key_value(keys(b, V - 1 - i))) / temperature - z0); };
        double sum = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, top_k), [&](const int64_t i, double& s) { s += weight(i); }, sum);
        Kokkos::single(Kokkos::PerTeam(team), [&] { least(0) = least(1) = int(top_k); });
        team.team_barrier();
        int64_t n = top_k;
        if (top_p < 1) {
          Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, n), [&](const int64_t i, double& running, const bool final) {
            const double p = weight(i) / sum;
            if (final && running < top_p && running + p >= top_p) Kokkos::atomic_fetch_min(&least(0), int(i + 1));
            running += p;
          });
          team.team_barrier();
          n = least(0);
        }
        if (min_p > 0) {
          const double p0 = 1.0 / sum;
          int kept = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n), [&](const int64_t i, int& c) { c += weight(i) / sum >= min_p * p0 ? 1 : 0; },
              kept);
          n = kept > 1 ? kept : 1;
        }
        double kept_sum = 0;
        Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](const int64_t i, double& s) { s += weight(i) / sum; },
                                kept_sum);
        const double target = double(uniforms.load(b * u_step)) * kept_sum;
        Kokkos::single(Kokkos::PerTeam(team), [&] { least(1) = int(n - 1); });
        team.team_barrier();
        Kokkos::parallel_scan(Kokkos::TeamThreadRange(team, n), [&](const int64_t i, double& running, const bool final) {
          const double p = weight(i) / sum;
          if (final && running <= target && running + p > target) Kokkos::atomic_fetch_min(&least(1), int(i));
          running += p;
        });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team),
                       [&] { out.store_int(b * out_step, int32_t(key_index(keys(b, V - 1 - least(1))))); });
      });
}

}  // namespace ding::kokkos
