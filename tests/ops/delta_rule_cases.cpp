// gated_delta_rule cases: a decode step (T = 1) and calls of many tokens, value heads sharing key
// heads (Hv = 2·Hk, 3·Hk), Qwen3-Next's head dims (128) and the widest key head (256), odd dims,
// q and k as views into a wider projection, f32/f16/bf16, both forms (chunk-wise with explicit
// chunks), the gated norm of the output in the op; benches at Qwen3-Next-80B's heads.
// q and k rows are L2-normalised as the layer feeds them (so I − β k kᵀ is a contraction), or, for
// the op's own normalisation (l2_normalize_qk), drawn at any length; g a log decay in [−1, −0.01),
// β in [0.05, 0.95].
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ding/ops/delta_rule.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

struct Delta {
  int64_t B = 1, T = 9, Hk = 1, Hv = 1, Dk = 32, Dv = 24;
  DType qkv = DType::f32, gates = DType::f32, out = DType::f32;
  bool views = false;  // q and k slices of a [B, T, Hk, Dk + 6] product
  int64_t chunk = 0;   // the chunk-wise form's chunk (the reference's form too); 0: the backend's choice
  bool gated = false;  // g and β from Qwen3-Next's gates (params.gates): inputs a_t and b_t, A_log, dt_bias
  bool l2 = false;     // params.l2_normalize_qk: q and k of rows of any length (std 3), normalised in the op
  bool settled = false;  // params.state_from_earlier_op (true here, where the state is uploaded before)
  bool norm = false;   // params.out_norm: the gated RMSNorm of each head's output (gate a view of a wider row)
  bool in_tests = true;
};

// The share of a 16-bit output's roundings an error may flip: an output flips when its exact value
// lies within the computed one's relative error of a rounding boundary, so at most 2·error over the
// smallest relative ulp (2^-8 for bf16, 2^-11 for f16), and never less than 0.1% (the f32 sums'
// own errors). The error is the GPU's chunk-wise products' (ops/delta_rule.h): bf16 rows with a
// 16-bit output may take bf16 pairs, each computed operand hi + lo with lo × lo dropped, ~2^-17
// relative, a product of two such ~2^-16: 0.8% for a bf16 output. Other rows take tf32 head +
// tail, tail × tail dropped, ~2^-21 a product: 0.2% for an f16 output, 0.1% for bf16.
// Measured on an H100: the widest keys in bf16 pairs (Dk 256, 100 tokens) reached 1.6× the 0.1%
// bound in 1 seed of 40; f16 rows (T 70, Dk 128, Dv 64, chunks of 32) 1.03× it in 1 seed of 53.
double flip_share(DType qkv, DType out) {
  const double product_error = std::ldexp(1.0, qkv == DType::bf16 ? -16 : -21);
  const int mantissa_bits = out == DType::bf16 ? 7 : 10;
  return std::clamp(2.0 * product_error / std::ldexp(1.0, -(mantissa_bits + 1)), 1e-3, 1.0);
}

// f32 against the reference's double. The recurrent form rounds each token's ~8·Dk·Dv operations
// at 2^-24, the errors left in S shrinking with its contraction (decay and the unit-key delta rule)
// rather than piling up over T (measured <= 1.1e-13, cpu and kokkos, 40 runs). The chunk-wise form,
// which a backend may take for any call of more than one token, sums over a chunk as well (W's
// forward substitution, the decayed QKᵀ and the chunk's writes into S, up to 64 terms each, times
// e^(G_i − G_j) factors rounded once): measured <= 7.2e-12 (cpu, Qwen3-Next's gates with decays
// down to e^-300 per token, 40 runs; the cumulative G in double, else it reached 8e-11). A 16-bit
// output adds its own rounding: flips of a few outputs by one ulp (4, plus a share of them).
// The gated norm (out_norm) rounds o to the output's dtype and then its own result: two roundings,
// and a flip of o by 1 ulp moves the normalised output by as much, so twice the flips.
double tolerance(DType qkv, DType out, int64_t elements, bool norm) {
  if (out == DType::f32) return 2e-11;
  const double flips = norm ? 2.0 : 1.0;
  return flip_nmse(out, elements, 4.0 * flips, 4 * int(flips)) + flips * 12.0 * flip_share(qkv, out) * rounding_nmse(out);
}

