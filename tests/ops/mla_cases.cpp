// mla_prefill and mla_decode cases: DeepSeek-V2-Lite's head shape scaled down and odd sizes (no
// dimension a multiple of anything), one head and many, chunked prefill (Tk > Tq) through a view
// of a longer cache, q as a strided view of a wider projection, decode lengths from 1 to S, the
// token's latent appended by the op, f32/f16/bf16 and mixed dtypes; benchmark shapes at
// DeepSeek-V2-Lite's and V2's heads over 4k and 32k caches.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "ding/ops/mla.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Both sides read identical rounded inputs; the gap is the kernels' f32 arithmetic against the
// reference's double, and on the output side the rounding flips it causes. The backends compute
// the absorbed form, the prefill reference the expanded one: in exact arithmetic the same, in f32
// each a chain of three sums (the absorption or expansion over Dn or L terms, the scores, the
// weighted sum of the latents) instead of attention's two, each ~1e-7 relative. A flipped output
// costs its own square: the outputs are weighted sums of value rows, whose largest over a few
// thousand elements reach ~3.5 rms (y² ≈ 12× the mean square), and a flip is likeliest in the
// largest chains. With y² = 1× the mean the bf16 decode case B3_S1000 failed one seed in a few
// hundred on kokkos (1.9× that bound, seed 4215271204, while 150 others stayed under 0.011×).
double tolerance(DType out, int64_t elements) {
  if (out == DType::f32) return 2e-11;
  return flip_nmse(out, elements, 12.0, 4) + 12e-3 * rounding_nmse(out);
}

const char* tolerance_reason(DType out) {
  switch (out) {
    case DType::f32: return "f32 absorption, L-term scores and latent sums against double (either form); measured <= 9.1e-13 (cpu, S = 2100)";
    case DType::f16: return "f16 output: f32 accumulation error flips a few roundings by 1 ulp; bound 4 + 0.1% flips of outputs up to 3.5 rms";
    default: return "bf16 output: f32 accumulation error flips a few roundings by 1 ulp; bound 4 + 0.1% flips of outputs up to 3.5 rms";
  }
}

// Either op, with q, the cache and W of one 16-bit dtype and a 16-bit output, may round to that
// dtype (ops/mla.h): the expanded form k^h and v^h, the absorbed form the scaled query, either the
// weights that multiply the values. Each rounding is a relative error of NMSE r =
// rounding_nmse(cache); through the scores (q·k^h, or q_lat·c, at the default scale, unit-scale
// inputs), the weights and the values each adds about r to the output before its own rounding (the
// absorbed form's two roundings 2r, the expanded form's three 3r): an error ε ≈ √(3r)·|y| at most,
// against the output's ulp ≈ √(12·r_out)·|y|, which moves the rounded output by one ulp with
// probability ε/ulp, so E[Δ²] ≈ ε·ulp = √(36·r·r_out)·y² (6·r for a bf16 output of a bf16 cache).
// The bound is twice that, on top of the f32 kernels' own.
bool may_round(DType q, DType cache, DType w, DType out) {
  return q == cache && cache == w && (cache == DType::bf16 || cache == DType::f16) && out != DType::f32;
}

double rounded_tolerance(DType q, DType cache, DType w, DType out, int64_t elements) {
  const double own = tolerance(out, elements);
  if (!may_round(q, cache, w, out)) return own;
  return own + 2.0 * std::sqrt(36.0 * rounding_nmse(cache) * rounding_nmse(out));
}

std::string rounded_tolerance_reason(DType q, DType cache, DType w, DType out) {
  if (!may_round(q, cache, w, out)) return tolerance_reason(out);
  return fmt::format("{} output of a {} cache: the expanded form's keys, values and weights, or the absorbed form's query "
                     "and weights, rounded to {} (≤ 3r into the output, flipping its rounding with probability ε/ulp: "
                     "2·√(36·r·r_out)) plus the f32 kernels' 4 + 0.1% flips",
                     dtype_name(out), dtype_name(cache), dtype_name(cache));
}

struct Shape {
  int64_t H = 3, L = 24, Dr = 8, Dn = 12, Dv = 10;
};

std::string shape_tag(const Shape& s) { return fmt::format("H{}_L{}_Dr{}_Dn{}_Dv{}", s.H, s.L, s.Dr, s.Dn, s.Dv); }

std::string dtype_tag(DType q, DType cache, DType w, DType out) {
  if (q == cache && cache == w && w == out) return std::string(dtype_name(q));
  return fmt::format("q{}_cache{}_w{}_out{}", dtype_name(q), dtype_name(cache), dtype_name(w), dtype_name(out));
}

