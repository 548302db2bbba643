// attention_prefill and attention_decode cases: MHA / GQA / MQA, odd head dims, causal and
// not, chunked prefill (Tk > Tq), explicit and default scale, f32/f16/bf16 and f32 queries over
// a bf16 cache, and k/v (and q) that are strided views into larger cache / fused-qkv tensors;
// sliding windows shorter than the keys, as long as them, and of one key; rolling caches (a
// window's cache of S slots, position p at slot p mod S) for prefill, decode and kv_append.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "ding/ops/attention.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Both sides read identical rounded inputs, so the gap is the kernel's f32 accumulation (dot
// products of D terms, sums over Tk weights, a polynomial exp; ~1e-7 relative) plus the final
// rounding to the output dtype. For f16/bf16 outputs that error only shows where it moves a value
// across a rounding boundary: a 1-ulp flip costs ulp²/N of NMSE over N elements (12·rounding_nmse/N).
// The f32 error is ~1e-6 of the output's scale where D is large (a 300-term dot feeds an exp), so
// about 0.2% of the outputs sit close enough to a midpoint to flip, and a flip on an output above
// the mean square costs more than one unit: the count's tail over 600 seeds reached 9 units on a
// 5400-output f16 case. Allow 8 flips plus 0.3% of the elements, ≥ 2.5× that tail.
double tolerance(DType out, int64_t elements) {
  if (out == DType::f32) return 5e-12;  // measured ≤ 2.2e-13 (S = 1100 decode), ≤ 3e-14 elsewhere
  return flip_nmse(out, elements, 1.0, 8) + 36e-3 * rounding_nmse(out);
}

const char* tolerance_reason(DType out) {
  switch (out) {
    case DType::f32: return "f32 accumulation of D-term dots and Tk-term sums with a ~2-ulp exp; measured <= 2.2e-13";
    case DType::f16: return "f16 output: f32 accumulation error flips a few roundings by 1 ulp; bound 8 + 0.3% flips";
    default: return "bf16 output: f32 accumulation error flips a few roundings by 1 ulp; bound 8 + 0.3% flips";
  }
}

std::string dtype_tag(DType q, DType kv, DType out) {
  if (q == kv && kv == out) return std::string(dtype_name(q));
  return fmt::format("q{}_kv{}_out{}", dtype_name(q), dtype_name(kv), dtype_name(out));
}

struct Prefill {
  int64_t B = 1, Tq = 17, Tk = 17, H = 4, Hkv = 4, D = 64;
  bool causal = true;
  float scale = 0;  // 0 = 1/√D
  DType q = DType::f32, kv = DType::f32, out = DType::f32;
  bool views = false;  // q from a fused [B, Tq, H + 2, D]; k/v from a [B, Tk + 5, 2·Hkv, D] cache
  bool in_tests = true;
  int64_t window = 0;
  int64_t slots = 0;  // > 0: k and v are rolling caches of this many slots holding Tk positions
};

OpCase prefill_case(const Prefill& p) {
  std::string name = fmt::format("attention_prefill/B{}_Tq{}_Tk{}_H{}_Hkv{}_D{}_{}_{}", p.B, p.Tq, p.Tk, p.H, p.Hkv,
                                 p.D, dtype_tag(p.q, p.kv, p.out), p.causal ? "causal" : "full");
  if (p.scale > 0) name += fmt::format("_scale{}", p.scale);
  if (p.views) name += "_views";
  if (p.window > 0) name += fmt::format("_window{}", p.window);
  if (p.slots > 0) name += fmt::format("_rolling{}", p.slots);
  OpCase c{"attention_prefill", name, tolerance(p.out, p.B * p.Tq * p.H * p.D), tolerance_reason(p.out), nullptr, p.in_tests};
  c.build = [p](CaseRun& run) {
    Tensor q, k, v;
    if (p.views) {
      q = run.normal(p.q, {p.B, p.Tq, p.H + 2, p.D}).slice(2, 1, p.H + 1);
      const Tensor cache = run.normal(p.kv, {p.B, p.Tk + 5, 2 * p.Hkv, p.D}).slice(1, 0, p.Tk);
      k = cache.slice(2, 0, p.Hkv);
      v = cache.slice(2, p.Hkv, 2 * p.Hkv);
    } else {
      const int64_t S = p.slots > 0 ? p.slots : p.Tk;
      q = run.normal(p.q, {p.B, p.Tq, p.H, p.D});
      k = run.normal(p.kv, {p.B, S, p.Hkv, p.D});
      v = run.normal(p.kv, {p.B, S, p.Hkv, p.D});
    }
    const Tensor out = run.output("out", p.out, {p.B, p.Tq, p.H, p.D});
    const ops::AttentionParams params{p.scale, p.causal, p.window, p.slots > 0 ? p.Tk : 0};
    run.launch = [=](Stream& s) { ops::attention_prefill(s, out, q, k, v, params); };
    run.cost = ops::cost(ops::AttentionPrefillArgs{out, q, k, v, params});
  };
  return c;
}