std::string tolerance_reason(DType qkv, DType out, bool norm) {
  if (out == DType::f32)
    return "f32 in either form against double: recurrent <= 1.1e-13, chunk-wise (chunk sums, W) <= 7.2e-12 measured";
  return fmt::format("{} output: {} flip roundings by 1 ulp; bound 4 + {:.2g}% flips{}", dtype_name(out),
                     qkv == DType::bf16 ? "bf16 pairs' products (~2^-16 relative)" : "tf32 head + tail products (~2^-21 relative)",
                     100 * flip_share(qkv, out), norm ? ", twice over (o rounded, then the norm's output)" : "");
}

OpCase delta_case(const Delta& p) {
  std::string name = fmt::format("gated_delta_rule/B{}_T{}_Hk{}_Hv{}_Dk{}_Dv{}_{}_gates{}_out{}", p.B, p.T, p.Hk, p.Hv,
                                 p.Dk, p.Dv, dtype_name(p.qkv), dtype_name(p.gates), dtype_name(p.out));
  if (p.views) name += "_views";
  if (p.chunk > 0) name += fmt::format("_chunk{}", p.chunk);
  if (p.gated) name += "_gated";
  if (p.l2) name += "_l2";
  if (p.settled) name += "_settled";
  if (p.norm) name += "_norm";
  const int64_t elements = p.B * p.T * p.Hv * p.Dv;
  OpCase c{"gated_delta_rule", name, tolerance(p.qkv, p.out, elements, p.norm), tolerance_reason(p.qkv, p.out, p.norm), nullptr,
           p.in_tests};
  c.build = [p](CaseRun& run) {
    const auto key_rows = [&] {
      if (!p.l2) return unit_heads(run, p.qkv, p.B, p.T, p.Hk, p.Dk, p.views);
      const Tensor wide = run.normal(p.qkv, {p.B, p.T, p.Hk, p.Dk + (p.views ? 6 : 0)}, 3.0);
      return p.views ? wide.slice(3, 3, 3 + p.Dk) : wide;
    };
    const Tensor q = key_rows(), k = key_rows();
    const Tensor v = run.normal(p.qkv, {p.B, p.T, p.Hv, p.Dv});
    // Gated: a_t + dt_bias spans softplus's curve (and its linear part past 20 once in a while),
    // A = e^(A_log) in [0.14, 15] as Qwen3-Next draws it from (0, 16), b_t logits around 0.
    const Tensor g = p.gated ? run.uniform(p.gates, {p.B, p.T, p.Hv}, -6.0, 21.0) : run.uniform(p.gates, {p.B, p.T, p.Hv}, -1.0, -0.01);
    const Tensor beta = p.gated ? run.normal(p.gates, {p.B, p.T, p.Hv}, 2.0) : run.uniform(p.gates, {p.B, p.T, p.Hv}, 0.05, 0.95);
    const Tensor state = run.inout("state", DType::f32, {p.B, p.Hv, p.Dk, p.Dv}, 0.5);
    const Tensor out = run.output("out", p.out, {p.B, p.T, p.Hv, p.Dv});
    ops::GatedDeltaRuleParams params{.chunk = p.chunk, .l2_normalize_qk = p.l2, .state_from_earlier_op = p.settled};
    if (p.gated) params.gates = {.a_log = run.uniform(DType::f32, {p.Hv}, -2.0, 2.7), .dt_bias = run.uniform(DType::f32, {p.Hv}, -1.0, 1.0)};
    if (p.norm)  // Qwen3-Next's z: a view of the in-projection's row, past q, k, v, b and a
      params.out_norm = {.weight = run.uniform(p.qkv, {p.Dv}, 0.5, 1.5),
                         .gate = run.normal(p.qkv, {p.B, p.T, p.Hv, p.Dv + 5}).slice(3, 5, 5 + p.Dv),
                         .eps = 1e-6f};
    run.launch = [=](Stream& st) { ops::gated_delta_rule(st, out, q, k, v, g, beta, state, params); };
    run.cost = ops::cost(ops::GatedDeltaRuleArgs{out, q, k, v, g, beta, state, params});
  };
  return c;
}

}  // namespace

