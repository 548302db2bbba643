// attention_prefill / attention_decode: the reference against closed-form facts, and bad input
// through the public front end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "ding/ops/attention.h"
#include "ding/ops/copy.h"
#include "ding/threads.h"
#include "configurations.h"
#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

using ops::AttentionParams;

Device& ref() { return Device::open("ref"); }
Device& cpu() { return Device::open("cpu"); }

// Element (b, t, h, d) of a contiguous [B, T, H, D] tensor read back as doubles.
double at4(const std::vector<double>& x, const Tensor& t, int64_t b, int64_t i, int64_t h, int64_t d) {
  return x[size_t(((b * t.dim(1) + i) * t.dim(2) + h) * t.dim(3) + d)];
}

// ---- Reference facts ---------------------------------------------------------------------------

// Equal keys give equal scores, so the weights are uniform: a causal query i averages v rows 0..i.
TEST(AttentionReference, IdenticalKeysAverageTheVisibleValues_B2_T9_H4_Hkv2_D16) {
  CaseRun run(ref(), 1);
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, D = 16;
  const Tensor q = run.normal(DType::f32, {B, T, H, D});
  std::vector<double> key_values(size_t(B * T * Hkv * D));
  for (size_t i = 0; i < key_values.size(); ++i) key_values[i] = 0.1 * double(i % size_t(D)) - 0.7;  // same row everywhere
  const Tensor k = run.values(DType::f32, {B, T, Hkv, D}, key_values);
  const Tensor v = run.normal(DType::f32, {B, T, Hkv, D});
  const Tensor out = run.output("out", DType::f32, {B, T, H, D});
  ops::attention_prefill(run.stream, out, q, k, v);
  const auto o = run.read(out), vv = run.read(v);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          double mean = 0;
          for (int64_t j = 0; j <= i; ++j) mean += at4(vv, v, b, j, h / (H / Hkv), d);
          EXPECT_NEAR(at4(o, out, b, i, h, d), mean / double(i + 1), 1e-6) << b << " " << i << " " << h << " " << d;
        }
}

// A single key gets weight 1 whatever q is.
TEST(AttentionReference, OneKeyReturnsItsValue_B3_H6_Hkv3_D7) {
  CaseRun run(ref(), 2);
  const Tensor q = run.normal(DType::f32, {3, 1, 6, 7}, 5.0);
  const Tensor k = run.normal(DType::f32, {3, 1, 3, 7}, 5.0);
  const Tensor v = run.normal(DType::f32, {3, 1, 3, 7});
  const Tensor out = run.output("out", DType::f32, {3, 1, 6, 7});
  ops::attention_prefill(run.stream, out, q, k, v, {.scale = 2.0f, .causal = false});
  const auto o = run.read(out), vv = run.read(v);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t d = 0; d < 7; ++d) EXPECT_EQ(at4(o, out, b, 0, h, d), at4(vv, v, b, 0, h / 2, d));
}

// Causal row 0 of a full prefill sees only key 0.
TEST(AttentionReference, CausalRow0IsValueRow0_T17_H8_Hkv2_D64) {
  CaseRun run(ref(), 3);
  const Tensor q = run.normal(DType::f32, {1, 17, 8, 64});
  const Tensor k = run.normal(DType::f32, {1, 17, 2, 64});
  const Tensor v = run.normal(DType::f32, {1, 17, 2, 64});
  const Tensor out = run.output("out", DType::f32, {1, 17, 8, 64});
  ops::attention_prefill(run.stream, out, q, k, v);
  const auto o = run.read(out), vv = run.read(v);
  for (int64_t h = 0; h < 8; ++h)
    for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(at4(o, out, 0, 0, h, d), at4(vv, v, 0, 0, h / 4, d));
}

// A vanishing scale flattens the softmax: a non-causal query averages every value row.
TEST(AttentionReference, TinyScaleAveragesAllValues_Tq3_Tk11_D8) {
  CaseRun run(ref(), 4);
  const Tensor q = run.normal(DType::f32, {1, 3, 1, 8});
  const Tensor k = run.normal(DType::f32, {1, 11, 1, 8});
  const Tensor v = run.normal(DType::f32, {1, 11, 1, 8});
  const Tensor out = run.output("out", DType::f32, {1, 3, 1, 8});
  ops::attention_prefill(run.stream, out, q, k, v, {.scale = 1e-30f, .causal = false});
  const auto o = run.read(out), vv = run.read(v);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t d = 0; d < 8; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < 11; ++j) mean += at4(vv, v, 0, j, 0, d);
      EXPECT_NEAR(at4(o, out, 0, i, 0, d), mean / 11, 1e-6);
    }
}

