// rope cases: head dims 6 (all scalar tail), 64, 80 (R/2 = 40: vector + tail for interleaved)
// and 128; 1, 3 and 25 heads; 1 and 17 tokens; batch 1 and 2; both layouts; partial rotation
// (R < D, the rest copied); positions from a tensor (up to 8000, where f32 angles would fail)
// or an offset; theta 10⁴ and 5·10⁵; every dtype, mixed in/out, in place. Scaled frequencies:
// inv_freq tables from each scaling kind (llama3 at Llama 3.1's 8, 1, 4, 8192 with positions past
// 8192) and an attention_factor ≠ 1, in both layouts.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string dt(DType d) { return std::string(dtype_name(d)); }

struct RopeShape {
  int64_t B, T, H, D;
  DType in, out;
  ops::RopeLayout layout = ops::RopeLayout::neox;
  int64_t rotary_dim = 0;
  bool positions_tensor = false;  // else position_offset
  int64_t offset = 0;
  float theta = 10000.0f;
  bool in_place = false;
  bool in_tests = true;
  // An inv_freq table from rope_inv_frequencies(theta, R, scaling), unless absent.
  std::optional<ops::RopeScaling> scaling;
  float attention_factor = 1.0f;
  int32_t max_position = 8000;  // positions tensor: drawn from [0, max_position]
  // > 0: in place on heads [1, 1 + H) of a [B, T, H + other_heads, D] tensor, as the models rotate q
  // and k inside the fused q/k/v product (strided heads; the other heads must come back untouched).
  int64_t other_heads = 0;
};

std::string scaling_tag(const std::optional<ops::RopeScaling>& s) {
  if (!s) return "";
  switch (s->kind) {
    case ops::RopeScalingKind::none: return "_table";
    case ops::RopeScalingKind::linear: return "_linear" + std::to_string(int64_t(s->factor));
    case ops::RopeScalingKind::llama3: return "_llama3";
    case ops::RopeScalingKind::yarn: return "_yarn" + std::to_string(int64_t(s->factor));
  }
  return "";
}

// Measured worst NMSE over 15 seeds of every case: f32 3.2·10⁻¹⁵, f16 0.0056 × and bf16
// 0.0007 × rounding_nmse; bounds ~15× above. A 16-bit output that lands on the other neighbour
// costs more than that in a case of a few thousand outputs (B1_T2_H2_D1040 bf16: 0.0117 ×
// rounding_nmse from one flip, seed 2618276771), so the bound also allows one flip on an output
// of up to 25× the mean square (the outputs are rotated unit normals: 5σ).
double tolerance(DType out, int64_t elements) {
  switch (out) {
    case DType::f32: return 5e-14;
    case DType::f16: return 0.1 * rounding_nmse(out) + flip_nmse(out, elements, 25.0);
    default: return 0.01 * rounding_nmse(out) + flip_nmse(out, elements, 25.0);
  }
}
const char* kReason =
    "f32: cos/sin of double angles rounded to f32 and one f32 rotation (measured ≤ 3.2e-15); f16/bf16: the "
    "output is rounded once in both, and the f32 kernel lands on the other neighbour only within ~1 f32 ulp "
    "of a rounding midpoint (measured ≤ 0.0056 × rounding_nmse), plus one such flip on a 5-sigma output";

OpCase rope_case(RopeShape s) {
  OpCase c;
  c.op = "rope";
  c.name = "rope/B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" + std::to_string(s.H) + "_D" +
           std::to_string(s.D) + (s.rotary_dim ? "_R" + std::to_string(s.rotary_dim) : "") + "_" + dt(s.in) +
           (s.out != s.in ? "_out" + dt(s.out) : "") +
           (s.layout == ops::RopeLayout::neox ? "_neox" : "_interleaved") +
           (s.positions_tensor ? std::string("_positions") : "_offset" + std::to_string(s.offset)) +
           (s.theta != 10000.0f ? "_theta" + std::to_string(int64_t(s.theta)) : "") + (s.in_place ? "_inplace" : "") +
           scaling_tag(s.scaling) + (s.attention_factor != 1.0f ? fmt::format("_af{}", s.attention_factor) : "") +
           (s.positions_tensor && s.max_position != 8000 ? "_maxpos" + std::to_string(s.max_position) : "") +
           (s.other_heads ? "_headsof" + std::to_string(s.H + s.other_heads) : "");
  c.tolerance = tolerance(s.out, s.B * s.T * s.H * s.D);
  c.reason = kReason;
  c.in_tests = s.in_tests;
  c.build = [s](CaseRun& run) {
    Tensor x = s.other_heads ? run.inout("qkv", s.in, {s.B, s.T, s.H + s.other_heads, s.D}).slice(2, 1, 1 + s.H)
               : s.in_place ? run.inout("x", s.in, {s.B, s.T, s.H, s.D})
                            : run.normal(s.in, {s.B, s.T, s.H, s.D});
    Tensor out = s.in_place || s.other_heads ? x : run.output("out", s.out, {s.B, s.T, s.H, s.D});
    ops::RopeParams p{.layout = s.layout, .theta = s.theta, .rotary_dim = s.rotary_dim};
    if (s.positions_tensor)
      p.positions = run.random_ints({s.B, s.T}, 0, s.max_position);
    else
      p.position_offset = s.offset;
    if (s.scaling) {
      const int64_t R = s.rotary_dim ? s.rotary_dim : s.D;
      const std::vector<float> table = ops::rope_inv_frequencies(s.theta, R, *s.scaling);
      p.inv_freq = run.values(DType::f32, {R / 2}, std::vector<double>(table.begin(), table.end()));
    }
    p.attention_factor = s.attention_factor;
    run.launch = [=](Stream& st) { ops::rope(st, out, x, p); };
    run.cost = ops::cost(ops::RopeArgs{out, x, p});
  };
  return c;
}

}  // namespace

