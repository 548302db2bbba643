// layer_norm and rms_norm cases: C from 1 to 12288 (odd, below and above the 8-lane width,
// gpt2-xl's 1600, and past what the GPU keeps in registers), 1 to 64 rows, every dtype with
// weights in another dtype, bias on and off, each residual mode: none, residual only,
// residual + separate sum_out, sum_out == x and sum_out == residual (both in place), a
// residual stream in another dtype than x, and strided row tensors: the q part of a fused q/k/v
// product as one row per token (a column slice) or one per head (a rank-3 view), with out,
// residual and sum_out views of buffers of other widths, so each tensor has its own strides; and a
// weight row per head (weight [heads, C]), two projections normalised in one call; rms_norm with a
// gate (out ·= silu(gate)) in every layout, the gate a row tensor of its own strides or dtype.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string dt(DType d) { return std::string(dtype_name(d)); }

enum class Residual { none, add, sum_out, sum_into_x, sum_into_residual };

const char* residual_name(Residual r) {
  switch (r) {
    case Residual::none: return "";
    case Residual::add: return "_residual";
    case Residual::sum_out: return "_residual_sumout";
    case Residual::sum_into_x: return "_residual_sumout_is_x";
    case Residual::sum_into_residual: return "_residual_sumout_is_residual";
  }
  return "";
}

// Measured worst NMSE over 15 seeds of every case: f32 1.9·10⁻¹³ for layer_norm (C = 3: h − mean
// cancels, so one element's few-ulp error is the whole NMSE) and 1.8·10⁻¹⁴ for rms_norm; f16
// 0.027 × and bf16 0.0035 × rounding_nmse. Bounds ~15× above. A 16-bit output that lands on the
// other neighbour costs ulp² · v² / Σout², which for a few outputs is far above any share of
// rounding_nmse (layer_norm rows3_C3 bf16: 1.6·10⁻⁶ from one of 9 outputs, seed 3254552046): so
// each bound also allows one such output, at up to 18 × the mean square (rows normalised to mean
// square 1 times weights in [0.5, 1.5]), which adds nothing that matters once there are thousands.
double tolerance(const std::string& op, DType out, int64_t outputs, bool gate) {
  const double one_flip = flip_nmse(out, outputs, 18.0);
  switch (out) {
    case DType::f32: return op == "layer_norm" || gate ? 3e-12 : 3e-13;
    case DType::f16: return 0.5 * rounding_nmse(out) + one_flip;
    default: return 0.05 * rounding_nmse(out) + one_flip;
  }
}
const char* kReason =
    "f32: f32 row statistics vs double, cancellation in h - mean for tiny C (measured ≤ 1.9e-13); f16/bf16: "
    "out and sum_out are rounded once in both, and the f32 kernel lands on the other neighbour only within "
    "~1 f32 ulp of a rounding midpoint (measured ≤ 0.027 / 0.0035 × rounding_nmse), plus one such output "
    "at up to 18× the mean square (what one flip costs among a few outputs); gated f32: measured ≤ 4.7e-14 (cpu, "
    "12 seeds), bounded as layer_norm is since the GPU's expf and divide were not measured across seeds";

// How the row tensors lie in memory: contiguous [rows, C]; `columns`: [rows, C] column slices of
// wider buffers (a token's q inside its q/k/v row, normalised as one row); `heads`: [rows, heads,
// C] views of `heads` consecutive heads of C in wider rows (Qwen3's per-head q/k norm).
enum class Layout { contiguous, columns, heads };

struct NormShape {
  int64_t rows, C;
  DType x, weight;
  Residual residual = Residual::none;
  bool bias = false;  // layer_norm only
  bool in_tests = true;
  std::optional<DType> stream;  // residual's dtype (and sum_out's, unless it is x) when not x's
  Layout layout = Layout::contiguous;
  int64_t heads = 1;    // Layout::heads only
  bool ragged = false;  // strided layouts: rows one element wider, so they start at odd offsets
  bool weight_per_head = false;  // Layout::heads only: weight (and bias) [heads, C], a row per head
  std::optional<DType> gate;     // rms_norm only: out ·= silu(gate), gate of this dtype
};