// GQA is MHA with each kv head repeated for its group (HF repeat_kv): run both and compare.
TEST(AttentionReference, GqaEqualsMhaWithRepeatedKvHeads_T13_H8_Hkv2_D32) {
  const int64_t T = 13, H = 8, Hkv = 2, D = 32, group = H / Hkv;
  CaseRun run(ref(), 5);
  const Tensor q = run.normal(DType::f32, {1, T, H, D});
  const Tensor k = run.normal(DType::f32, {1, T, Hkv, D});
  const Tensor v = run.normal(DType::f32, {1, T, Hkv, D});
  const auto kk = run.read(k), vv = run.read(v);
  std::vector<double> k_rep(size_t(T * H * D)), v_rep(size_t(T * H * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        k_rep[size_t((t * H + h) * D + d)] = at4(kk, k, 0, t, h / group, d);
        v_rep[size_t((t * H + h) * D + d)] = at4(vv, v, 0, t, h / group, d);
      }
  const Tensor k_mha = run.values(DType::f32, {1, T, H, D}, k_rep);
  const Tensor v_mha = run.values(DType::f32, {1, T, H, D}, v_rep);
  const Tensor out_gqa = run.output("gqa", DType::f32, {1, T, H, D});
  const Tensor out_mha = run.output("mha", DType::f32, {1, T, H, D});
  ops::attention_prefill(run.stream, out_gqa, q, k, v);
  ops::attention_prefill(run.stream, out_mha, q, k_mha, v_mha);
  EXPECT_EQ(run.read(out_gqa), run.read(out_mha));
}

// Decode of sequence b is the last row of a causal prefill over its first seq_lens[b] positions,
// and cache rows past the length are never read (they hold huge values here).
TEST(AttentionReference, DecodeIsLastPrefillRowAndIgnoresCacheTail_S20_Len11_H4_Hkv2_D16) {
  const int64_t S = 20, len = 11, H = 4, Hkv = 2, D = 16;
  CaseRun run(ref(), 6);
  const Tensor q = run.normal(DType::f32, {1, H, D});
  std::vector<double> kc(size_t(S * Hkv * D)), vc(size_t(S * Hkv * D));
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (size_t i = 0; i < kc.size(); ++i) {
    const bool tail = int64_t(i) >= len * Hkv * D;
    kc[i] = tail ? 1e4 : normal(rng);
    vc[i] = tail ? 1e6 : normal(rng);
  }
  const Tensor k_cache = run.values(DType::f32, {1, S, Hkv, D}, kc);
  const Tensor v_cache = run.values(DType::f32, {1, S, Hkv, D}, vc);
  const Tensor seq_lens = run.ints({1}, {int32_t(len)});
  const Tensor out = run.output("out", DType::f32, {1, H, D});
  ops::attention_decode(run.stream, out, q, k_cache, v_cache, seq_lens);
  const Tensor out_prefill = run.output("prefill", DType::f32, {1, 1, H, D});
  ops::attention_prefill(run.stream, out_prefill, q.reshape({1, 1, H, D}), k_cache.slice(1, 0, len),
                         v_cache.slice(1, 0, len));
  EXPECT_EQ(run.read(out), run.read(out_prefill));
  for (double x : run.read(out)) EXPECT_LT(std::abs(x), 10.0);
}

// A sliding window of W keys: query i (position p = i + Tk − Tq) attends exactly as a lone
// non-causal query over the keys p − W + 1 … p (clipped at 0) would.
TEST(AttentionReference, SlidingWindowIsAttentionOverTheBand_Tq9_Tk14_H4_Hkv2_D16_W5) {
  const int64_t Tq = 9, Tk = 14, H = 4, Hkv = 2, D = 16, W = 5;
  CaseRun run(ref(), 8);
  const Tensor q = run.normal(DType::f32, {1, Tq, H, D});
  const Tensor k = run.normal(DType::f32, {1, Tk, Hkv, D});
  const Tensor v = run.normal(DType::f32, {1, Tk, Hkv, D});
  const Tensor out = run.output("out", DType::f32, {1, Tq, H, D});
  ops::attention_prefill(run.stream, out, q, k, v, {.window = W});
  const auto o = run.read(out);
  for (int64_t i = 0; i < Tq; ++i) {
    const int64_t p = i + Tk - Tq, first = std::max<int64_t>(0, p - W + 1);
    const Tensor row = run.output("row", DType::f32, {1, 1, H, D});
    ops::attention_prefill(run.stream, row, q.slice(1, i, i + 1), k.slice(1, first, p + 1), v.slice(1, first, p + 1),
                           {.causal = false});
    const auto r = run.read(row);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(at4(o, out, 0, i, h, d), r[size_t(h * D + d)]) << i << " " << h << " " << d;
  }
}

// A window of one key leaves each query its own key, with weight exactly 1: the output is the
// value row at the query's position, on the reference and the CPU kernel alike.
TEST(AttentionReference, WindowOneReturnsTheOwnValue_Tq6_Tk10_H4_Hkv1_D24) {
  for (Device* device : {&ref(), &cpu()}) {
    CaseRun run(*device, 9);
    const Tensor q = run.normal(DType::f32, {2, 6, 4, 24});
    const Tensor k = run.normal(DType::f32, {2, 10, 1, 24});
    const Tensor v = run.normal(DType::f32, {2, 10, 1, 24});
    const Tensor out = run.output("out", DType::f32, {2, 6, 4, 24});
    ops::attention_prefill(run.stream, out, q, k, v, {.window = 1});
    const auto o = run.read(out), vv = run.read(v);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t d = 0; d < 24; ++d)
            EXPECT_EQ(at4(o, out, b, i, h, d), at4(vv, v, b, i + 4, 0, d)) << device->name() << " " << b << " " << i;
  }
}

