// gelu, silu, swiglu, clamp, sigmoid_gate and activation cases: lengths 1, 7 (all tail), 4097 (one past a chunk multiple)
// and 100003 (several OpenMP chunks, odd tail), every dtype, mixed in/out dtypes (and gate/up
// dtypes), in place, and views that start one element into their buffer (unaligned).
// Inputs have σ = 3 so the saturated tails (gelu → 0 and → x) are exercised too, and a third of
// clamp's inputs are clamped. clamp also runs on strided views: the q, k and v parts of a fused
// q/k/v product clamped in place (OLMoE's clip_qkv), and head views into another buffer.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string dt(DType d) { return std::string(dtype_name(d)); }

// f32: measured worst NMSE of the CPU kernels over 2,000 seeds of every case 5.4·10⁻¹⁴ (swiglu
// n = 1), gelu 3.4·10⁻¹⁵ (t is formed in double, so its error is a few ulp whatever |t|). The
// GPU kernels form σ from expf (≤ 2 ulp): silu/swiglu ≤ ~4 ulp, i.e. ≤ 2.3·10⁻¹³ on one element;
// gelu's t < −80 branch squares e^(t/2), ≤ ~6 ulp, 5·10⁻¹³, so gelu keeps a wider bound.
// f16/bf16: measured over 15 seeds ≤ 0.0072 × (f16) and 7·10⁻⁶ × (bf16) rounding_nmse, bounds
// ~15× above; plus one rounding flip (flip_nmse) on an output of up to 40× the mean square (the
// largest of 10⁵ draws of gelu(σ = 3)): swiglu/n1000_f16_inplace failed the bound without it at
// 0.23 × rounding_nmse, and in the one- and seven-element cases one flip is the whole NMSE.
double tolerance(const std::string& op, DType out, int64_t n) {
  switch (out) {
    case DType::f32: return op == "gelu" ? 3e-12 : 5e-13;
    case DType::f16: return 0.1 * rounding_nmse(out) + flip_nmse(out, n, 40.0);
    default: return 0.01 * rounding_nmse(out) + flip_nmse(out, n, 40.0);
  }
}
const char* kReason =
    "f32: a few ulp of exp and division vs double (CPU measured <= 5.4e-14; GPU expf <= 2 ulp, which gelu "
    "squares below t = -80); f16/bf16: the output is rounded once in both, and near a rounding midpoint the "
    "f32 kernel may land on the other neighbour (measured <= 0.0072 x rounding_nmse), plus one such flip on a "
    "40x-mean-square output";

enum class Alias { none, in_place };

// offset: the input (and, in place, the output) is a view starting `offset` elements into its
// buffer, so its data pointer is not 16-byte aligned (the GPU kernels' element-wise path).
// up: the dtype of swiglu's up when it differs from the gate's.
OpCase activation_case(const std::string& op, int64_t n, DType in, DType out, Alias alias = Alias::none,
                       bool in_tests = true, int64_t offset = 0, std::optional<DType> up_dtype = {}) {
  const DType up_type = up_dtype.value_or(in);
  OpCase c;
  c.op = op;
  c.name = op + "/n" + std::to_string(n) + "_" + dt(in) + (up_type != in ? "_up" + dt(up_type) : "") +
           (out != in ? "_out" + dt(out) : "") + (offset ? "_offset" + std::to_string(offset) : "") +
           (alias == Alias::in_place ? "_inplace" : "");
  c.tolerance = tolerance(op, out, n);
  c.reason = kReason;
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    const bool in_place = alias == Alias::in_place;
    Tensor x = in_place ? run.inout("x", in, {n + offset}, 3.0) : run.normal(in, {n + offset}, 3.0);
    x = x.slice(0, offset, n + offset);
    Tensor y = in_place ? x : run.output("out", out, {n});
    if (op == "gelu") {
      run.launch = [=](Stream& s) { ops::gelu(s, y, x); };
      run.cost = ops::cost(ops::GeluArgs{y, x});
    } else if (op == "silu") {
      run.launch = [=](Stream& s) { ops::silu(s, y, x); };
      run.cost = ops::cost(ops::SiluArgs{y, x});
    } else {  // swiglu: x is the gate
      Tensor up = run.normal(up_type, {n});
      run.launch = [=](Stream& s) { ops::swiglu(s, y, x, up); };
      run.cost = ops::cost(ops::SwigluArgs{y, x, up});
    }
  };
  return c;
}