std::string layout_name(const NormShape& s) {
  const char* ragged = s.ragged ? "_ragged" : "";
  switch (s.layout) {
    case Layout::contiguous: return "";
    case Layout::columns: return std::string("_columns") + ragged;
    case Layout::heads: return std::string("_heads") + ragged + (s.weight_per_head ? "_weight_per_head" : "");
  }
  return "";
}

enum class Kind { input, inout, output };

// A row tensor of the case. Strided layouts view `heads` groups of C at group `first` of buffer
// rows of heads + pad groups (+ 1 element if ragged); pad and first differ per tensor, so no two
// tensors share strides or row starts. The buffers of outputs are in-out, so the elements around
// the view come back as they were and compare equal.
Tensor row_tensor(CaseRun& run, const NormShape& s, Kind kind, const char* name, DType dtype, int64_t pad,
                  int64_t first) {
  if (s.layout == Layout::contiguous) {
    switch (kind) {
      case Kind::input: return run.normal(dtype, {s.rows, s.C});
      case Kind::inout: return run.inout(name, dtype, {s.rows, s.C});
      case Kind::output: return run.output(name, dtype, {s.rows, s.C});
    }
  }
  const int64_t width = (s.heads + pad) * s.C + (s.ragged ? 1 : 0);
  Tensor t = (kind == Kind::input ? run.normal(dtype, {s.rows, width}) : run.inout(name, dtype, {s.rows, width}))
                 .slice(1, first * s.C, (first + s.heads) * s.C);
  if (s.layout == Layout::heads) {  // [rows, heads·C] → [rows, heads, C], strides [width, C, 1]
    t.rank = 3;
    t.shape = {s.rows, s.heads, s.C};
    t.strides = {width, s.C, 1};
  }
  return t;
}

OpCase norm_case(const std::string& op, NormShape s) {
  OpCase c;
  c.op = op;
  c.name = op + "/rows" + std::to_string(s.rows) + (s.layout == Layout::heads ? "_H" + std::to_string(s.heads) : "") +
           "_C" + std::to_string(s.C) + "_" + dt(s.x) + (s.weight != s.x ? "_w" + dt(s.weight) : "") +
           (s.stream ? "_stream" + dt(*s.stream) : "") + (s.bias ? "_bias" : "") + residual_name(s.residual) +
           (s.gate ? "_gate" + dt(*s.gate) : "") + layout_name(s);
  c.tolerance = tolerance(op, s.x, s.rows * s.heads * s.C, s.gate.has_value());
  c.reason = kReason;
  c.in_tests = s.in_tests;
  c.build = [op, s](CaseRun& run) {
    const int64_t C = s.C;
    const DType stream = s.stream.value_or(s.x);
    // x: the q part of a fused q/k/v product (k and v as wide as q, or half as wide per head).
    const int64_t kv = s.layout == Layout::heads ? s.heads : 2;
    Tensor x = row_tensor(run, s, s.residual == Residual::sum_into_x ? Kind::inout : Kind::input, "x", s.x, kv, 0);
    // Per head: a [heads · C] tensor viewed as [heads, C].
    const int64_t weight_rows = s.weight_per_head ? s.heads : 1;
    auto per_head = [&](Tensor t) { return s.weight_per_head ? t.reshape({s.heads, C}) : t; };
    Tensor weight = per_head(run.uniform(s.weight, {weight_rows * C}, 0.5, 1.5));
    Tensor residual, sum_out;
    switch (s.residual) {
      case Residual::none: break;
      case Residual::add: residual = row_tensor(run, s, Kind::input, "residual", stream, 3, 1); break;
      case Residual::sum_out:
        residual = row_tensor(run, s, Kind::input, "residual", stream, 3, 1);
        sum_out = row_tensor(run, s, Kind::output, "sum_out", stream, 5, 4);
        break;
      case Residual::sum_into_x:
        residual = row_tensor(run, s, Kind::input, "residual", stream, 3, 1);
        sum_out = x;
        break;
      case Residual::sum_into_residual:
        residual = row_tensor(run, s, Kind::inout, "residual", stream, 3, 1);
        sum_out = residual;
        break;
    }
    Tensor out = row_tensor(run, s, Kind::output, "out", s.x, 1, 1);
    if (op == "layer_norm") {
      ops::LayerNormParams p{.bias = s.bias ? per_head(run.normal(s.weight, {weight_rows * C}, 0.1)) : Tensor{}, .residual = residual,
                             .sum_out = sum_out};
      run.launch = [=](Stream& st) { ops::layer_norm(st, out, x, weight, p); };
      run.cost = ops::cost(ops::LayerNormArgs{out, x, weight, p});
    } else {
      // The gate as z sits beside o's heads in Qwen3-Next's fused projection: a view of its own.
      const Tensor gate = s.gate ? row_tensor(run, s, Kind::input, "gate", *s.gate, 6, 3) : Tensor{};
      ops::RmsNormParams p{.residual = residual, .sum_out = sum_out, .gate = gate};
      run.launch = [=](Stream& st) { ops::rms_norm(st, out, x, weight, p); };
      run.cost = ops::cost(ops::RmsNormArgs{out, x, weight, p});
    }
  };
  return c;
}

}  // namespace