// Decode with a window of W reads cache positions len − W … len − 1 only: the same as decode over
// the cache view that starts there, with length W.
TEST(AttentionReference, DecodeWindowIsDecodeOverTheLastWPositions_S30_Len23_W6_H4_Hkv2_D16) {
  const int64_t S = 30, len = 23, W = 6, H = 4, Hkv = 2, D = 16;
  CaseRun run(ref(), 10);
  const Tensor q = run.normal(DType::f32, {1, H, D});
  const Tensor k_cache = run.normal(DType::f32, {1, S, Hkv, D});
  const Tensor v_cache = run.normal(DType::f32, {1, S, Hkv, D});
  const Tensor out = run.output("out", DType::f32, {1, H, D}), out_view = run.output("view", DType::f32, {1, H, D});
  ops::attention_decode(run.stream, out, q, k_cache, v_cache, run.ints({1}, {int32_t(len)}), {.window = W});
  ops::attention_decode(run.stream, out_view, q, k_cache.slice(1, len - W, S), v_cache.slice(1, len - W, S),
                        run.ints({1}, {int32_t(W)}));
  EXPECT_EQ(run.read(out), run.read(out_view));
}

// A rolling cache of S slots holds position p at slot p mod S. Filled by hand from a full key
// sequence (only its last S positions survive), prefill with rolling_keys and decode past S give
// exactly what the full sequence gives with the same window.
TEST(AttentionReference, RollingCacheIsTheFullSequenceWithTheWindow_Tk50_S12_W6_Tq7_H4_Hkv2_D16) {
  const int64_t Tk = 50, S = 12, W = 6, Tq = 7, H = 4, Hkv = 2, D = 16;
  CaseRun run(ref(), 13);
  const Tensor q = run.normal(DType::f32, {1, Tq, H, D});
  const Tensor k = run.normal(DType::f32, {1, Tk, Hkv, D}), v = run.normal(DType::f32, {1, Tk, Hkv, D});
  const Tensor k_ring = run.output("k_ring", DType::f32, {1, S, Hkv, D});
  const Tensor v_ring = run.output("v_ring", DType::f32, {1, S, Hkv, D});
  for (int64_t p = Tk - S; p < Tk; ++p) {
    ops::copy(run.stream, k_ring.slice(1, p % S, p % S + 1), k.slice(1, p, p + 1));
    ops::copy(run.stream, v_ring.slice(1, p % S, p % S + 1), v.slice(1, p, p + 1));
  }
  const Tensor out = run.output("out", DType::f32, {1, Tq, H, D}), full = run.output("full", DType::f32, {1, Tq, H, D});
  ops::attention_prefill(run.stream, out, q, k_ring, v_ring, {.window = W, .rolling_keys = Tk});
  ops::attention_prefill(run.stream, full, q, k, v, {.window = W});
  EXPECT_EQ(run.read(out), run.read(full));

  // Decode of the last query at length Tk, over the ring and over the full sequence.
  const Tensor q1 = q.slice(1, Tq - 1, Tq).reshape({1, H, D});
  const Tensor out1 = run.output("out1", DType::f32, {1, H, D}), full1 = run.output("full1", DType::f32, {1, H, D});
  ops::attention_decode(run.stream, out1, q1, k_ring, v_ring, run.ints({1}, {int32_t(Tk)}), {.window = W});
  ops::attention_decode(run.stream, full1, q1, k, v, run.ints({1}, {int32_t(Tk)}), {.window = W});
  EXPECT_EQ(run.read(out1), run.read(full1));
}