// clamp picks x, lo or hi (all f32 values) and rounds it once to out's dtype, as the reference's
// store does, so every backend's output is the reference's bit for bit.
const char* const kClampReason = "clamp selects x, lo or hi and rounds it once to out's dtype on every backend: compared exactly";

std::string bound_name(float v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{}", v);
}

OpCase clamp_case(const std::string& name, std::function<void(CaseRun&)> build) {
  OpCase c;
  c.op = "clamp";
  c.name = "clamp/" + name;
  c.tolerance = kExactTolerance;
  c.reason = kClampReason;
  c.build = std::move(build);
  return c;
}

// Contiguous [n] (a view `offset` elements into its buffer), out a separate tensor or x itself.
OpCase clamp_flat_case(int64_t n, DType in, DType out, float lo, float hi, Alias alias = Alias::none,
                       int64_t offset = 0, bool in_tests = true) {
  const bool in_place = alias == Alias::in_place;
  OpCase c = clamp_case(fmt::format("n{}_{}{}_lo{}_hi{}{}{}", n, dt(in), out != in ? "_out" + dt(out) : "", bound_name(lo),
                                    bound_name(hi), offset ? "_offset" + std::to_string(offset) : "",
                                    in_place ? "_inplace" : ""),
                        [=](CaseRun& run) {
                          Tensor x = in_place ? run.inout("x", in, {n + offset}, 3.0, {Compare::exact})
                                              : run.normal(in, {n + offset}, 3.0);
                          x = x.slice(0, offset, n + offset);
                          const Tensor y = in_place ? x : run.output("out", out, {n}, {Compare::exact});
                          run.launch = [=](Stream& s) { ops::clamp(s, y, x, lo, hi); };
                          run.cost = ops::cost(ops::ClampArgs{y, x, lo, hi});
                        });
  c.in_tests = in_tests;
  return c;
}

// OLMoE's clip_qkv: the q, k and v parts of a fused [T, (H + 2·Hkv)·D] product, each clamped in
// place to [−clip, clip] as a [T, H·D] (or [T, Hkv·D]) column slice: three calls, one buffer.
// ragged: rows one element longer, so they start at odd offsets (no vectors on the GPU).
OpCase clamp_qkv_case(int64_t T, int64_t H, int64_t Hkv, int64_t D, DType dtype, float clip, bool ragged = false) {
  return clamp_case(fmt::format("qkv_T{}_H{}_Hkv{}_D{}_{}_clip{}{}", T, H, Hkv, D, dt(dtype), bound_name(clip),
                                ragged ? "_ragged" : ""),
                    [=](CaseRun& run) {
                      const int64_t width = (H + 2 * Hkv) * D + (ragged ? 1 : 0);
                      const Tensor qkv = run.inout("qkv", dtype, {T, width}, 3.0, {Compare::exact});
                      const Tensor parts[] = {qkv.slice(1, 0, H * D), qkv.slice(1, H * D, (H + Hkv) * D),
                                              qkv.slice(1, (H + Hkv) * D, (H + 2 * Hkv) * D)};
                      run.launch = [=](Stream& s) {
                        for (const Tensor& part : parts) ops::clamp(s, part, part, -clip, clip);
                      };
                      for (const Tensor& part : parts) {
                        const Cost one = ops::cost(ops::ClampArgs{part, part, -clip, clip});
                        run.cost.flops += one.flops;
                        run.cost.bytes += one.bytes;
                      }
                    });
}

// Heads [1, 1 + H) of a [T, H + 3, D] buffer, as [T, H, D] (strides [(H + 3)·D, D, 1]), clamped
// into heads [2, 2 + H) of a [T, H + 2, D] buffer of another dtype: both strided, not in place.
OpCase clamp_heads_case(int64_t T, int64_t H, int64_t D, DType in, DType out, float lo, float hi) {
  return clamp_case(fmt::format("heads_T{}_H{}_D{}_{}_out{}_lo{}_hi{}", T, H, D, dt(in), dt(out), bound_name(lo),
                                bound_name(hi)),
                    [=](CaseRun& run) {
                      const Tensor x = run.normal(in, {T, H + 3, D}, 3.0).slice(1, 1, 1 + H);
                      const Tensor y = run.inout("out", out, {T, H + 2, D}, 1.0, {Compare::exact}).slice(1, 2, 2 + H);
                      run.launch = [=](Stream& s) { ops::clamp(s, y, x, lo, hi); };
                      run.cost = ops::cost(ops::ClampArgs{y, x, lo, hi});
                    });
}