std::vector<OpCase> rope_cases() {
  using ops::RopeLayout;
  std::vector<OpCase> cases;
  for (DType d : {DType::f32, DType::f16, DType::bf16})
    for (RopeLayout layout : {RopeLayout::neox, RopeLayout::interleaved}) {
      cases.push_back(rope_case({1, 1, 1, 64, d, d, layout, 0, false, 0}));
      cases.push_back(rope_case({2, 17, 3, 128, d, d, layout, 0, true}));
      cases.push_back(rope_case({1, 17, 25, 80, d, d, layout, 0, false, 3000}));
      cases.push_back(rope_case({2, 1, 3, 6, d, d, layout, 0, true}));
      cases.push_back(rope_case({1, 17, 3, 80, d, d, layout, 32, false, 100}));  // partial: dims 32..79 copied
      cases.push_back(rope_case({2, 17, 1, 64, d, d, layout, 0, true, 0, 500000.0f, /*in_place=*/true}));
      cases.push_back(rope_case({1, 17, 3, 128, d, d, layout, 64, true, 0, 10000.0f, /*in_place=*/true}));
    }
  // R/2 = 515 frequencies: more than the GPU kernel's 512-entry cos/sin table holds at once.
  cases.push_back(rope_case({1, 2, 2, 1030, DType::f32, DType::f32, RopeLayout::neox, 0, true}));
  cases.push_back(rope_case({1, 2, 2, 1040, DType::bf16, DType::bf16, RopeLayout::interleaved, 1030, true, 0, 10000.0f,
                             /*in_place=*/true}));
  cases.push_back(rope_case({2, 17, 3, 64, DType::bf16, DType::f32, RopeLayout::neox, 0, true}));
  cases.push_back(rope_case({2, 17, 3, 64, DType::f32, DType::f16, RopeLayout::interleaved, 0, true}));
  // Scaled frequencies from a table, each kind in both layouts: llama3 (Llama 3.1: factor 8, bands
  // 1 and 4 over 8192 positions, theta 5·10⁵) with positions up to 20000, past the original 8192;
  // linear (factor 4) with partial rotation; the unscaled table with YaRN-like mscale 1.25; and
  // the mscale alone. f32 shows the op's own error; bf16 and f16 its rounding.
  const ops::RopeScaling llama3{ops::RopeScalingKind::llama3, 8.0, 1.0, 4.0, 8192};
  const ops::RopeScaling linear4{ops::RopeScalingKind::linear, 4.0};
  const ops::RopeScaling unscaled{};
  for (RopeLayout layout : {RopeLayout::neox, RopeLayout::interleaved})
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      RopeShape l3{2, 17, 4, 128, d, d, layout, 0, true, 0, 500000.0f};
      l3.scaling = llama3;
      l3.max_position = 20000;
      cases.push_back(rope_case(l3));
      RopeShape lin{1, 17, 3, 80, d, d, layout, 48, true};
      lin.scaling = linear4;
      cases.push_back(rope_case(lin));
      RopeShape table{2, 5, 3, 64, d, d, layout, 0, false, 3000, 10000.0f, /*in_place=*/true};
      table.scaling = unscaled;
      table.attention_factor = 1.25f;
      cases.push_back(rope_case(table));
      RopeShape mscale{1, 17, 2, 64, d, d, layout, 0, true};
      mscale.attention_factor = 0.7f;
      cases.push_back(rope_case(mscale));
    }
  // A table of 515 frequencies (more than the GPU's 512-entry cos/sin chunk) with llama3 scaling.
  RopeShape wide{1, 2, 2, 1030, DType::f32, DType::f32, RopeLayout::neox, 0, true, 0, 500000.0f};
  wide.scaling = llama3;
  wide.max_position = 30000;
  cases.push_back(rope_case(wide));
  // q or k heads inside a fused q/k/v product: strided views, rotated in place.
  for (DType d : {DType::f32, DType::bf16}) {
    RopeShape fused{3, 9, 4, 64, d, d, RopeLayout::neox, 0, true, 0, 500000.0f, /*in_place=*/true};
    fused.scaling = llama3;
    fused.other_heads = 4;
    cases.push_back(rope_case(fused));
    RopeShape partial{1, 17, 2, 80, d, d, RopeLayout::interleaved, 48, false, 7};
    partial.other_heads = 3;
    partial.in_place = true;
    cases.push_back(rope_case(partial));
  }
  // Bench: a Llama-style 32-head, D = 128 layer over a 256-token prompt and one decode token.
  for (int64_t T : {256, 1})
    for (DType d : {DType::f32, DType::bf16})
      cases.push_back(rope_case({1, T, 32, 128, d, d, RopeLayout::neox, 0, false, T == 1 ? 256 : 0, 10000.0f, true, false}));
  return cases;
}

}  // namespace ding::testing