// ---- Bad input through the front end ------------------------------------------------------------

struct PrefillInputs {
  CaseRun run;
  Tensor out, q, k, v;
  PrefillInputs(Device& device, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, int64_t D_kv = 0)
      : run(device, 11) {
    q = run.normal(DType::f32, {2, Tq, H, D});
    k = run.normal(DType::f32, {2, Tk, Hkv, D_kv ? D_kv : D});
    v = run.normal(DType::f32, {2, Tk, Hkv, D_kv ? D_kv : D});
    out = run.output("out", DType::f32, {2, Tq, H, D});
  }
};

struct DecodeInputs {
  CaseRun run;
  Tensor out, q, k_cache, v_cache, seq_lens;
  DecodeInputs(Device& device, std::vector<int32_t> lens, int64_t S = 33) : run(device, 12) {
    const int64_t B = int64_t(lens.size());
    q = run.normal(DType::f32, {B, 8, 16});
    k_cache = run.normal(DType::f32, {B, S, 2, 16});
    v_cache = run.normal(DType::f32, {B, S, 2, 16});
    seq_lens = run.ints({B}, lens);
    out = run.output("out", DType::f32, {B, 8, 16});
  }
  void call() { ops::attention_decode(run.stream, out, q, k_cache, v_cache, seq_lens); }
  // The op with the step's own k and v (unless `append` is false), a rope and a q/k norm.
  void call_step(const std::optional<ops::RopeParams>& rope, const std::optional<ops::QkNorm>& norm = std::nullopt,
                 bool append = true) {
    const int64_t B = q.dim(0);
    const Tensor k_new = append ? run.normal(DType::f32, {B, 2, 16}) : Tensor{};
    const Tensor v_new = append ? run.normal(DType::f32, {B, 2, 16}) : Tensor{};
    ops::attention_decode(run.stream, out, q, k_cache, v_cache, seq_lens, {}, k_new, v_new, rope, norm);
  }
  // A q/k norm with weights of these sizes.
  ops::QkNorm qk_norm(int64_t q_weights, int64_t k_weights, bool whole = false, float eps = 1e-6f) {
    return {.q_weight = run.normal(DType::f32, {q_weights}), .k_weight = run.normal(DType::f32, {k_weights}), .eps = eps,
            .whole = whole};
  }
};

// ---- The GPU's merge of a group's splits -------------------------------------------------------

// The tensor-core decode kernel merges a group's splits in a cluster's shared memory (sm_90, at
// most 8 splits of a group with one head block) or through L2 and a ticket: each keeps every
// decode case's bound of the reference. (The two sum the splits in different groupings, so their
// bits may differ.) On sm_90 some case merges in a cluster; switched off, none does.
TEST(AttentionDecodeGpu, ClusterAndTicketMergesKeepTheBound) {
  expect_both_settings_keep_the_bound(
      attention_cases(), &gpu::OpTuning::decode_cluster_merge, "cluster", "ticket",
      [](const OpCase& c) { return c.op == "attention_decode"; }, 20, [](const Device& cuda) {
        return SwitchForms{"attention_decode: splits merged in a cluster", "attention_decode: splits merged by a ticket",
                           nvidia_at_least(cuda, 90)};
      });
}

// ---- The cpu kernel's threads ---------------------------------------------------------------