// The latents are unit normal and W's rows have norm ≈ 1 (stddev 1/√L), so keys and values are
// unit-scale like the queries and the scores stay O(1) at the default scale.
Tensor weights(CaseRun& run, DType dtype, const Shape& s) {
  return run.normal(dtype, {s.H, s.Dn + s.Dv, s.L}, 1.0 / std::sqrt(double(s.L)));
}

struct Prefill {
  int64_t B = 1, Tq = 9, Tk = 9;
  Shape shape;
  float scale = 0;
  DType q = DType::f32, cache = DType::f32, w = DType::f32, out = DType::f32;
  bool views = false;  // q a slice of a [B, Tq, H, Dn + Dr + 5] product; cache the first Tk of Tk + 7 positions
  bool in_tests = true;
};

OpCase prefill_case(const Prefill& p) {
  std::string name = fmt::format("mla_prefill/B{}_Tq{}_Tk{}_{}_{}", p.B, p.Tq, p.Tk, shape_tag(p.shape),
                                 dtype_tag(p.q, p.cache, p.w, p.out));
  if (p.scale > 0) name += fmt::format("_scale{}", p.scale);
  if (p.views) name += "_views";
  const Shape& s = p.shape;
  OpCase c{"mla_prefill", name, rounded_tolerance(p.q, p.cache, p.w, p.out, p.B * p.Tq * s.H * s.Dv),
           rounded_tolerance_reason(p.q, p.cache, p.w, p.out), nullptr, p.in_tests};
  c.build = [p, s](CaseRun& run) {
    const int64_t E = s.Dn + s.Dr;
    const Tensor q = p.views ? run.normal(p.q, {p.B, p.Tq, s.H, E + 5}).slice(3, 2, E + 2) : run.normal(p.q, {p.B, p.Tq, s.H, E});
    const Tensor cache = p.views ? run.normal(p.cache, {p.B, p.Tk + 7, s.L + s.Dr}).slice(1, 0, p.Tk)
                                 : run.normal(p.cache, {p.B, p.Tk, s.L + s.Dr});
    const Tensor w = weights(run, p.w, s);
    const Tensor out = run.output("out", p.out, {p.B, p.Tq, s.H, s.Dv});
    const ops::MlaParams params{p.scale};
    run.launch = [=](Stream& st) { ops::mla_prefill(st, out, q, cache, w, params); };
    run.cost = ops::cost(ops::MlaPrefillArgs{out, q, cache, w, params});
  };
  return c;
}

struct Decode {
  int64_t B = 3, S = 33;
  Shape shape;
  float scale = 0;
  DType q = DType::f32, cache = DType::f32, w = DType::f32, out = DType::f32;
  bool views = false;  // q a slice of a [B, H, Dn + Dr + 5] product; cache [B, S + 4, L + Dr] cut to S
  bool full = false;   // every seq_len = S (bench); otherwise 1, random in [1, S] …, S
  // The token's [c ; k^R] of this dtype (a view into a wider row) stored at seq_lens − 1 by the
  // op; the cache is then in-out and compared whole, exactly (a copy rounded alike on both sides).
  std::optional<DType> append;
  bool in_tests = true;
};