struct Decode {
  int64_t B = 1, S = 33, H = 4, Hkv = 4, D = 64;
  float scale = 0;
  DType q = DType::f32, kv = DType::f32, out = DType::f32;
  bool views = false;  // q from a fused [B, H + 2, D]; caches from one [B, S + 3, 2·Hkv, D] tensor
  bool full = false;   // every seq_len = S (bench); otherwise 1, random in [1, S] …, S
  int32_t len = 0;     // > 0: every seq_len = len (a short sequence in a long cache)
  // k_new and v_new of this dtype (views into a fused qkv row, as the decoder passes them) stored
  // at seq_lens − 1 by the op; the caches are then in-out and compared whole and exactly.
  std::optional<DType> append;
  bool in_tests = true;
  int64_t window = 0;
  int32_t max_len = 0;  // > S: lengths up to this (a rolling cache: window ≤ S)
  // With append: rope applied by the op to q and k_new (rotary dims, 0 = D; interleaved pairs;
  // a llama3-scaled inv_freq table instead of theta).
  bool rope = false;
  int64_t rotary_dim = 0;
  bool interleaved = false, table = false;
  // With append: q and k_new RMS-normalised by the op first (qk_norm), each head, or a token's
  // whole projection; the weights of norm_w's dtype (none: q's).
  enum class QkNorm { none, per_head, whole } qk_norm = QkNorm::none;
  std::optional<DType> norm_w;
  // The op told that seq_lens and the cache's rows but the newest come from earlier ops
  // (cache_from_earlier_op: true here, where they are uploaded).
  bool settled = false;
};

OpCase decode_case(const Decode& p) {
  std::string name = fmt::format("attention_decode/B{}_S{}_H{}_Hkv{}_D{}_{}", p.B, p.S, p.H, p.Hkv, p.D,
                                 dtype_tag(p.q, p.kv, p.out));
  if (p.scale > 0) name += fmt::format("_scale{}", p.scale);
  if (p.views) name += "_views";
  if (p.full) name += "_full";
  if (p.len > 0) name += fmt::format("_len{}", p.len);
  if (p.append) name += fmt::format("_append{}", dtype_name(*p.append));
  if (p.window > 0) name += fmt::format("_window{}", p.window);
  if (p.max_len > 0) name += fmt::format("_rolling_len{}", p.max_len);
  if (p.rope)
    name += fmt::format("_rope{}{}{}", p.rotary_dim > 0 ? fmt::format("_R{}", p.rotary_dim) : "",
                        p.interleaved ? "_interleaved" : "", p.table ? "_llama3" : "");
  if (p.qk_norm != Decode::QkNorm::none)
    name += fmt::format("_qknorm{}{}", p.qk_norm == Decode::QkNorm::whole ? "_whole" : "",
                        p.norm_w ? fmt::format("_w{}", dtype_name(*p.norm_w)) : "");
  if (p.settled) name += "_settled";
  OpCase c{"attention_decode", name, tolerance(p.out, p.B * p.H * p.D), tolerance_reason(p.out), nullptr, p.in_tests};
  c.build = [p](CaseRun& run) {
    Tensor q, k, v, k_new, v_new;
    if (p.append) {
      // Written by the op: compared exactly (a copy, rounded the same on both sides); a rotated
      // or normalised key by NMSE (the kernels compute in f32, the reference in double).
      const Compare written = p.rope || p.qk_norm != Decode::QkNorm::none ? Compare{} : Compare{Compare::exact};
      q = run.normal(p.q, {p.B, p.H, p.D});
      k = run.inout("k_cache", p.kv, {p.B, p.S, p.Hkv, p.D}, 1.0, written);
      v = run.inout("v_cache", p.kv, {p.B, p.S, p.Hkv, p.D}, 1.0, {Compare::exact});
      const Tensor qkv = run.normal(*p.append, {p.B, p.H + 2 * p.Hkv, p.D});
      k_new = qkv.slice(1, p.H, p.H + p.Hkv);
      v_new = qkv.slice(1, p.H + p.Hkv, p.H + 2 * p.Hkv);
    } else if (p.views) {
      q = run.normal(p.q, {p.B, p.H + 2, p.D}).slice(1, 2, p.H + 2);
      const Tensor cache = run.normal(p.kv, {p.B, p.S + 3, 2 * p.Hkv, p.D}).slice(1, 0, p.S);
      k = cache.slice(2, 0, p.Hkv);
      v = cache.slice(2, p.Hkv, 2 * p.Hkv);
    } else {
      q = run.normal(p.q, {p.B, p.H, p.D});
      k = run.normal(p.kv, {p.B, p.S, p.Hkv, p.D});
      v = run.normal(p.kv, {p.B, p.S, p.Hkv, p.D});
    }
    // Lengths: the extremes 1 and S, and random ones between (drawn from the case's seeded rng,
    // so every device sees the same).
    std::vector<int32_t> lens(size_t(p.B), p.len > 0 ? p.len : int32_t(p.S));
    if (!p.full && p.len == 0) {
      const int32_t longest = p.max_len > 0 ? p.max_len : int32_t(p.S);
      std::uniform_int_distribution<int32_t> any(1, longest);
      for (int32_t& len : lens) len = any(run.rng);
      if (p.B >= 2) lens[0] = 1;
      if (p.B >= 3) lens[size_t(p.B - 1)] = longest;
    }
    const Tensor seq_lens = run.ints({p.B}, lens);
    const Tensor out = run.output("out", p.out, {p.B, p.H, p.D});
    const ops::AttentionParams params{p.scale, true, p.window};
    std::optional<ops::RopeParams> rope;
    if (p.rope) {
      rope = ops::RopeParams{.layout = p.interleaved ? ops::RopeLayout::interleaved : ops::RopeLayout::neox,
                             .theta = 500000.0f, .rotary_dim = p.rotary_dim};
      if (p.table) {
        const int64_t R = p.rotary_dim > 0 ? p.rotary_dim : p.D;
        const std::vector<float> table = ops::rope_inv_frequencies(
            500000.0, R, {.kind = ops::RopeScalingKind::llama3, .factor = 8, .original_max_position = 64});
        rope->inv_freq = run.values(DType::f32, {R / 2}, std::vector<double>(table.begin(), table.end()));
      }
    }
    std::optional<ops::QkNorm> qk_norm;
    if (p.qk_norm != Decode::QkNorm::none) {
      const bool whole = p.qk_norm == Decode::QkNorm::whole;
      const DType w = p.norm_w.value_or(p.q);
      qk_norm = ops::QkNorm{.q_weight = run.normal(w, {whole ? p.H * p.D : p.D}),
                            .k_weight = run.normal(w, {whole ? p.Hkv * p.D : p.D}), .eps = 1e-5f, .whole = whole};
    }
    const ops::AttentionDecodeArgs args{.out = out, .q = q, .k_cache = k, .v_cache = v, .seq_lens = seq_lens,
                                        .params = params, .k_new = k_new, .v_new = v_new, .rope = rope,
                                        .qk_norm = qk_norm, .cache_from_earlier_op = p.settled};
    run.launch = [=](Stream& s) { ops::attention_decode(s, args); };
    run.cost = ops::cost(args);
  };
  return c;
}