// The cpu's decode attention splits each sequence's keys into fixed chunks and hands the threads
// contiguous runs of (sequence, chunk, heads) tasks of equal work: the threads decide only who
// computes a chunk, never its bounds, so every thread count gives the same bits. Sequences of
// unequal lengths (empty chunks past the shorter ones), heads cut into runs at small thread
// counts, and more threads than tasks (one sequence of 5 keys: two tasks). Up to 4 threads: the
// sanitizer build's libomp reports leaks of its own when a process grows its team past that and
// back (2, 3, then 7).
TEST(AttentionDecodeCpu, EveryThreadCountGivesTheSameBits_B3_S300_Lens7_300_131_and_B1_Len5_H8_Hkv2_D64) {
  const int previous = cpu_threads();
  for (const std::vector<int32_t>& lens : {std::vector<int32_t>{7, 300, 131}, std::vector<int32_t>{5}}) {
    const int64_t B = int64_t(lens.size());
    // Each count against one thread on inputs of their own, the count first: a chunk it skipped
    // would leave the kernel's partial state of the previous call, which had other inputs.
    for (int threads : {2, 3, 4}) {
      std::vector<double> got[2];
      for (int round = 0; round < 2; ++round) {
        set_cpu_threads(round == 0 ? threads : 1);
        CaseRun run(cpu(), uint64_t(100 * B + threads));
        const Tensor q = run.normal(DType::bf16, {B, 8, 64});
        const Tensor k_cache = run.normal(DType::bf16, {B, 300, 2, 64});
        const Tensor v_cache = run.normal(DType::bf16, {B, 300, 2, 64});
        const Tensor seq_lens = run.ints({B}, lens);
        const Tensor out = run.output("out", DType::f32, {B, 8, 64});
        ops::attention_decode(run.stream, out, q, k_cache, v_cache, seq_lens);
        got[round] = run.read(out);
      }
      EXPECT_TRUE(std::all_of(got[1].begin(), got[1].end(), [](double x) { return std::isfinite(x); }));
      EXPECT_EQ(got[0], got[1]) << threads << " threads against one, batch " << B;
    }
  }
  set_cpu_threads(previous);
}

TEST(AttentionPrefillBadInput, HeadGrouping25Over2) {
  PrefillInputs in(cpu(), 4, 4, 25, 2, 64);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v); }, ErrorCode::shape_mismatch,
               {"attention_prefill", "25 query heads", "2 kv heads"});
}

TEST(AttentionPrefillBadInput, HeadDim64VsKv32) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 64, 32);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v); }, ErrorCode::shape_mismatch,
               {"attention_prefill", "D (from q)", "= 32", "expected 64"});
}

TEST(AttentionPrefillBadInput, CausalTk9BelowTq17) {
  PrefillInputs in(cpu(), 17, 9, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v); }, ErrorCode::shape_mismatch,
               {"attention_prefill", "Tq = 17", "Tk = 9"});
}

TEST(AttentionPrefillBadInput, NegativeScaleMinus1) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.scale = -1.0f}); },
               ErrorCode::invalid_argument, {"attention_prefill", "scale", "-1"});
}

TEST(AttentionPrefillBadInput, NegativeWindowMinus3) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.window = -3}); },
               ErrorCode::invalid_argument, {"attention_prefill", "window", "-3"});
}

TEST(AttentionPrefillBadInput, Window8WithoutCausal) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.causal = false, .window = 8}); },
               ErrorCode::invalid_argument, {"attention_prefill", "window = 8", "causal"});
}

TEST(AttentionPrefillBadInput, RollingKeysWithoutWindow) {
  PrefillInputs in(cpu(), 4, 10, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.rolling_keys = 40}); },
               ErrorCode::invalid_argument, {"attention_prefill", "rolling_keys = 40", "window 0"});
}

// The chunk's 4 queries and a window of 8 need 8 + 4 − 1 = 11 slots; the cache has 10.
TEST(AttentionPrefillBadInput, RollingCacheOf10SlotsForWindow8AndTq4) {
  PrefillInputs in(cpu(), 4, 10, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.window = 8, .rolling_keys = 40}); },
               ErrorCode::invalid_argument, {"attention_prefill", "window 8 + Tq 4 − 1 > S = 10"});
}