OpCase decode_case(const Decode& p) {
  std::string name = fmt::format("mla_decode/B{}_S{}_{}_{}", p.B, p.S, shape_tag(p.shape), dtype_tag(p.q, p.cache, p.w, p.out));
  if (p.scale > 0) name += fmt::format("_scale{}", p.scale);
  if (p.views) name += "_views";
  if (p.full) name += "_full";
  if (p.append) name += fmt::format("_append{}", dtype_name(*p.append));
  const Shape& s = p.shape;
  OpCase c{"mla_decode", name, rounded_tolerance(p.q, p.cache, p.w, p.out, p.B * s.H * s.Dv),
           rounded_tolerance_reason(p.q, p.cache, p.w, p.out), nullptr, p.in_tests};
  c.build = [p, s](CaseRun& run) {
    const int64_t E = s.Dn + s.Dr, row = s.L + s.Dr;
    const Tensor q = p.views ? run.normal(p.q, {p.B, s.H, E + 5}).slice(2, 3, E + 3) : run.normal(p.q, {p.B, s.H, E});
    Tensor cache, latent_new;
    if (p.append) {
      cache = run.inout("cache", p.cache, {p.B, p.S, row}, 1.0, {Compare::exact});
      latent_new = run.normal(*p.append, {p.B, row + 6}).slice(1, 6, row + 6);
    } else {
      cache = p.views ? run.normal(p.cache, {p.B, p.S + 4, row}).slice(1, 0, p.S) : run.normal(p.cache, {p.B, p.S, row});
    }
    const Tensor w = weights(run, p.w, s);
    // Lengths: the extremes 1 and S, and random ones between (the case's seeded rng: every
    // device sees the same).
    std::vector<int32_t> lens(size_t(p.B), int32_t(p.S));
    if (!p.full) {
      std::uniform_int_distribution<int32_t> pick(1, int32_t(p.S));
      for (size_t b = 0; b < lens.size(); ++b) lens[b] = b == 0 ? 1 : b + 1 == lens.size() ? int32_t(p.S) : pick(run.rng);
    }
    const Tensor seq_lens = run.ints({p.B}, lens);
    const Tensor out = run.output("out", p.out, {p.B, s.H, s.Dv});
    const ops::MlaParams params{p.scale};
    run.launch = [=](Stream& st) { ops::mla_decode(st, out, q, cache, seq_lens, w, params, latent_new); };
    run.cost = ops::cost(ops::MlaDecodeArgs{out, q, cache, seq_lens, w, params, latent_new});
  };
  return c;
}

}  // namespace