void add_clamp_cases(std::vector<OpCase>& cases) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : {1, 7, 4097, 100003}) cases.push_back(clamp_flat_case(n, d, d, -2.0f, 1.5f));
    cases.push_back(clamp_flat_case(1000, d, d, -1.0f, 1.0f, Alias::in_place));
  }
  cases.push_back(clamp_flat_case(333, DType::bf16, DType::f32, -0.75f, 2.0f));
  cases.push_back(clamp_flat_case(333, DType::f32, DType::f16, -3.0f, 0.1f));  // hi rounds in f16
  // One side open, and lo = hi (every output is that value).
  cases.push_back(clamp_flat_case(1001, DType::f32, DType::bf16, -inf, 0.5f));
  cases.push_back(clamp_flat_case(1001, DType::f16, DType::f16, 0.0f, inf));
  cases.push_back(clamp_flat_case(77, DType::f32, DType::f32, 0.25f, 0.25f));
  // Unaligned: views one element into their buffers.
  cases.push_back(clamp_flat_case(4099, DType::f16, DType::f16, -1.0f, 2.0f, Alias::in_place, 1));
  cases.push_back(clamp_flat_case(333, DType::f32, DType::bf16, -1.0f, 2.0f, Alias::none, 1));
  // Strided: q, k, v in place (MHA and GQA widths, ragged rows), and head views between buffers.
  cases.push_back(clamp_qkv_case(5, 4, 4, 64, DType::f32, 2.5f));
  cases.push_back(clamp_qkv_case(17, 8, 2, 16, DType::bf16, 1.0f));
  cases.push_back(clamp_qkv_case(3, 3, 1, 7, DType::f16, 4.0f, /*ragged=*/true));
  cases.push_back(clamp_qkv_case(1, 16, 4, 128, DType::bf16, 8.0f, /*ragged=*/true));
  cases.push_back(clamp_heads_case(9, 4, 64, DType::bf16, DType::bf16, -1.5f, 3.0f));
  cases.push_back(clamp_heads_case(4, 2, 33, DType::f32, DType::f16, -2.0f, 0.5f));
  // Bench: clip_qkv over a 256-token prompt's fused q/k/v at OLMoE-1B-7B's shape (H = Hkv = 16, D = 128).
  OpCase bench = clamp_qkv_case(256, 16, 16, 128, DType::bf16, 8.0f);
  bench.in_tests = false;
  cases.push_back(bench);
}

// sigmoid_gate: Qwen3-Next's attention output gate, x = the attention's [T, H, D] output gated in
// place by the gate half of each head's [q | gate] rows of the q projection ([T, H, 2D], strides
// [2HD, 2D, 1]); and its shared expert's gate, one logit per row of a [T, F] hidden. Also flat,
// mixed dtypes and out-of-place. Same bound and reason as the activations: one σ and one product.
OpCase sigmoid_gate_case(int64_t T, int64_t H, int64_t D, DType x_dtype, DType gate_dtype, DType out_dtype, bool per_row,
                         bool in_place, bool in_tests = true) {
  OpCase c;
  c.op = "sigmoid_gate";
  c.name = fmt::format("sigmoid_gate/T{}_H{}_D{}_{}_gate{}_out{}{}{}", T, H, D, dt(x_dtype), dt(gate_dtype), dt(out_dtype),
                       per_row ? "_per_row" : "_heads", in_place ? "_inplace" : "");
  c.tolerance = tolerance("sigmoid_gate", out_dtype, T * H * D);
  c.reason = kReason;
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    const Tensor x = in_place ? run.inout("x", x_dtype, {T, H, D}, 3.0) : run.normal(x_dtype, {T, H, D}, 3.0);
    const Tensor gate = per_row ? run.normal(gate_dtype, {T, H + 1, 1}, 3.0).slice(1, 1, H + 1)
                                : run.normal(gate_dtype, {T, H, 2 * D}, 3.0).slice(2, D, 2 * D);
    const Tensor y = in_place ? x : run.output("out", out_dtype, {T, H, D});
    run.launch = [=](Stream& s) { ops::sigmoid_gate(s, y, x, gate); };
    run.cost = ops::cost(ops::SigmoidGateArgs{y, x, gate});
  };
  return c;
}