TEST(AttentionPrefillBadInput, NegativeRollingKeys) {
  PrefillInputs in(cpu(), 4, 10, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, in.k, in.v, {.window = 3, .rolling_keys = -1}); },
               ErrorCode::invalid_argument, {"attention_prefill", "rolling_keys", "-1"});
}

TEST(AttentionPrefillBadInput, OutOverlapsQ) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  expect_error([&] { ops::attention_prefill(in.run.stream, in.q, in.q, in.k, in.v); }, ErrorCode::aliasing,
               {"attention_prefill", "out", "overlaps q"});
}

TEST(AttentionPrefillBadInput, KOnRefDevice) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  CaseRun on_ref(ref(), 13);
  const Tensor k_ref = on_ref.normal(DType::f32, {2, 4, 4, 16});
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, in.q, k_ref, in.v); }, ErrorCode::device_mismatch,
               {"attention_prefill", "k is on device 'ref'", "'cpu'"});
}

TEST(AttentionPrefillBadInput, ZeroTq) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  const Tensor q0 = Tensor::view(in.q.data, &cpu(), DType::f32, {2, 0, 4, 16});
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, q0, in.k, in.v); }, ErrorCode::invalid_argument,
               {"attention_prefill", "q has dimension 1 of size 0"});
}

TEST(AttentionPrefillBadInput, OverflowShape2Pow62) {
  PrefillInputs in(cpu(), 4, 4, 4, 4, 16);
  const int64_t huge = int64_t(1) << 31;
  const Tensor q_huge = Tensor::view(in.q.data, &cpu(), DType::f32, {huge, huge, 4, 16});
  expect_error([&] { ops::attention_prefill(in.run.stream, in.out, q_huge, in.k, in.v); }, ErrorCode::invalid_argument,
               {"attention_prefill", "q has more elements than fit in 64 bits", "2147483648"});
}

TEST(AttentionDecodeBadInput, HeadGrouping25Over2) {
  DecodeInputs in(cpu(), {5});
  in.q = in.run.normal(DType::f32, {1, 25, 16});
  in.out = in.run.output("out25", DType::f32, {1, 25, 16});
  expect_error([&] { in.call(); }, ErrorCode::shape_mismatch, {"attention_decode", "25 query heads", "2 kv heads"});
}

TEST(AttentionDecodeBadInput, HeadDim16VsCache8) {
  DecodeInputs in(cpu(), {5});
  in.k_cache = in.run.normal(DType::f32, {1, 33, 2, 8});
  in.v_cache = in.run.normal(DType::f32, {1, 33, 2, 8});
  expect_error([&] { in.call(); }, ErrorCode::shape_mismatch, {"attention_decode", "k_cache", "D (from q)", "= 8"});
}

TEST(AttentionDecodeBadInput, SeqLensDtypeF32) {
  DecodeInputs in(cpu(), {5, 6});
  in.seq_lens = in.run.values(DType::f32, {2}, {5, 6});
  expect_error([&] { in.call(); }, ErrorCode::dtype_mismatch, {"attention_decode", "seq_lens has dtype f32", "i32"});
}

TEST(AttentionDecodeBadInput, SeqLensShape3ForB2) {
  DecodeInputs in(cpu(), {5, 6});
  in.seq_lens = in.run.ints({3}, {5, 6, 7});
  expect_error([&] { in.call(); }, ErrorCode::shape_mismatch, {"attention_decode", "seq_lens", "= 3", "expected 2"});
}

TEST(AttentionDecodeBadInput, SeqLensRank2) {
  DecodeInputs in(cpu(), {5, 6});
  in.seq_lens = in.run.ints({2, 1}, {5, 6});
  expect_error([&] { in.call(); }, ErrorCode::shape_mismatch, {"attention_decode", "seq_lens must have rank 1"});
}

// The lengths live in device memory, so host backends check them while running.
void expect_bad_seq_len(const char* backend, int32_t bad) {
  DecodeInputs in(Device::open(backend), {4, bad, 33});
  expect_error([&] { in.call(); }, ErrorCode::invalid_argument,
               {"attention_decode", "seq_lens[1] = " + std::to_string(bad), "[1, 33]"});
}
TEST(AttentionDecodeBadInput, SeqLen0AtB1_S33_cpu) { expect_bad_seq_len("cpu", 0); }
TEST(AttentionDecodeBadInput, SeqLen34AtB1_S33_cpu) { expect_bad_seq_len("cpu", 34); }
TEST(AttentionDecodeBadInput, SeqLen0AtB1_S33_ref) { expect_bad_seq_len("ref", 0); }
TEST(AttentionDecodeBadInput, SeqLen34AtB1_S33_ref) { expect_bad_seq_len("ref", 34); }