struct Append {
  int64_t B = 2, S = 40, T = 1, Hkv = 4, D = 64;
  DType x = DType::f32, cache = DType::f32;
  bool in_tests = true;
  int32_t max_start = 0;  // > 0: a rolling cache, starts up to this (past S: written at p mod S)
};

// k and v are views into a fused qkv row [B, T, 3·Hkv, D] (how the decoder produces them); the
// caches are compared whole, so a write outside the appended rows shows as a mismatch.
OpCase append_case(const Append& p) {
  const std::string name = fmt::format("kv_append/B{}_S{}_T{}_Hkv{}_D{}_{}", p.B, p.S, p.T, p.Hkv, p.D,
                                       p.x == p.cache ? std::string(dtype_name(p.x))
                                                      : fmt::format("x{}_cache{}", dtype_name(p.x), dtype_name(p.cache))) +
                           (p.max_start > 0 ? fmt::format("_rolling_start{}", p.max_start) : std::string());
  OpCase c{"kv_append", name, kExactTolerance, "a copy: both sides round the same value to nearest even: compared exactly",
           nullptr, p.in_tests};
  c.build = [p](CaseRun& run) {
    const Tensor qkv = run.normal(p.x, {p.B, p.T, 3 * p.Hkv, p.D});
    const Tensor k = qkv.slice(2, p.Hkv, 2 * p.Hkv), v = qkv.slice(2, 2 * p.Hkv, 3 * p.Hkv);
    const Tensor k_cache = run.inout("k_cache", p.cache, {p.B, p.S, p.Hkv, p.D}, 1.0, {Compare::exact});
    const Tensor v_cache = run.inout("v_cache", p.cache, {p.B, p.S, p.Hkv, p.D}, 1.0, {Compare::exact});
    // Starts: the first and the last position that fit, and random ones between.
    const int32_t last = p.max_start > 0 ? p.max_start : int32_t(p.S - p.T);
    std::uniform_int_distribution<int32_t> any(0, last);
    std::vector<int32_t> starts(size_t(p.B));
    for (int32_t& s : starts) s = any(run.rng);
    starts[0] = 0;
    if (p.B >= 2) starts[size_t(p.B - 1)] = last;
    const Tensor start = run.ints({p.B}, starts);
    const bool rolling = p.max_start > 0;
    run.launch = [=](Stream& s) { ops::kv_append(s, k_cache, v_cache, k, v, start, rolling); };
    run.cost = ops::cost(ops::KvAppendArgs{k_cache, v_cache, k, v, start, rolling});
  };
  return c;
}

}  // namespace

