// Parity cases for argmax, top_k and sample.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <set>

#include "op_cases.h"

namespace ding::testing {

namespace {

const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

// Logits drawn from {-2, …, 2}: each row has its maximum (and every rank) many times over, so
// the "lower index first" rule decides every answer.
Tensor tied_logits(CaseRun& run, DType dtype, int64_t B, int64_t V) {
  std::uniform_int_distribution<int> pick(-2, 2);
  std::vector<double> v(size_t(B * V));
  for (double& x : v) x = pick(run.rng);
  return run.values(dtype, {B, V}, v);
}

// Language-model-like logits: normal with stddev 3 (a few dominant tokens, a long tail).
Tensor lm_logits(CaseRun& run, DType dtype, int64_t B, int64_t V, bool tied) {
  return tied ? tied_logits(run, dtype, B, V) : run.normal(dtype, {B, V}, 3.0);
}

OpCase argmax_case(int64_t B, int64_t V, DType dtype, bool tied, bool in_tests) {
  OpCase c;
  c.op = "argmax";
  c.name = fmt::format("argmax/{}B{}_V{}_{}{}", in_tests ? "" : "bench_", B, V, dtype_name(dtype), tied ? "_ties" : "");
  c.tolerance = 1e-30;
  c.reason = "the only output is an index, compared exactly";
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    Tensor logits = lm_logits(run, dtype, B, V, tied);
    Tensor out = run.output("out", DType::i32, {B}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::argmax(st, out, logits); };
    run.cost = ops::cost(ops::ArgmaxArgs{out, logits});
  };
  return c;
}

// Rows with NaN, +Inf and -Inf scattered at random positions (row r holds r of them, some rows
// none), among normal logits: the counts are compared exactly.
OpCase count_nonfinite_case(int64_t B, int64_t N, DType dtype) {
  OpCase c;
  c.op = "count_nonfinite";
  c.name = fmt::format("count_nonfinite/B{}_N{}_{}", B, N, dtype_name(dtype));
  c.tolerance = 1e-30;
  c.reason = "the outputs are counts, compared exactly";
  c.build = [=](CaseRun& run) {
    std::normal_distribution<double> normal(0.0, 3.0);
    std::uniform_int_distribution<int64_t> position(0, N - 1);
    const double specials[] = {std::nan(""), INFINITY, -INFINITY};
    std::vector<double> v(size_t(B * N));
    for (double& x : v) x = normal(run.rng);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t i = 0; i < r % 4 * (N / 7 + 1); ++i) v[size_t(r * N + position(run.rng))] = specials[i % 3];
    const Tensor x = run.values(dtype, {B, N}, v);
    const Tensor out = run.output("out", DType::i32, {B}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::count_nonfinite(st, out, x); };
    run.cost = ops::cost(ops::CountNonfiniteArgs{out, x});
  };
  return c;
}

// Rows built to decide argmax by its rules alone: the maximum in the last element (the end of
// a GPU block's strided pass), a tie between the 8th and the last element, every value equal,
// and a maximum of 0 as -0 before +0 (equal values: the lower index).
OpCase argmax_edges_case(int64_t V, DType dtype) {
  OpCase c;
  c.op = "argmax";
  c.name = fmt::format("argmax/edges_B4_V{}_{}", V, dtype_name(dtype));
  c.tolerance = 1e-30;
  c.reason = "the only output is an index, compared exactly";
  c.build = [=](CaseRun& run) {
    std::normal_distribution<double> normal(0.0, 3.0);
    std::vector<double> v(size_t(4 * V));
    for (double& x : v) x = normal(run.rng);
    double* row = v.data();
    row[V - 1] = 100;                                    // row 0: the last element
    row += V;
    row[7] = row[V - 1] = 100;                           // row 1: index 7
    row += V;
    for (int64_t i = 0; i < V; ++i) row[i] = -1.5;       // row 2: index 0
    row += V;
    for (int64_t i = 0; i < V; ++i) row[i] = -1.0 - double(i % 3);
    row[5] = -0.0, row[9] = 0.0;                         // row 3: index 5
    Tensor logits = run.values(dtype, {4, V}, v);
    Tensor out = run.output("out", DType::i32, {4}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::argmax(st, out, logits); };
    run.cost = ops::cost(ops::ArgmaxArgs{out, logits});
  };
  return c;
}

OpCase top_k_case(int64_t B, int64_t V, int64_t k, DType dtype, bool tied, bool in_tests) {
  OpCase c;
  c.op = "top_k";
  c.name = fmt::format("top_k/{}B{}_V{}_k{}_{}{}", in_tests ? "" : "bench_", B, V, k, dtype_name(dtype), tied ? "_ties" : "");
  // values are copies of logits widened to f32 (exact for every input dtype), so once the
  // indices agree exactly the values are identical: any NMSE above 0 is a wrong element.
  c.tolerance = 1e-30;
  c.reason = "values are exact f32 copies of the chosen logits";
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    Tensor logits = lm_logits(run, dtype, B, V, tied);
    Tensor values = run.output("values", DType::f32, {B, k});
    Tensor indices = run.output("indices", DType::i32, {B, k}, {Compare::exact});
    run.launch = [=](Stream& st) { ops::top_k(st, values, indices, logits); };
    run.cost = ops::cost(ops::TopKArgs{values, indices, logits});
  };
  return c;
}

