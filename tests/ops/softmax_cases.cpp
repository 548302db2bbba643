// softmax cases: row lengths around the 8-lane width, the gpt2-xl attention shape and a
// vocabulary (50257), scale, causal masks with Tq = Tk and Tq < Tk (decode-like), in place,
// mixed in/out dtypes, and rows whose logits are so negative that exp underflows unless the
// max is subtracted first.
#include <string>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string dt(DType d) { return std::string(dtype_name(d)); }

// The case API takes shapes as initializer lists; softmax cases come in ranks 2 to 4.
template <class Make>
Tensor with_shape(const std::vector<int64_t>& d, Make make) {
  switch (d.size()) {
    case 2: return make({d[0], d[1]});
    case 3: return make({d[0], d[1], d[2]});
    default: return make({d[0], d[1], d[2], d[3]});
  }
}

// Measured worst NMSE over 15 seeds of every case: f32 6.5·10⁻¹⁴ (with the CPU row sum still in
// f32, which at Tk = 50257 later reached 1.2·10⁻¹², 1 run in 200: it is in double now), f16
// 0.032 × and bf16 0.0037 × rounding_nmse; bounds ~15× above. Plus one rounding flip (flip_nmse)
// on an output that carries up to its whole row's Σp² (a peaked row puts nearly all of it in one
// probability; rows are drawn alike, so that is 1/rows of the case's):
// rows3_Tk37_hugenegative f16 failed without it at 0.74 × rounding_nmse, seed 2772834936.
double tolerance(DType out, int64_t elements, int64_t row_length) {
  switch (out) {
    case DType::f32: return 1e-12;
    case DType::f16: return 0.5 * rounding_nmse(out) + flip_nmse(out, elements, double(row_length));
    default: return 0.05 * rounding_nmse(out) + flip_nmse(out, elements, double(row_length));
  }
}
const char* kReason =
    "f32: ~1-ulp vector exp, row sums in double (CPU) or f32 trees (GPU) vs double (measured ≤ 6.5e-14); "
    "f16/bf16: the output is rounded once in both, and the f32 kernel lands on the other neighbour only for "
    "values within ~1 f32 ulp of a rounding midpoint (measured ≤ 0.032 / 0.0037 × rounding_nmse), plus one such "
    "flip on an output holding its whole row's sum of squares";

OpCase softmax_case(std::string params, DType in, DType out, std::initializer_list<int64_t> shape, ops::SoftmaxParams p,
                    bool in_place = false, double stddev = 2.0, bool in_tests = true) {
  OpCase c;
  c.op = "softmax";
  c.name = "softmax/" + params + "_" + dt(in) + (out != in ? "_out" + dt(out) : "") + (in_place ? "_inplace" : "") +
           (p.causal ? "_causal" : "") + (p.scale != 1.0f ? "_scaled" : "");
  const std::vector<int64_t> dims(shape);
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  c.tolerance = tolerance(out, elements, dims.back());
  c.reason = kReason;
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    Tensor x, y;
    if (in_place) {
      x = with_shape(dims, [&](std::initializer_list<int64_t> s) { return run.inout("x", in, s, stddev); });
      y = x;
    } else {
      x = with_shape(dims, [&](std::initializer_list<int64_t> s) { return run.normal(in, s, stddev); });
      y = with_shape(dims, [&](std::initializer_list<int64_t> s) { return run.output("out", out, s); });
    }
    run.launch = [=](Stream& s) { ops::softmax(s, y, x, p); };
    run.cost = ops::cost(ops::SoftmaxArgs{y, x, p});
  };
  return c;
}

}  // namespace

std::vector<OpCase> softmax_cases() {
  std::vector<OpCase> cases;
  const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};
  for (DType d : kFloats) {
    for (int64_t Tk : {1, 7, 17, 256, 4097})
      cases.push_back(softmax_case("rows3_Tk" + std::to_string(Tk), d, d, {3, Tk}, {}));
    cases.push_back(softmax_case("rows64_Tk33", d, d, {64, 33}, {.scale = 0.125f}));
    cases.push_back(softmax_case("B2_H3_Tq17_Tk17", d, d, {2, 3, 17, 17}, {.scale = 0.125f, .causal = true}));
    cases.push_back(softmax_case("B1_H2_Tq5_Tk40", d, d, {1, 2, 5, 40}, {.causal = true}));
    cases.push_back(softmax_case("H4_Tq1_Tk19", d, d, {4, 1, 19}, {.causal = true}));
    cases.push_back(softmax_case("rows5_Tk100", d, d, {5, 100}, {}, /*in_place=*/true));
    cases.push_back(softmax_case("H3_Tq9_Tk9", d, d, {3, 9, 9}, {.causal = true}, /*in_place=*/true));
  }
  // Rows longer than the GPU kernels keep in registers (8 per thread of 1024): streamed with a
  // running max, element-wise (a vocabulary row, odd) and in 16-byte vectors (causal, in place);
  // and a causal block-wide row whose masked boundary falls inside vectors.
  for (DType d : {DType::f32, DType::bf16}) cases.push_back(softmax_case("rows2_Tk50257", d, d, {2, 50257}, {}));
  cases.push_back(softmax_case("H2_Tq3_Tk12288", DType::bf16, DType::bf16, {2, 3, 12288}, {.causal = true}, true));
  cases.push_back(softmax_case("B1_H2_Tq64_Tk1024", DType::f16, DType::f16, {1, 2, 64, 1024},
                               {.scale = 0.125f, .causal = true}));
  cases.push_back(softmax_case("rows4_Tk50", DType::bf16, DType::f32, {4, 50}, {}));
  cases.push_back(softmax_case("rows4_Tk50", DType::f32, DType::bf16, {4, 50}, {}));
  cases.push_back(softmax_case("rows4_Tk50", DType::f16, DType::f32, {4, 50}, {.scale = 0.5f}));

  // Logits around −3·10⁴ (representable in f16): without max subtraction every exp underflows
  // to 0 and the row becomes 0/0. A few very negative outliers underflow individually.
  for (DType d : kFloats) {
    OpCase c;
    c.op = "softmax";
    c.name = "softmax/rows3_Tk37_hugenegative_" + dt(d);
    c.tolerance = tolerance(d, 3 * 37, 37);  // the shape below: 3 rows of 37
    c.reason = kReason;
    c.build = [d](CaseRun& run) {
      std::normal_distribution<double> noise(0.0, 2.0);
      std::vector<double> v(3 * 37);
      for (size_t i = 0; i < v.size(); ++i) v[i] = (i < 37 ? -30000.0 : 0.0) + noise(run.rng);
      for (size_t i : {40, 41, 80, 110}) v[i] = -60000.0;
      Tensor x = run.values(d, {3, 37}, v), y = run.output("out", d, {3, 37});
      run.launch = [=](Stream& s) { ops::softmax(s, y, x); };
      run.cost = ops::cost(ops::SoftmaxArgs{y, x, {}});
    };
    cases.push_back(c);
  }

  // gpt2-xl attention probabilities: 25 heads × 256 queries × 256 keys, causal.
  for (DType d : kFloats)
    cases.push_back(softmax_case("gpt2xl_H25_Tq256_Tk256", d, d, {1, 25, 256, 256}, {.scale = 0.125f, .causal = true},
                                 false, 2.0, /*in_tests=*/false));
  return cases;
}

}  // namespace ding::testing