std::vector<OpCase> delta_rule_cases() {
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  std::vector<OpCase> cases;
  auto add = [&](Delta p) { cases.push_back(delta_case(p)); };
  add({.T = 1, .Dk = 16, .Dv = 16});  // a decode step
  add({});
  add({.B = 2, .T = 9, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24});
  add({.T = 64, .Hk = 2, .Hv = 2, .Dk = 64, .Dv = 64});
  add({.T = 33, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = f32, .out = bf16});
  add({.B = 3, .T = 5, .Hk = 2, .Hv = 6, .Dk = 40, .Dv = 48, .qkv = f16, .gates = f16, .out = f16, .views = true});
  add({.T = 4, .Dk = 256, .Dv = 8});  // the widest key head the backends take
  add({.B = 2, .T = 7, .Hk = 3, .Hv = 3, .Dk = 65, .Dv = 33, .qkv = bf16, .gates = bf16, .out = f32});
  // The chunk-wise form, chunks of 4, 16 and 64 with a partial last one, in the reference and on
  // the backends that compute it (cpu; GPUs: tensor cores from chunks of 16, f32 FMAs below).
  add({.B = 2, .T = 9, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .chunk = 4});
  add({.T = 50, .Hk = 1, .Hv = 2, .Dk = 48, .Dv = 40, .chunk = 16});
  add({.T = 130, .Hk = 1, .Hv = 1, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = f32, .out = bf16, .chunk = 64});
  // The GPU's walk compiled for 128-wide keys, with f16 rows; and with q, k, v rows it cannot copy
  // in 16-byte pieces (views 6 elements wider than the heads).
  add({.T = 70, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 64, .qkv = f16, .gates = f32, .out = f16, .chunk = 32});
  add({.T = 90, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 40, .qkv = bf16, .gates = bf16, .out = bf16, .views = true, .chunk = 64});
  add({.T = 20, .Dk = 256, .Dv = 16, .qkv = f16, .gates = f16, .out = f32, .views = true, .chunk = 8});
  // An odd value dim through the GPU's walk: its last tile of state columns is 3 wide and the
  // output's rows start at odd offsets, so the output and U' move an element at a time, not in pairs.
  add({.T = 40, .Hk = 1, .Hv = 2, .Dk = 32, .Dv = 35, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = 16});
  // Chunks the GPU's tensor-core kernel takes (16, 32 or 64 tokens, key dims of 16s): a partial
  // last tile of state columns, the widest key head, f32 q and k (split operands), and calls that
  // leave the form to the backend (chunk 0: chunk-wise from 16 tokens on the GPU).
  add({.B = 2, .T = 200, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 72, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = 32,
       .gated = true});
  add({.T = 150, .Hk = 1, .Hv = 2, .Dk = 256, .Dv = 40, .qkv = f16, .gates = f32, .out = f32, .chunk = 64});
  // The widest keys in bf16 pairs: the GPU's walk holds the state in registers, so chunks of 64
  // asked for become 32 there.
  add({.T = 100, .Hk = 1, .Hv = 2, .Dk = 256, .Dv = 48, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = 64, .gated = true});
  add({.T = 100, .Hk = 2, .Hv = 2, .Dk = 32, .Dv = 32});
  add({.B = 3, .T = 70, .Hk = 1, .Hv = 3, .Dk = 16, .Dv = 8, .qkv = bf16, .gates = bf16, .out = f32, .gated = true});
  // More (sequence, head, column tile) blocks than a GPU has multiprocessors: a second wave.
  add({.B = 3, .T = 40, .Hk = 8, .Hv = 48, .Dk = 32, .Dv = 64, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = 32,
       .gated = true});
  add({.T = 600, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = bf16, .out = f32, .gated = true});
  // Qwen3-Next's gates formed in the op: a decode step, recurrent and chunk-wise calls, bf16 inputs.
  add({.B = 2, .T = 1, .Hk = 1, .Hv = 3, .Dk = 16, .Dv = 8, .gated = true});
  add({.B = 2, .T = 11, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .gated = true});
  add({.T = 40, .Hk = 1, .Hv = 2, .Dk = 48, .Dv = 40, .chunk = 16, .gated = true});
  add({.T = 37, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 32, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true});
  // q and k normalised in the op: decode steps and a few tokens (the GPU's recurrent kernel
  // normalises what it stages), chunk-wise calls on tensor cores (bf16, f16) and in f32 FMAs
  // (chunk 4), and a call that leaves the form to the backend (the GPU's unit copies first).
  add({.B = 2, .T = 1, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 32, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true, .l2 = true});
  add({.T = 1, .Dk = 16, .Dv = 16, .l2 = true});
  add({.B = 2, .T = 11, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .views = true, .gated = true, .l2 = true});
  add({.T = 16, .Dk = 256, .Dv = 8, .l2 = true});
  add({.T = 50, .Hk = 1, .Hv = 2, .Dk = 48, .Dv = 40, .qkv = bf16, .gates = bf16, .out = bf16, .views = true, .chunk = 16,
       .gated = true, .l2 = true});
  add({.T = 20, .Hk = 2, .Hv = 2, .Dk = 32, .Dv = 16, .qkv = f16, .gates = f16, .out = f16, .chunk = 4, .l2 = true});
  add({.B = 2, .T = 37, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 32, .qkv = bf16, .gates = bf16, .out = f32, .views = true,
       .gated = true, .l2 = true});
  // A decode step's hint that the state is settled (the GPU's recurrent kernel reads it before its
  // chained wait), and a few tokens with it.
  add({.B = 2, .T = 1, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 48, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true,
       .l2 = true, .settled = true});
  add({.T = 6, .Hk = 1, .Hv = 2, .Dk = 256, .Dv = 40, .settled = true});
  // The gated norm of the output in the op: decode steps and a few tokens (on an H100 the
  // recurrent kernel's column tiles of a head, a cluster, normalise its rows together: heads of 1
  // to 3 tiles, batches of heads), and calls a backend stages (the chunk-wise form).
  add({.B = 2, .T = 1, .Hk = 2, .Hv = 4, .Dk = 64, .Dv = 80, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true,
       .l2 = true, .norm = true});
  add({.T = 1, .Dk = 16, .Dv = 16, .norm = true});
  add({.B = 3, .T = 5, .Hk = 1, .Hv = 3, .Dk = 32, .Dv = 40, .qkv = f16, .gates = f16, .out = f16, .views = true,
       .norm = true});
  add({.B = 2, .T = 16, .Hk = 2, .Hv = 2, .Dk = 48, .Dv = 33, .gated = true, .l2 = true, .norm = true});
  add({.T = 40, .Hk = 1, .Hv = 2, .Dk = 64, .Dv = 64, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = 16, .gated = true,
       .l2 = true, .norm = true});
  add({.T = 21, .Hk = 2, .Hv = 4, .Dk = 32, .Dv = 24, .qkv = bf16, .gates = f32, .out = f32, .chunk = 1, .norm = true});
  add({.T = 2, .Hk = 1, .Hv = 2, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true, .l2 = true,
       .settled = true, .norm = true});  // a Qwen3-Next head: 4 tiles
  add({.T = 1, .Hk = 1, .Hv = 1, .Dk = 16, .Dv = 264, .norm = true});  // 9 tiles: more than a cluster takes
  // Qwen3-Next-80B-A3B's linear-attention heads (16 key heads, 32 value heads, 128 × 128 states):
  // decode at batch 1 and 8 (q and k normalised in the op; with the norm and the settled state, as
  // the layer calls it); prefills of 1k
  // to 32k tokens in the recurrent form (chunk 1) and chunk-wise in chunks of 16 to 128, the
  // comparison issue 21 asks for.
  for (int64_t B : {1, 8})
    for (bool norm : {false, true})
      add({.B = B, .T = 1, .Hk = 16, .Hv = 32, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = bf16, .out = bf16, .gated = true,
           .l2 = true, .settled = norm, .norm = norm, .in_tests = false});
  for (int64_t T : {1024, 4096, 16384, 32768})
    for (int64_t chunk : {1, 16, 32, 64, 128})
      add({.T = T, .Hk = 16, .Hv = 32, .Dk = 128, .Dv = 128, .qkv = bf16, .gates = bf16, .out = bf16, .chunk = chunk,
           .gated = true, .in_tests = false});
  for (OpCase& c : cases)
    if (!c.in_tests) c.name.insert(c.name.find('/') + 1, "bench_");
  return cases;
}

}  // namespace ding::testing