OpCase sample_case(int64_t B, int64_t V, const ops::SampleParams& p, DType dtype, bool in_tests) {
  OpCase c;
  c.op = "sample";
  c.name = fmt::format("sample/{}B{}_V{}_temp{}_topk{}_topp{}_minp{}_{}", in_tests ? "" : "bench_", B, V, p.temperature,
                       p.top_k, p.top_p, p.min_p, dtype_name(dtype));
  c.tolerance = 1e-30;
  c.reason = "the only output is a token id, compared exactly";
  c.in_tests = in_tests;
  c.build = [=](CaseRun& run) {
    Tensor logits = lm_logits(run, dtype, B, V, false);
    Tensor uniforms = run.uniform(DType::f32, {B}, 0.0, 1.0);
    // The CPU kernel forms every probability and the softmax denominator in double as the
    // reference does; only the order of the denominator's sum differs (~1e-16 relative), so a
    // top_p cut or a draw moves only if it lands that close to a boundary. Measured over 300
    // repeats of every case (~8·10⁵ rows): no row differed (with f32 exps in the denominator,
    // 6 rows did: 2 % of runs failed). Allow none.
    Tensor out = run.output("out", DType::i32, {B}, {Compare::exact, 0});
    run.launch = [=](Stream& st) { ops::sample(st, out, logits, uniforms, p); };
    run.cost = ops::cost(ops::SampleArgs{out, logits, uniforms, p});
  };
  return c;
}

}  // namespace

std::vector<OpCase> sampling_cases() {
  std::vector<OpCase> cases;
  for (int64_t V : {1, 2, 17, 50257})
    for (DType dtype : kFloatTypes) {
      const int64_t B = V > 1000 ? 3 : 8;
      cases.push_back(argmax_case(B, V, dtype, false, true));
      if (V > 2) cases.push_back(argmax_case(B, V, dtype, true, true));
    }
  for (int64_t V : {17, 50257}) cases.push_back(argmax_case(1, V, DType::f32, false, true));
  for (DType dtype : {DType::f32, DType::bf16}) cases.push_back(argmax_edges_case(50257, dtype));
  for (DType dtype : kFloatTypes) {
    cases.push_back(count_nonfinite_case(8, 1, dtype));
    cases.push_back(count_nonfinite_case(8, 1000, dtype));
    cases.push_back(count_nonfinite_case(3, 50257, dtype));
  }
  int variant = 0;
  for (int64_t V : {1, 2, 17, 50257})
    for (int64_t k : std::set<int64_t>{1, 5, 40, V}) {
      if (k > V) continue;
      for (DType dtype : kFloatTypes) {
        const int64_t B = V > 1000 ? 2 : 8;
        cases.push_back(top_k_case(B, V, k, dtype, variant++ % 2 == 1 && V > 2, true));
      }
    }

  // sample: every filter combination at V = 17 (B = 8) and V = 4097 (B = 64), dtypes rotated.
  variant = 0;
  for (auto [B, V] : {std::pair<int64_t, int64_t>{8, 17}, {64, 4097}}) {
    cases.push_back(sample_case(B, V, {.temperature = 0, .top_p = 0.9f}, kFloatTypes[variant++ % 3], true));
    for (float temperature : {0.7f, 1.5f})
      for (int64_t top_k : {0, 1, 40})
        for (float top_p : {1.0f, 0.9f, 0.5f})
          for (float min_p : {0.0f, 0.05f})
            cases.push_back(sample_case(B, V, {temperature, top_k, top_p, min_p}, kFloatTypes[variant++ % 3], true));
  }
  // The GPT-2 vocabulary, fewer rows: the threshold search without top_k, bf16 ties.
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (ops::SampleParams p : {ops::SampleParams{.temperature = 0},
                                ops::SampleParams{.temperature = 1.0f},
                                ops::SampleParams{.temperature = 0.7f, .top_p = 0.9f},
                                ops::SampleParams{.temperature = 1.5f, .top_p = 0.5f, .min_p = 0.05f},
                                ops::SampleParams{.temperature = 1.0f, .min_p = 0.05f},
                                ops::SampleParams{.temperature = 0.7f, .top_k = 40, .top_p = 0.9f}})
      cases.push_back(sample_case(8, 50257, p, dtype, true));
  }
  cases.push_back(sample_case(1, 50257, {.temperature = 0.7f, .top_p = 0.9f}, DType::f16, true));
  // A top_p cut so near 1 that no band short of the whole vocabulary is sure to hold it (the GPU
  // walks every token), and a top_k past the GPU's in-shared-memory sort (4096) whose walk
  // spans many chunks.
  cases.push_back(sample_case(8, 4097, {.temperature = 1.0f, .top_p = 0.9999f}, DType::f32, true));
  cases.push_back(sample_case(2, 50257, {.temperature = 1.5f, .top_k = 5000, .top_p = 0.95f}, DType::bf16, true));
  cases.push_back(sample_case(1, 17, {.temperature = 1.0f, .top_k = 40}, DType::f32, true));

  // ding-bench: GPT-2's vocabulary at decode batch sizes (and Llama-3's for argmax).
  for (int64_t B : {1, 8}) {
    cases.push_back(argmax_case(B, 50257, DType::f32, false, false));
    cases.push_back(argmax_case(B, 128256, DType::f32, false, false));
    cases.push_back(top_k_case(B, 50257, 40, DType::f32, false, false));
    cases.push_back(sample_case(B, 50257, {.temperature = 0.7f, .top_p = 0.9f}, DType::f32, false));
    cases.push_back(sample_case(B, 50257, {.temperature = 0.7f, .top_k = 40, .top_p = 0.9f}, DType::f32, false));
    cases.push_back(sample_case(B, 50257, {.temperature = 1.0f}, DType::bf16, false));
  }
  return cases;
}

}  // namespace ding::testing