void add_sigmoid_gate_cases(std::vector<OpCase>& cases) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back(sigmoid_gate_case(7, 4, 33, d, d, d, false, true));
    cases.push_back(sigmoid_gate_case(5, 3, 40, d, d, d, true, true));
  }
  cases.push_back(sigmoid_gate_case(1, 1, 1, DType::f32, DType::f32, DType::f32, true, false));
  cases.push_back(sigmoid_gate_case(3, 2, 1100, DType::bf16, DType::f32, DType::f32, false, false));
  cases.push_back(sigmoid_gate_case(9, 1, 517, DType::f32, DType::bf16, DType::f16, true, false));
  // Bench: Qwen3-Next-80B's attention gate for a 256-token prefill (16 heads of 256).
  cases.push_back(sigmoid_gate_case(256, 16, 256, DType::bf16, DType::bf16, DType::bf16, false, true, false));
}

// activation: every function plain and gated over [rows, N] (N odd, so no row is a whole number
// of vectors), in place where plain, mixed dtypes; the bound and reason of gelu (one f32 function
// of a few ulp, and for gated one product more).
OpCase fn_case(ops::ActivationFn fn, bool gated, int64_t rows, int64_t N, DType in, DType out, bool in_place = false,
               bool in_tests = true) {
  OpCase c;
  c.op = "activation";
  c.name = fmt::format("activation/{}{}_{}x{}_{}{}{}", ops::activation_fn_name(fn), gated ? "_gated" : "", rows, N, dt(in),
                       out != in ? "_out" + dt(out) : "", in_place ? "_inplace" : "");
  c.tolerance = tolerance("gelu", out, rows * N);
  c.reason = kReason;
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    const int64_t cols = gated ? 2 * N : N;
    const Tensor x = in_place ? run.inout("x", in, {rows, cols}, 3.0) : run.normal(in, {rows, cols}, 3.0);
    const Tensor y = in_place ? x : run.output("out", out, {rows, N});
    run.launch = [=](Stream& s) { ops::activation(s, y, x, fn, gated); };
    run.cost = ops::cost(ops::ActivationArgs{y, x, fn, gated});
  };
  return c;
}

void add_fn_cases(std::vector<OpCase>& cases) {
  using ops::ActivationFn;
  for (ActivationFn fn :
       {ActivationFn::silu, ActivationFn::gelu_erf, ActivationFn::gelu_tanh, ActivationFn::quick_gelu, ActivationFn::relu})
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      cases.push_back(fn_case(fn, false, 3, 37, d, d));
      cases.push_back(fn_case(fn, true, 3, 37, d, d));
      cases.push_back(fn_case(fn, false, 1, 4099, d, d, /*in_place=*/true));
    }
  cases.push_back(fn_case(ActivationFn::gelu_erf, true, 5, 1001, DType::bf16, DType::f32));
  cases.push_back(fn_case(ActivationFn::relu, true, 2, 513, DType::f32, DType::f16));
  cases.push_back(fn_case(ActivationFn::gelu_erf, false, 1, 1, DType::f32, DType::f32));
  // Bench: a gated GELU feed-forward's hidden layer at Llama-3.2-1B's width (F = 8192) for a
  // 256-token prefill and one decode token.
  for (int64_t tokens : {256, 1}) cases.push_back(fn_case(ActivationFn::gelu_erf, true, tokens, 8192, DType::bf16, DType::bf16, false, false));
}

}  // namespace

std::vector<OpCase> activation_cases() {
  std::vector<OpCase> cases;
  for (const std::string op : {"gelu", "silu", "swiglu"}) {
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      for (int64_t n : {1, 7, 4097, 100003}) cases.push_back(activation_case(op, n, d, d));
      cases.push_back(activation_case(op, 1000, d, d, Alias::in_place));
    }
    cases.push_back(activation_case(op, 333, DType::bf16, DType::f32));
    cases.push_back(activation_case(op, 333, DType::f32, DType::f16));
    // Views one element into their buffers: unaligned, so vectorised kernels go element-wise.
    cases.push_back(activation_case(op, 4099, DType::f16, DType::f16, Alias::in_place, true, 1));
    cases.push_back(activation_case(op, 333, DType::f32, DType::bf16, Alias::none, true, 1));
    // swiglu with gate and up in different dtypes.
    if (op == "swiglu")
      cases.push_back(activation_case(op, 1001, DType::bf16, DType::f16, Alias::none, true, 0, DType::f32));
    // Bench: gpt2-xl MLP hidden layer (4C = 6400) for a 256-token prefill and one decode token.
    for (int64_t tokens : {256, 1})
      for (DType d : {DType::f32, DType::bf16})
        cases.push_back(activation_case(op, tokens * 6400, d, d, Alias::none, /*in_tests=*/false));
  }
  add_clamp_cases(cases);
  add_sigmoid_gate_cases(cases);
  add_fn_cases(cases);
  return cases;
}

}  // namespace ding::testing