std::vector<OpCase> mla_cases() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const Shape lite_small{.H = 4, .L = 64, .Dr = 16, .Dn = 32, .Dv = 32};  // V2-Lite's proportions, scaled down
  const Shape one_head{.H = 1, .L = 40, .Dr = 6, .Dn = 20, .Dv = 24};
  const Shape wide{.H = 17, .L = 72, .Dr = 10, .Dn = 9, .Dv = 33};
  std::vector<OpCase> cases;
  auto prefill = [&](Prefill p) { cases.push_back(prefill_case(p)); };
  auto decode = [&](Decode p) { cases.push_back(decode_case(p)); };

  prefill({});
  prefill({.Tq = 1, .Tk = 1});
  prefill({.B = 2, .Tq = 17, .Tk = 17, .shape = lite_small});
  prefill({.Tq = 5, .Tk = 40, .shape = lite_small, .views = true});  // a chunk after a cached prefix
  prefill({.Tq = 33, .Tk = 70, .shape = wide, .scale = 0.2f});
  prefill({.Tq = 12, .Tk = 12, .shape = one_head, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  prefill({.B = 2, .Tq = 7, .Tk = 30, .shape = lite_small, .q = f16, .cache = f16, .w = f16, .out = f16, .views = true});
  prefill({.Tq = 9, .Tk = 20, .shape = lite_small, .q = f32, .cache = bf16, .w = bf16, .out = f32});
  prefill({.Tq = 300, .Tk = 300, .shape = {.H = 2, .L = 32, .Dr = 8, .Dn = 16, .Dv = 16}, .q = bf16, .cache = bf16,
           .w = bf16, .out = bf16});

  decode({.B = 1, .S = 1});
  decode({});
  decode({.B = 3, .S = 300, .shape = lite_small});
  decode({.B = 2, .S = 77, .shape = wide, .scale = 0.2f, .views = true});
  decode({.B = 3, .S = 33, .shape = one_head, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  decode({.B = 3, .S = 50, .shape = lite_small, .q = f16, .cache = f16, .w = f16, .out = f16, .views = true});
  decode({.B = 2, .S = 40, .shape = lite_small, .q = f32, .cache = bf16, .w = bf16, .out = f32});
  decode({.B = 3, .S = 33, .shape = lite_small, .append = f32});
  decode({.B = 3, .S = 60, .shape = lite_small, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .append = f32});
  // Long caches: several GPU splits, the first sequence at length 1 (most splits empty).
  decode({.B = 2, .S = 3000, .shape = lite_small, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  decode({.B = 1, .S = 2100, .shape = {.H = 20, .L = 96, .Dr = 16, .Dn = 24, .Dv = 40}, .full = true});
  // Several splits merged and projected in one launch on the GPU: latents in 64-wide chunks, the
  // last one partial, and more value rows than its blocks load before they wait; and L % 8 != 0,
  // where W_uv's rows are not whole 16-byte pieces (a merge launch, then the projection's).
  decode({.B = 2, .S = 600, .shape = {.H = 3, .L = 136, .Dr = 8, .Dn = 16, .Dv = 160}});
  decode({.B = 2, .S = 600, .shape = {.H = 5, .L = 60, .Dr = 4, .Dn = 8, .Dv = 20}, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  // The GPU's tensor-core attend kernel (16-bit caches, L % 64 == 0): one full head group of 16,
  // two groups of 10 with the m16 tiles' other rows empty; one split and several (empty ones
  // behind the length-1 row), the token's row appended, prefill's causal band. One 16-bit dtype
  // throughout may round qa and the weights once (ops/mla.h); an f32 query or output asks for f32
  // accuracy, which their 16-bit parts must keep: an f32 output against its 2e-11 bound (from an
  // all-bf16 input too), a 16-bit one against the unrounded bound.
  const Shape mma16{.H = 16, .L = 128, .Dr = 32, .Dn = 32, .Dv = 48}, mma20{.H = 20, .L = 128, .Dr = 32, .Dn = 32, .Dv = 48};
  decode({.B = 1, .S = 1, .shape = mma16, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  decode({.B = 1, .S = 1, .shape = mma20, .q = f16, .cache = f16, .w = f16, .out = f16});
  decode({.B = 3, .S = 1000, .shape = mma16, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .append = bf16});
  decode({.B = 3, .S = 1000, .shape = mma20, .q = f16, .cache = f16, .w = f16, .out = f16, .append = f32});
  decode({.B = 3, .S = 1000, .shape = mma20, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  decode({.B = 2, .S = 1000, .shape = mma20, .q = f32, .cache = bf16, .w = f32, .out = f32});
  decode({.B = 2, .S = 1000, .shape = mma16, .q = bf16, .cache = bf16, .w = bf16, .out = f32});
  decode({.B = 2, .S = 1000, .shape = mma16, .q = f32, .cache = f16, .w = f16, .out = f16});
  prefill({.Tq = 40, .Tk = 70, .shape = mma20, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  prefill({.Tq = 40, .Tk = 70, .shape = mma16, .q = f16, .cache = f16, .w = f16, .out = f16, .views = true});

  // The GPU's expanded prefill (chunks of 64 queries or more, one 16-bit dtype, a bf16 output,
  // DeepSeek-V2's head dims Dn + Dr = 192 and Dv = 128 on tensor cores): two sequences with a
  // partial query tile, a chunk after a cached prefix, f16 operands; a chunk of 63 queries (the
  // absorbed kernel) beside it.
  const Shape expand{.H = 3, .L = 64, .Dr = 64, .Dn = 128, .Dv = 128};
  prefill({.B = 2, .Tq = 100, .Tk = 100, .shape = expand, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  prefill({.Tq = 70, .Tk = 230, .shape = expand, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});
  prefill({.Tq = 64, .Tk = 64, .shape = expand, .q = f16, .cache = f16, .w = f16, .out = bf16});
  prefill({.Tq = 63, .Tk = 90, .shape = expand, .q = bf16, .cache = bf16, .w = bf16, .out = bf16});

  // DeepSeek-V2-Lite (16 heads) and V2 (128 heads): L = 512, Dr = 64, Dn = 128, Dv = 128, bf16,
  // at 4k and 32k context.
  const Shape lite{.H = 16, .L = 512, .Dr = 64, .Dn = 128, .Dv = 128}, v2{.H = 128, .L = 512, .Dr = 64, .Dn = 128, .Dv = 128};
  for (int64_t S : {4096, 32768})
    decode({.B = 1, .S = S, .shape = lite, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .full = true, .in_tests = false});
  // An f32 query: the same bytes at f32 accuracy (on tensor cores, qa and the weights in parts).
  decode({.B = 1, .S = 32768, .shape = lite, .q = f32, .cache = bf16, .w = bf16, .out = bf16, .full = true, .in_tests = false});
  decode({.B = 1, .S = 4096, .shape = v2, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .full = true, .in_tests = false});
  decode({.B = 8, .S = 4096, .shape = lite, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .full = true, .in_tests = false});
  // Prefill chunks: 512 queries after 3.5k cached, the session's 256 at the end of a 32k prompt,
  // and 16 (the absorbed kernel).
  prefill({.Tq = 512, .Tk = 4096, .shape = lite, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .in_tests = false});
  prefill({.Tq = 256, .Tk = 32768, .shape = lite, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .in_tests = false});
  prefill({.Tq = 16, .Tk = 4096, .shape = lite, .q = bf16, .cache = bf16, .w = bf16, .out = bf16, .in_tests = false});
  for (OpCase& c : cases)
    if (!c.in_tests) c.name.insert(c.name.find('/') + 1, "bench_");
  return cases;
}

}  // namespace ding::testing