// A window longer than the cache cannot roll: lengths past S are still an error (a window the
// cache holds lets them through: RollingCacheIsTheFullSequenceWithTheWindow).
void expect_bad_seq_len_window(const char* backend) {
  DecodeInputs in(Device::open(backend), {4, 40, 33});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {.window = 34}); },
               ErrorCode::invalid_argument, {"attention_decode", "seq_lens[1] = 40", "[1, 33]"});
}
TEST(AttentionDecodeBadInput, SeqLen40AtS33WithWindow34_cpu) { expect_bad_seq_len_window("cpu"); }
TEST(AttentionDecodeBadInput, SeqLen40AtS33WithWindow34_ref) { expect_bad_seq_len_window("ref"); }

TEST(AttentionDecodeBadInput, OutOverlapsKCache) {
  DecodeInputs in(cpu(), {5});
  in.out = Tensor::view(in.k_cache.data, &cpu(), DType::f32, {1, 8, 16});
  expect_error([&] { in.call(); }, ErrorCode::aliasing, {"attention_decode", "out", "overlaps k_cache"});
}

// k_new and v_new are [B, Hkv, D] of the step, both or neither.
TEST(AttentionDecodeBadInput, KNewHeads3ForHkv2) {
  DecodeInputs in(cpu(), {5});
  const Tensor k_new = in.run.normal(DType::f32, {1, 3, 16}), v_new = in.run.normal(DType::f32, {1, 3, 16});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {}, k_new, v_new); },
               ErrorCode::shape_mismatch, {"attention_decode", "k_new", "Hkv (from k_cache)", "= 3"});
}

TEST(AttentionDecodeBadInput, KNewWithoutVNew) {
  DecodeInputs in(cpu(), {5});
  const Tensor k_new = in.run.normal(DType::f32, {1, 2, 16});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {}, k_new); },
               ErrorCode::invalid_argument, {"attention_decode", "v_new is missing"});
}

TEST(AttentionDecodeBadInput, KNewOverlapsKCache) {
  DecodeInputs in(cpu(), {5});
  const Tensor k_new = Tensor::view(in.k_cache.data, &cpu(), DType::f32, {1, 2, 16});
  const Tensor v_new = in.run.normal(DType::f32, {1, 2, 16});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {}, k_new, v_new); },
               ErrorCode::aliasing, {"attention_decode", "k_cache", "overlaps k_new"});
}

TEST(AttentionDecodeBadInput, NegativeScaleMinus2) {
  DecodeInputs in(cpu(), {5});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {.scale = -2.0f}); },
               ErrorCode::invalid_argument, {"attention_decode", "scale", "-2"});
}

TEST(AttentionDecodeBadInput, NegativeWindowMinus1) {
  DecodeInputs in(cpu(), {5});
  expect_error([&] { ops::attention_decode(in.run.stream, in.out, in.q, in.k_cache, in.v_cache, in.seq_lens, {.window = -1}); },
               ErrorCode::invalid_argument, {"attention_decode", "window", "-1"});
}

TEST(AttentionDecodeBadInput, VCacheOnRefDevice) {
  DecodeInputs in(cpu(), {5});
  CaseRun on_ref(ref(), 14);
  in.v_cache = on_ref.normal(DType::f32, {1, 33, 2, 16});
  expect_error([&] { in.call(); }, ErrorCode::device_mismatch, {"attention_decode", "v_cache is on device 'ref'"});
}

TEST(AttentionDecodeBadInput, ZeroHeads) {
  DecodeInputs in(cpu(), {5});
  in.q = Tensor::view(in.q.data, &cpu(), DType::f32, {1, 0, 16});
  expect_error([&] { in.call(); }, ErrorCode::invalid_argument, {"attention_decode", "q has dimension 1 of size 0"});
}

