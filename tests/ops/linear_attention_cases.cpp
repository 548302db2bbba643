// linear_attention cases: a decode step and calls of many tokens, with a per-token decay and
// without one, value heads sharing key heads, q and k as views into a wider projection,
// f32/f16/bf16, both forms (chunk-wise with explicit chunks, the recurrent one as chunk 1); benches
// at Qwen3-Next-80B's linear-attention heads for the comparison with the delta rule.
// Keys and queries are rows of norm 1 (a normalised feature map), g a log decay in [−1, −0.01).
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "ding/ops/linear_attention.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

struct Linear {
  int64_t B = 1, T = 9, Hk = 1, Hv = 1, Dk = 32, Dv = 24;
  DType qkv = DType::f32, out = DType::f32;
  bool decay = true;   // g given; else S ← S + k vᵀ, the state's sums growing with T
  bool views = false;  // q and k slices of a [B, T, Hk, Dk + 6] product
  int64_t chunk = 0;
  bool in_tests = true;
};

// f32 against the reference's double: each output sums ≤ T decayed rank-1 terms of Dk-term dots
// (recurrent: through S; chunk-wise: chunk sums and e^(G_i − G_j) factors), a few f32 ulps
// relative each (measured ≤ 2.3e-13 on cpu and kokkos over 40 seeds, either form); the bound keeps
// the delta rule's. 16-bit outputs: flips of a few roundings (4 + 0.1% of the outputs).
double tolerance(DType out, int64_t elements) {
  if (out == DType::f32) return 2e-11;
  return flip_nmse(out, elements, 4.0, 4) + 12e-3 * rounding_nmse(out);
}

std::string tolerance_reason(DType out) {
  if (out == DType::f32) return "f32 sums of decayed rank-1 terms in either form against double; measured <= 2.3e-13";
  return fmt::format("{} output: f32 error flips a few roundings by 1 ulp; bound 4 + 0.1% flips", dtype_name(out));
}

OpCase linear_case(const Linear& p) {
  std::string name = fmt::format("linear_attention/B{}_T{}_Hk{}_Hv{}_Dk{}_Dv{}_{}_out{}{}", p.B, p.T, p.Hk, p.Hv, p.Dk, p.Dv,
                                 dtype_name(p.qkv), dtype_name(p.out), p.decay ? "_decay" : "");
  if (p.views) name += "_views";
  if (p.chunk > 0) name += fmt::format("_chunk{}", p.chunk);
  OpCase c{"linear_attention", name, tolerance(p.out, p.B * p.T * p.Hv * p.Dv), tolerance_reason(p.out), nullptr, p.in_tests};
  c.build = [p](CaseRun& run) {
    const Tensor q = unit_heads(run, p.qkv, p.B, p.T, p.Hk, p.Dk, p.views);
    const Tensor k = unit_heads(run, p.qkv, p.B, p.T, p.Hk, p.Dk, p.views);
    const Tensor v = run.normal(p.qkv, {p.B, p.T, p.Hv, p.Dv});
    const Tensor g = p.decay ? run.uniform(DType::f32, {p.B, p.T, p.Hv}, -1.0, -0.01) : Tensor{};
    const Tensor state = run.inout("state", DType::f32, {p.B, p.Hv, p.Dk, p.Dv}, 0.5);
    const Tensor out = run.output("out", p.out, {p.B, p.T, p.Hv, p.Dv});
    const ops::LinearAttentionParams params{.chunk = p.chunk};
    run.launch = [=](Stream& st) { ops::linear_attention(st, out, q, k, v, g, state, params); };
    run.cost = ops::cost(ops::LinearAttentionArgs{out, q, k, v, g, state, params});
  };
  return c;
}

}  // namespace

std::vector<OpCase> linear_attention_cases() {
  const DType bf16 = DType::bf16, f16 = DType::f16;
  std::vector<OpCase> cases;
  auto add = [&](Linear p) { cases.push_back(linear_case(p)); };
  add({.T = 1, .Dk = 16, .Dv = 16});  // a decode step
  add({});
  add({.decay = false});
  add({.B = 2, .T = 9, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24});
  add({.T = 33, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 128, .qkv = bf16, .out = bf16});
  add({.B = 3, .T = 5, .Hk = 2, .Hv = 6, .Dk = 40, .Dv = 48, .qkv = f16, .out = f16, .views = true});
  add({.T = 4, .Dk = 256, .Dv = 8, .decay = false});
  // Both forms: chunk 1 is the recurrent one; chunks of 4, 16 and 64 with a partial last one.
  add({.B = 2, .T = 9, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .chunk = 1});
  add({.B = 2, .T = 9, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .chunk = 4});
  add({.T = 50, .Hk = 1, .Hv = 2, .Dk = 48, .Dv = 40, .decay = false, .chunk = 16});
  add({.T = 130, .Hk = 1, .Hv = 1, .Dk = 128, .Dv = 128, .qkv = bf16, .out = DType::f32, .chunk = 64});
  // Qwen3-Next-80B-A3B's linear-attention head shapes: decode, and 1024 tokens in either form.
  add({.T = 1, .Hk = 16, .Hv = 32, .Dk = 128, .Dv = 128, .qkv = bf16, .out = bf16, .in_tests = false});
  for (int64_t chunk : {1, 64})
    add({.T = 1024, .Hk = 16, .Hv = 32, .Dk = 128, .Dv = 128, .qkv = bf16, .out = bf16, .chunk = chunk, .in_tests = false});
  for (OpCase& c : cases)
    if (!c.in_tests) c.name.insert(c.name.find('/') + 1, "bench_");
  return cases;
}

}  // namespace ding::testing