std::vector<OpCase> norm_cases() {
  std::vector<OpCase> cases;
  const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};
  // The weight dtype each activation dtype is paired with when they differ.
  auto other = [](DType d) { return d == DType::f32 ? DType::bf16 : DType::f32; };
  for (const std::string op : {"layer_norm", "rms_norm"}) {
    const bool ln = op == "layer_norm";
    for (DType d : kFloats) {
      // Every width, rows cycling through 1, 3, 64; bias alternating for layer_norm.
      const int64_t widths[] = {1, 3, 17, 1600, 4097}, row_counts[] = {1, 3, 64};
      for (int i = 0; i < 5; ++i)
        cases.push_back(norm_case(op, {row_counts[i % 3], widths[i], d, i % 2 ? other(d) : d, Residual::none, ln && i % 2 == 0}));
      // Every residual mode, at a narrow odd width and at gpt2-xl's.
      for (Residual r : {Residual::add, Residual::sum_out, Residual::sum_into_x, Residual::sum_into_residual}) {
        cases.push_back(norm_case(op, {3, 17, d, d, r, ln}));
        cases.push_back(norm_case(op, {64, 1600, d, other(d), r, false}));
      }
    }
    // Residual in place at the widest row and a single row.
    cases.push_back(norm_case(op, {1, 4097, DType::bf16, DType::bf16, Residual::sum_into_residual, ln}));
    // Rows longer than the GPU kernels keep in registers (8 per thread of 1024): re-read per pass,
    // element-wise (odd C) and in 16-byte vectors, with sum_out in place.
    cases.push_back(norm_case(op, {2, 9001, DType::f32, DType::f32, Residual::none, ln}));
    cases.push_back(norm_case(op, {2, 12288, DType::bf16, DType::f32, Residual::sum_into_x, ln}));
    // The residual stream in f32, x and out in bf16/f16 (sum_out: an f32 add rounds the exact sum
    // once, as the reference's store does): the GPU's mixed-dtype path, warp and block rows.
    cases.push_back(norm_case(op, {.rows = 3, .C = 17, .x = DType::bf16, .weight = DType::f32,
                                   .residual = Residual::sum_out, .bias = ln, .stream = DType::f32}));
    cases.push_back(norm_case(op, {.rows = 2, .C = 1600, .x = DType::f16, .weight = DType::f16,
                                   .residual = Residual::sum_into_residual, .stream = DType::f32}));
    // Strided row tensors, each with its own strides: q of a fused q/k/v product normalised per
    // token (columns: OLMoE's q_norm over H·D) or per head (heads: Qwen3's over D), with every
    // residual mode; warp and block rows, the register and the streaming forms, 16-byte vectors
    // and (ragged rows, odd C, mixed dtypes) single elements.
    const Layout columns = Layout::columns, heads = Layout::heads;
    cases.push_back(norm_case(op, {.rows = 5, .C = 64, .x = DType::f32, .weight = DType::f32, .layout = columns}));
    cases.push_back(norm_case(op, {.rows = 3, .C = 17, .x = DType::bf16, .weight = DType::f32,
                                   .residual = Residual::sum_out, .bias = ln, .layout = columns}));
    cases.push_back(norm_case(op, {.rows = 4, .C = 1600, .x = DType::bf16, .weight = DType::bf16,
                                   .residual = Residual::sum_into_residual, .layout = columns, .ragged = true}));
    cases.push_back(norm_case(op, {.rows = 2, .C = 9000, .x = DType::bf16, .weight = DType::f32,
                                   .residual = Residual::sum_into_x, .bias = ln, .layout = columns}));
    cases.push_back(norm_case(op, {.rows = 3, .C = 64, .x = DType::bf16, .weight = DType::bf16,
                                   .residual = Residual::sum_out, .layout = heads, .heads = 4}));
    cases.push_back(norm_case(op, {.rows = 5, .C = 128, .x = DType::f16, .weight = DType::f32,
                                   .residual = Residual::sum_into_x, .bias = ln, .layout = heads, .heads = 2,
                                   .ragged = true}));
    cases.push_back(norm_case(op, {.rows = 17, .C = 16, .x = DType::f32, .weight = DType::f32,
                                   .residual = Residual::add, .layout = heads, .heads = 8}));
    cases.push_back(norm_case(op, {.rows = 3, .C = 64, .x = DType::bf16, .weight = DType::f32,
                                   .residual = Residual::sum_into_residual, .stream = DType::f32, .layout = heads,
                                   .heads = 2}));
    // A weight row per head (weight [heads, C]): OLMoE's q and k projections normalised in one call,
    // each over H·D with its own weights, at a decode token and a few prefill rows; and small heads
    // of a warp each, with a residual and (layer_norm) a bias of the same shape.
    cases.push_back(norm_case(op, {.rows = 1, .C = 2048, .x = DType::bf16, .weight = DType::bf16, .layout = heads,
                                   .heads = 2, .weight_per_head = true}));
    cases.push_back(norm_case(op, {.rows = 3, .C = 256, .x = DType::f32, .weight = DType::f32, .layout = heads,
                                   .heads = 2, .weight_per_head = true}));
    cases.push_back(norm_case(op, {.rows = 5, .C = 17, .x = DType::f16, .weight = DType::f32, .residual = Residual::sum_out,
                                   .bias = ln, .layout = heads, .heads = 3, .ragged = true, .weight_per_head = true}));
    if (!ln) {
      // Gated: every dtype in registers and streaming; Qwen3-Next's norm(o)·silu(z), per head over
      // Dv with z a view into the fused projection (heads), at a decode token and a few prefill rows,
      // ragged (single elements); the gate in another dtype (the mixed path) and with a residual.
      for (DType d : kFloats) {
        cases.push_back(norm_case(op, {.rows = 3, .C = 17, .x = d, .weight = d, .gate = d}));
        cases.push_back(norm_case(op, {.rows = 2, .C = 9001, .x = d, .weight = DType::f32, .gate = d}));
        cases.push_back(norm_case(op, {.rows = 1, .C = 128, .x = d, .weight = d, .layout = heads, .heads = 32, .gate = d}));
      }
      cases.push_back(norm_case(op, {.rows = 5, .C = 128, .x = DType::bf16, .weight = DType::bf16, .layout = heads,
                                     .heads = 4, .gate = DType::bf16}));
      cases.push_back(norm_case(op, {.rows = 3, .C = 64, .x = DType::f16, .weight = DType::f32, .layout = heads,
                                     .heads = 3, .ragged = true, .gate = DType::f16}));
      cases.push_back(norm_case(op, {.rows = 3, .C = 1600, .x = DType::bf16, .weight = DType::bf16,
                                     .residual = Residual::sum_out, .layout = columns, .gate = DType::f32}));
    }
    // Bench: gpt2-xl prefill (256 tokens) and decode (1 token), the fused residual form blocks use.
    for (int64_t rows : {256, 1})
      for (DType d : {DType::f32, DType::bf16})
        cases.push_back(norm_case(op, {rows, 1600, d, d, Residual::sum_into_residual, ln, /*in_tests=*/false}));
  }
  return cases;
}

}  // namespace ding::testing