// kv_append's starts live in device memory too: host backends check each while running. A plain
// cache must hold start + T positions; a rolling one takes any start ≥ 0.
void expect_bad_start(const char* backend, int32_t bad, bool rolling) {
  CaseRun run(Device::open(backend), 14);
  const Tensor k_cache = run.normal(DType::f32, {2, 20, 2, 16}), v_cache = run.normal(DType::f32, {2, 20, 2, 16});
  const Tensor k = run.normal(DType::f32, {2, 3, 2, 16}), v = run.normal(DType::f32, {2, 3, 2, 16});
  expect_error([&] { ops::kv_append(run.stream, k_cache, v_cache, k, v, run.ints({2}, {0, bad}), rolling); },
               ErrorCode::invalid_argument, {"kv_append", "start[1] = " + std::to_string(bad), "S = 20"});
}
TEST(KvAppendBadInput, Start18WithT3InS20_cpu) { expect_bad_start("cpu", 18, false); }
TEST(KvAppendBadInput, Start18WithT3InS20_ref) { expect_bad_start("ref", 18, false); }
TEST(KvAppendBadInput, RollingStartMinus1_cpu) { expect_bad_start("cpu", -1, true); }
TEST(KvAppendBadInput, RollingStartMinus1_ref) { expect_bad_start("ref", -1, true); }

TEST(AttentionDecodeBadInput, RopeWithoutKNew) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(ops::RopeParams{}, std::nullopt, false); }, ErrorCode::invalid_argument,
               {"attention_decode", "rope", "needs k_new"});
}

// The positions of decode's rope are the lengths: a positions tensor or an offset is refused.
TEST(AttentionDecodeBadInput, RopeWithPositionOffset3) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(ops::RopeParams{.position_offset = 3}); }, ErrorCode::invalid_argument,
               {"attention_decode", "seq_lens − 1", "offset 3"});
}

TEST(AttentionDecodeBadInput, RopeRotaryDim7) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(ops::RopeParams{.rotary_dim = 7}); }, ErrorCode::invalid_argument, {"rotary_dim", "7"});
}

// qk_norm: weights of D (each head) or of the heads' D together (whole), applied to k_new too.
TEST(AttentionDecodeBadInput, QkNormWithoutKNew) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(std::nullopt, in.qk_norm(16, 16), false); }, ErrorCode::invalid_argument,
               {"attention_decode", "qk_norm", "needs k_new"});
}

TEST(AttentionDecodeBadInput, QkNormQWeightOf8ForD16) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(std::nullopt, in.qk_norm(8, 16)); }, ErrorCode::shape_mismatch,
               {"attention_decode", "qk_norm.q_weight", "D (each head)", "= 8"});
}

TEST(AttentionDecodeBadInput, QkNormWholeKWeightOf16ForHkv2D16) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(std::nullopt, in.qk_norm(8 * 16, 16, true)); }, ErrorCode::shape_mismatch,
               {"attention_decode", "qk_norm.k_weight", "heads · D", "= 16"});
}

TEST(AttentionDecodeBadInput, QkNormEpsMinus1) {
  DecodeInputs in(cpu(), {5, 6});
  expect_error([&] { in.call_step(std::nullopt, in.qk_norm(16, 16, false, -1)); }, ErrorCode::invalid_argument,
               {"attention_decode", "qk_norm.eps = -1"});
}

// A whole-projection norm reads a token's heads as one row: q's heads must be adjacent.
TEST(AttentionDecodeBadInput, QkNormWholeOverHeadsTwoDApart) {
  DecodeInputs in(cpu(), {5, 6});
  in.q = in.run.normal(DType::f32, {2, 8, 32}).slice(2, 0, 16);  // [q_h ; gate_h] per head
  expect_error([&] { in.call_step(std::nullopt, in.qk_norm(8 * 16, 2 * 16, true)); }, ErrorCode::invalid_argument,
               {"attention_decode", "qk_norm.whole", "q's heads must be adjacent", "stride 32"});
}

TEST(AttentionDecodeBadInput, OverflowCacheShape2Pow62) {
  DecodeInputs in(cpu(), {5});
  const int64_t huge = int64_t(1) << 31;
  in.k_cache = Tensor::view(in.k_cache.data, &cpu(), DType::f32, {1, huge, huge, 16});
  expect_error([&] { in.call(); }, ErrorCode::invalid_argument, {"attention_decode", "k_cache has more elements"});
}

}  // namespace
}  // namespace ding::testing