std::vector<OpCase> attention_cases() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  std::vector<OpCase> cases;
  auto prefill = [&](Prefill p) { cases.push_back(prefill_case(p)); };
  auto decode = [&](Decode p) { cases.push_back(decode_case(p)); };

  // Prefill, Tq = Tk: MHA over the sequence lengths, then GQA / MQA, head dims, dtypes.
  for (int64_t T : {1, 17, 64}) prefill({.Tq = T, .Tk = T});
  prefill({.B = 2, .Tq = 17, .Tk = 17, .H = 8, .Hkv = 2, .D = 128});
  prefill({.Tq = 17, .Tk = 17, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16});
  prefill({.Tq = 17, .Tk = 17, .H = 8, .Hkv = 2, .D = 128, .q = f16, .kv = f16, .out = f16});
  prefill({.Tq = 64, .Tk = 64, .H = 4, .Hkv = 1, .D = 80});
  prefill({.Tq = 17, .Tk = 17, .H = 3, .Hkv = 3, .D = 7});
  prefill({.Tq = 17, .Tk = 17, .H = 3, .Hkv = 1, .D = 7, .q = bf16, .kv = bf16, .out = bf16});
  prefill({.Tq = 64, .Tk = 64, .H = 2, .Hkv = 2, .D = 64, .q = f16, .kv = f16, .out = f16});
  prefill({.Tq = 17, .Tk = 17, .H = 8, .Hkv = 2, .D = 64, .scale = 0.3f});
  prefill({.Tq = 17, .Tk = 17, .H = 4, .Hkv = 4, .D = 64, .causal = false});
  prefill({.Tq = 17, .Tk = 17, .H = 8, .Hkv = 2, .D = 64, .q = f32, .kv = bf16, .out = f32});
  // Groups that are not a multiple of 4: the CPU takes rows over one kv head 4 at a time and the
  // rest one by one (prefill: 5 positions × 3 heads a task; decode: 7 heads a kv head).
  prefill({.Tq = 17, .Tk = 40, .H = 6, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  decode({.B = 2, .S = 300, .H = 14, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  // Chunked prefill: a few new queries over a cached prefix, through cache views.
  prefill({.Tq = 5, .Tk = 37, .H = 8, .Hkv = 2, .D = 64, .views = true});
  prefill({.B = 2, .Tq = 5, .Tk = 37, .H = 8, .Hkv = 2, .D = 64, .causal = false, .views = true});
  prefill({.Tq = 17, .Tk = 9, .H = 4, .Hkv = 1, .D = 64, .causal = false});  // non-causal allows Tk < Tq
  prefill({.B = 2, .Tq = 17, .Tk = 50, .H = 4, .Hkv = 4, .D = 80, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  prefill({.Tq = 3, .Tk = 40, .H = 8, .Hkv = 1, .D = 128, .scale = 0.05f, .q = f32, .kv = bf16, .out = f32,
           .views = true});
  prefill({.Tq = 17, .Tk = 17, .H = 3, .Hkv = 3, .D = 7, .causal = false, .q = f16, .kv = f16, .out = f32,
           .views = true});
  // Tile edges of the GPU kernel (64 query rows × 32 keys for D ≤ 128, 32 × 32 for D ≤ 256, a
  // generic one-row-per-block path above): one row past a tile, one query over several key
  // tiles, D = 256 with chunked causal rows over two query tiles, D past the largest tile.
  prefill({.Tq = 65, .Tk = 65, .H = 2, .Hkv = 1, .D = 64});
  prefill({.Tq = 1, .Tk = 130, .H = 4, .Hkv = 2, .D = 128});
  prefill({.Tq = 40, .Tk = 75, .H = 2, .Hkv = 1, .D = 256});
  prefill({.Tq = 40, .Tk = 75, .H = 2, .Hkv = 2, .D = 256, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  prefill({.Tq = 9, .Tk = 12, .H = 2, .Hkv = 1, .D = 300});
  prefill({.Tq = 9, .Tk = 12, .H = 2, .Hkv = 1, .D = 300, .causal = false, .q = f16, .kv = f16, .out = f16});
  prefill({.B = 2, .Tq = 33, .Tk = 70, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  // The tensor-core kernel (16-bit q/k/v, bf16 out, D = 64 or 128; 64 rows × 64 keys): two
  // query tiles over three key tiles, one row, fewer keys than rows, f16 inputs; then f16 outputs,
  // which stay on the SIMT kernel, over the same tiles.
  prefill({.Tq = 65, .Tk = 130, .H = 2, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  prefill({.Tq = 1, .Tk = 130, .H = 4, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16});
  prefill({.Tq = 70, .Tk = 9, .H = 2, .Hkv = 1, .D = 64, .causal = false, .q = bf16, .kv = bf16, .out = bf16});
  prefill({.B = 2, .Tq = 100, .Tk = 100, .H = 4, .Hkv = 1, .D = 128, .q = f16, .kv = f16, .out = bf16, .views = true});
  prefill({.Tq = 65, .Tk = 130, .H = 2, .Hkv = 1, .D = 64, .q = f16, .kv = f16, .out = f16});

  // Decode: cache sizes 1, 33, 300 and one long enough for several splits, varied lengths.
  decode({.B = 1, .S = 1});
  decode({.B = 3, .S = 33});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128});
  decode({.B = 1, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16});
  decode({.B = 3, .S = 33, .H = 4, .Hkv = 1, .D = 80, .q = f16, .kv = f16, .out = f16});
  decode({.B = 3, .S = 33, .H = 3, .Hkv = 3, .D = 7});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 1, .D = 7, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 64, .scale = 0.3f, .views = true});
  decode({.B = 3, .S = 33, .H = 8, .Hkv = 2, .D = 128, .q = f32, .kv = bf16, .out = f32, .views = true});
  decode({.B = 3, .S = 1100, .H = 4, .Hkv = 2, .D = 64});
  decode({.B = 1, .S = 1100, .H = 4, .Hkv = 1, .D = 80, .q = f32, .kv = f16, .out = f32, .full = true});
  // GPU splits: many splits with only the first few (or one key) in use; head groups of 3
  // (an idle head slot), 12 (three blocks per kv head); D = 20 (no 16-byte loads, 4 lanes per
  // key); D past the 256 the split kernel takes.
  decode({.B = 1, .S = 3000, .H = 2, .Hkv = 1, .D = 64, .len = 100});
  decode({.B = 1, .S = 3000, .H = 2, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .len = 1});
  decode({.B = 2, .S = 200, .H = 12, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  decode({.B = 3, .S = 77, .H = 6, .Hkv = 2, .D = 80, .q = f16, .kv = f16, .out = f16, .views = true});
  decode({.B = 3, .S = 150, .H = 4, .Hkv = 2, .D = 20, .views = true});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300});
  // The in-kernel merge of the splits at the bench's head shapes over a 2048-key cache (several
  // splits on any GPU; on an H100's tensor-core kernel 5 for B = 3 and 16 for the GQA B = 1, on
  // the SIMT kernel 7 and 32): gpt2-xl heads with
  // lengths 1, random and 2048 (one, some and all splits with keys), the GQA group of 4 with
  // every split in use, then with random lengths through views.
  decode({.B = 3, .S = 2048, .H = 25, .Hkv = 25, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  decode({.B = 1, .S = 2048, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .full = true});
  decode({.B = 3, .S = 2048, .H = 32, .Hkv = 8, .D = 128, .q = f16, .kv = f16, .out = f16, .views = true});
  // Few splits of many steps (the GPU kernel double-buffers K/V in registers across steps):
  // 128 groups of one head (about 4 splits of ~20 steps on an H100, the last step partial), and
  // f32 pairs of heads (2 keys per key group and step).
  decode({.B = 2, .S = 5000, .H = 64, .Hkv = 64, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .len = 4999});
  decode({.B = 2, .S = 3000, .H = 32, .Hkv = 16, .D = 128});

  // The GPU's tensor-core decode (16-bit q/k/v of one dtype, bf16 out, D = 64 or 128; query
  // heads as the rows of 16-row tiles): a group of 32 (two blocks of 16 heads per kv head), a
  // group of 3 (rows past the group idle), f16 operands (two parts of P per mma), strided views,
  // and several 64-key tiles per split with the last one partial.
  decode({.B = 2, .S = 300, .H = 32, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  decode({.B = 3, .S = 200, .H = 6, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16});
  decode({.B = 3, .S = 700, .H = 12, .Hkv = 4, .D = 128, .q = f16, .kv = f16, .out = bf16});
  decode({.B = 3, .S = 150, .H = 6, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .views = true});
  decode({.B = 1, .S = 1000, .H = 2, .Hkv = 1, .D = 64, .q = f16, .kv = f16, .out = bf16, .len = 999});

  // Decode with the step's k and v appended by the op: the fused GPU path (new rows of the cache's
  // type: MHA at gpt2's head size, GQA), converting (f32 rows into a bf16 cache: a kv_append
  // launch first on GPUs), odd and large head dims (the generic kernel).
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 8, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .append = bf16});
  decode({.B = 3, .S = 33, .H = 8, .Hkv = 2, .D = 128, .q = f16, .kv = f16, .out = f16, .append = f16});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16});
  decode({.B = 3, .S = 1100, .H = 4, .Hkv = 2, .D = 64, .append = f32});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .q = f32, .kv = bf16, .out = f32, .append = f32});
  decode({.B = 3, .S = 33, .H = 3, .Hkv = 3, .D = 7, .append = f32});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300, .q = bf16, .kv = bf16, .out = bf16, .append = bf16});
  // The seed benchmark's decode step with its append (bench only).
  for (DType t : {bf16})
    decode({.S = 512, .H = 25, .Hkv = 25, .D = 64, .q = t, .kv = t, .out = t, .len = 384, .append = t, .in_tests = false});

  // Sliding windows. Prefill: shorter than the keys (MHA, GQA, MQA; chunked over cache views),
  // as long as them and longer (the same as none), one key (each query returns its own value);
  // on the GPU the SIMT tiles (D ≤ 256, a window inside one tile and across several), the
  // generic row kernel (D = 300) and the tensor-core kernel (16-bit in, bf16 out: 64-row tiles
  // whose band skips whole 64-key tiles).
  prefill({.Tq = 17, .Tk = 17, .H = 4, .Hkv = 4, .D = 64, .window = 5});
  prefill({.B = 2, .Tq = 64, .Tk = 64, .H = 8, .Hkv = 2, .D = 128, .window = 16});
  prefill({.Tq = 40, .Tk = 75, .H = 4, .Hkv = 1, .D = 64, .q = f16, .kv = f16, .out = f16, .window = 7});
  prefill({.Tq = 17, .Tk = 17, .H = 4, .Hkv = 2, .D = 64, .window = 17});
  prefill({.Tq = 17, .Tk = 17, .H = 4, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .window = 1000});
  prefill({.Tq = 17, .Tk = 37, .H = 4, .Hkv = 1, .D = 64, .window = 1});
  prefill({.B = 2, .Tq = 5, .Tk = 37, .H = 8, .Hkv = 2, .D = 64, .views = true, .window = 10});
  prefill({.Tq = 40, .Tk = 75, .H = 2, .Hkv = 1, .D = 256, .window = 20});
  prefill({.Tq = 70, .Tk = 70, .H = 3, .Hkv = 3, .D = 7, .q = bf16, .kv = bf16, .out = bf16, .window = 33});
  prefill({.Tq = 9, .Tk = 12, .H = 2, .Hkv = 1, .D = 300, .window = 4});
  prefill({.Tq = 65, .Tk = 130, .H = 2, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .window = 50});
  prefill({.Tq = 200, .Tk = 300, .H = 4, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .window = 64});
  prefill({.B = 2, .Tq = 100, .Tk = 100, .H = 4, .Hkv = 1, .D = 128, .q = f16, .kv = f16, .out = bf16, .views = true,
           .window = 33});
  prefill({.Tq = 65, .Tk = 130, .H = 2, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .window = 1});
  // Decode: ragged lengths (1, random, S) around the window, MHA / GQA / MQA, a window of one
  // key, windows ≥ S (the same as none); a long cache whose window is a small part of it (the
  // GPU's splits then divide the window alone: few splits and one key, all of them in use);
  // the SIMT, tensor-core and generic GPU kernels; and the step's k and v appended by the op.
  decode({.B = 3, .S = 33, .window = 8});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .window = 100});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .window = 100});
  decode({.B = 4, .S = 150, .H = 4, .Hkv = 1, .D = 64, .window = 1});
  decode({.B = 4, .S = 150, .H = 4, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .window = 1});
  decode({.B = 3, .S = 33, .H = 4, .Hkv = 2, .D = 64, .window = 33});
  decode({.B = 3, .S = 33, .H = 6, .Hkv = 2, .D = 80, .q = f16, .kv = f16, .out = f16, .window = 100});
  decode({.B = 2, .S = 5000, .H = 2, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .len = 4999, .window = 300});
  decode({.B = 2, .S = 3000, .H = 4, .Hkv = 2, .D = 128, .len = 2900, .window = 257});
  decode({.B = 3, .S = 2048, .H = 8, .Hkv = 2, .D = 128, .q = f16, .kv = f16, .out = f16, .views = true, .window = 700});
  decode({.B = 3, .S = 150, .H = 4, .Hkv = 2, .D = 20, .views = true, .window = 40});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300, .window = 9});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 50});
  decode({.B = 3, .S = 1100, .H = 4, .Hkv = 2, .D = 64, .append = f32, .window = 200});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .q = f32, .kv = bf16, .out = f32, .append = f32, .window = 3});
  decode({.B = 3, .S = 33, .H = 3, .Hkv = 3, .D = 7, .append = f32, .window = 5});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 1});
  // Bench: a Mistral-like layer (32 heads over 8, D = 128) with a 4096-key window in a 16384-key
  // cache, full: the decode reads the window alone.
  decode({.S = 16384, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .full = true, .in_tests = false,
          .window = 4096});

  // KV append: one decode step and a prefill chunk, converting and not, odd head dims.
  auto append = [&](Append p) { cases.push_back(append_case(p)); };
  append({});
  append({.B = 3, .S = 40, .T = 1, .Hkv = 2, .D = 128, .x = bf16, .cache = bf16});
  append({.B = 1, .S = 300, .T = 37, .Hkv = 3, .D = 7, .x = f16, .cache = f16});
  append({.B = 2, .S = 64, .T = 17, .Hkv = 1, .D = 80, .x = f32, .cache = bf16});
  append({.B = 4, .S = 2048, .T = 1, .Hkv = 25, .D = 64, .x = bf16, .cache = bf16, .in_tests = false});
  // Rolling caches: a decode step and a chunk that wraps past the last slot.
  append({.B = 3, .S = 40, .T = 1, .Hkv = 2, .D = 128, .x = bf16, .cache = bf16, .max_start = 1000});
  append({.B = 3, .S = 64, .T = 17, .Hkv = 1, .D = 80, .x = f32, .cache = bf16, .max_start = 150});

  // Decode with rope in the op (q and k_new rotated at seq_lens − 1; Llama-3's theta 500000 and a
  // llama3-scaled table): on the GPU in the tensor-core kernel (bf16 / f16 q, k, v with a bf16
  // output, D = 64 or 128: neox and interleaved pairs, partial rotary dims, GQA, rolling), and
  // through rotated copies first elsewhere (the SIMT kernel with f32, the generic one at D = 300).
  decode({.B = 3, .S = 300, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .table = true});
  decode({.B = 2, .S = 150, .H = 6, .Hkv = 2, .D = 64, .q = f16, .kv = f16, .out = bf16, .append = f16, .rope = true,
          .rotary_dim = 32, .interleaved = true});
  decode({.B = 3, .S = 130, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 129,
          .max_len = 5000, .rope = true, .rotary_dim = 96});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .append = f32, .rope = true, .table = true});
  decode({.B = 3, .S = 33, .H = 6, .Hkv = 2, .D = 80, .q = f16, .kv = f16, .out = f16, .append = f16, .rope = true,
          .rotary_dim = 40, .interleaved = true});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true});
  // Decode with q/k RMSNorm in the op (before the rope): on the GPU in the tensor-core kernel
  // (weights of q's dtype: over each head, GQA; over the whole projection, MHA as OLMoE; without
  // rope; with partial rotary dims) and through normalised copies first elsewhere (f32, weights
  // of another dtype, D = 300).
  const auto per_head = Decode::QkNorm::per_head, whole = Decode::QkNorm::whole;
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .qk_norm = per_head});
  decode({.B = 3, .S = 200, .H = 16, .Hkv = 16, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .qk_norm = whole});
  decode({.B = 2, .S = 150, .H = 6, .Hkv = 2, .D = 64, .q = f16, .kv = f16, .out = bf16, .append = f16, .qk_norm = whole});
  decode({.B = 3, .S = 130, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .rotary_dim = 64, .qk_norm = per_head});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .append = f32, .rope = true, .qk_norm = whole});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .qk_norm = per_head, .norm_w = f32});
  decode({.B = 2, .S = 40, .H = 2, .Hkv = 1, .D = 300, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .qk_norm = whole});
  // Decode told that its cache comes from earlier ops: on the GPU the tensor-core kernel copies its
  // first K/V tiles before the chained-launch wait and the newest row after it. Appending (D = 128:
  // two stages; D = 64: three), over several tiles, a window, a rolling cache with rope, OLMoE's
  // norm, f32 rows appended by a kv_append launch first, and one key (the newest alone).
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16,
          .settled = true});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 8, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .append = bf16,
          .settled = true});
  decode({.B = 3, .S = 700, .H = 12, .Hkv = 4, .D = 128, .q = f16, .kv = f16, .out = bf16, .settled = true});
  decode({.B = 3, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 50,
          .settled = true});
  decode({.B = 3, .S = 130, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 129,
          .max_len = 5000, .rope = true, .rotary_dim = 96, .settled = true});
  decode({.B = 3, .S = 200, .H = 16, .Hkv = 16, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .rope = true,
          .qk_norm = whole, .settled = true});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .append = f32, .settled = true});
  decode({.B = 1, .S = 3000, .H = 2, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .len = 1, .settled = true});
  // Bench: the Llama-3.1-8B decode step's attention with its rope.
  decode({.S = 512, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .len = 384, .append = bf16,
          .in_tests = false, .rope = true});
  // Bench: a decode step's attention as ding-bench model runs it, the cache settled (llama-3.1-8b at
  // --prompt 256 --new 32 with its llama3 table; olmoe-1b-7b at --prompt 256 --new 64 with its norm),
  // halfway through the new tokens: at a short context the kernel's fixed work is its cost.
  decode({.S = 288, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .len = 272, .append = bf16,
          .in_tests = false, .rope = true, .table = true, .settled = true});
  decode({.S = 320, .H = 16, .Hkv = 16, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .len = 288, .append = bf16,
          .in_tests = false, .rope = true, .qk_norm = whole, .settled = true});

  // Rolling caches (S slots, position p at slot p mod S; window ≤ S, prefill window + Tq − 1 ≤ S).
  // Prefill: Tk many times S (the keys wrap inside a tile), the tightest S, on the GPU's SIMT
  // tiles, tensor-core kernel (two query tiles) and generic row kernel. Decode: lengths up to
  // several times S (1, random, the longest), MHA / GQA, the split, tensor-core and generic
  // kernels, with the step's k and v appended at slot (len − 1) mod S.
  prefill({.Tq = 17, .Tk = 200, .H = 4, .Hkv = 2, .D = 64, .window = 9, .slots = 25});
  prefill({.B = 2, .Tq = 5, .Tk = 77, .H = 8, .Hkv = 2, .D = 64, .window = 10, .slots = 14});
  prefill({.Tq = 80, .Tk = 500, .H = 4, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .window = 50, .slots = 129});
  prefill({.Tq = 65, .Tk = 1000, .H = 2, .Hkv = 1, .D = 64, .q = f16, .kv = f16, .out = bf16, .window = 100,
           .slots = 200});
  prefill({.Tq = 9, .Tk = 40, .H = 2, .Hkv = 1, .D = 300, .window = 4, .slots = 12});
  decode({.B = 3, .S = 33, .window = 8, .max_len = 200});
  decode({.B = 4, .S = 300, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .window = 300, .max_len = 2000});
  decode({.B = 3, .S = 150, .H = 4, .Hkv = 2, .D = 64, .window = 100, .max_len = 1000});
  decode({.B = 3, .S = 130, .H = 8, .Hkv = 2, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 129,
          .max_len = 5000});
  decode({.B = 3, .S = 40, .H = 4, .Hkv = 2, .D = 64, .append = f32, .window = 33, .max_len = 300});
  decode({.B = 2, .S = 12, .H = 2, .Hkv = 1, .D = 300, .q = bf16, .kv = bf16, .out = bf16, .append = bf16, .window = 7,
          .max_len = 100});

  // Bench: gpt2-xl (H = 25, D = 64) prefill of 256 tokens and decode at 256 and 4096 cached
  // tokens; a Llama-like GQA decode (32 heads over 8 kv heads, D = 128) at 4096.
  for (DType t : {f32, bf16}) {
    prefill({.Tq = 256, .Tk = 256, .H = 25, .Hkv = 25, .D = 64, .q = t, .kv = t, .out = t, .in_tests = false});
    decode({.S = 256, .H = 25, .Hkv = 25, .D = 64, .q = t, .kv = t, .out = t, .full = true, .in_tests = false});
    // The decode step of the seed benchmark: a 512-position cache, 384 of them in use.
    decode({.S = 512, .H = 25, .Hkv = 25, .D = 64, .q = t, .kv = t, .out = t, .len = 384, .in_tests = false});
    decode({.S = 4096, .H = 25, .Hkv = 25, .D = 64, .q = t, .kv = t, .out = t, .full = true, .in_tests = false});
    decode({.S = 4096, .H = 32, .Hkv = 8, .D = 128, .q = t, .kv = t, .out = t, .full = true, .in_tests = false});
  }
  // The gpt2-xl case's bytes and grid with each head's keys contiguous (25 sequences of one head)
  // rather than 128-byte rows 25 heads apart: what the cache layout costs the S4096 decode.
  decode({.B = 25, .S = 4096, .H = 1, .Hkv = 1, .D = 64, .q = bf16, .kv = bf16, .out = bf16, .full = true,
          .in_tests = false});
  // gpt2's decode attention (12 heads of 64) at 512 cached keys in f16: what a CPU decode step of
  // the 124M model spends beside its products (issue 22's int8 target on two threads).
  decode({.S = 512, .H = 12, .Hkv = 12, .D = 64, .q = f16, .kv = f16, .out = f16, .full = true, .in_tests = false});
  // A decode step's attention as the model bench runs it (a 256-token prompt, 64 new tokens: a
  // 321-position cache, 290 in use at the run's middle), the token's k and v appended and q and k
  // rotated in the op: Llama-3.1-8B (32 heads over 8) and OLMoE-1B-7B (16 over 16). At this length
  // the launch's fixed latency, not the cache's 2.4 MB, sets the time.
  // OLMoE's also with its q/k norm over the whole projection in the op.
  for (const auto& [H, Hkv] : {std::pair<int64_t, int64_t>{32, 8}, {16, 16}})
    decode({.S = 321, .H = H, .Hkv = Hkv, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .len = 290, .append = bf16,
            .in_tests = false, .rope = true});
  decode({.S = 321, .H = 16, .Hkv = 16, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .len = 290, .append = bf16,
          .in_tests = false, .rope = true, .qk_norm = Decode::QkNorm::whole});
  // Tensor-core prefill (16-bit inputs, bf16 output): the GQA shape over 2048 tokens.
  prefill({.Tq = 2048, .Tk = 2048, .H = 32, .Hkv = 8, .D = 128, .q = bf16, .kv = bf16, .out = bf16, .in_tests = false});
  return cases;
}

}  // namespace ding::testing
