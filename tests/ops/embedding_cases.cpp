// embedding cases: token table alone (a row copy, compared exactly) and with a learned
// position table, positions from a tensor or an offset, widths 1 to 1600, every dtype and
// tables in a dtype other than out's.
#include <algorithm>
#include <string>

#include "op_cases.h"

namespace ding::testing {

namespace {

std::string dt(DType d) { return std::string(dtype_name(d)); }

enum class Positions { none, offset, tensor };

struct EmbeddingShape {
  int64_t B, T, V, C;
  DType table, out;
  Positions positions = Positions::none;
  DType position_table = DType::f32;
  bool in_tests = true;
};

OpCase embedding_case(EmbeddingShape s) {
  OpCase c;
  c.op = "embedding";
  c.name = "embedding/B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_V" + std::to_string(s.V) + "_C" +
           std::to_string(s.C) + "_" + dt(s.table) + (s.out != s.table ? "_out" + dt(s.out) : "") +
           (s.positions == Positions::offset   ? "_pos" + dt(s.position_table) + "_offset"
            : s.positions == Positions::tensor ? "_pos" + dt(s.position_table) + "_tensor"
                                               : "");
  // A lookup without positions is a copy (or one rounding, done identically): exact. With
  // positions, the row sum is rounded once to out's dtype from f32 here and from double there;
  // they can differ (by one ulp) only when the f32 sum was itself inexact and landed on a
  // rounding midpoint. Measured NMSE over 15 seeds: 0; the bound allows ~1 such flip per 1000.
  const bool copy = s.positions == Positions::none;
  c.tolerance = copy ? rounding_nmse(s.out) : 1e-3 * rounding_nmse(s.out);
  c.reason = copy ? "a row copy (compared exactly)"
                  : "token + position row summed in f32 vs double then rounded once (measured 0); rare 1-ulp "
                    "double-rounding flips allowed";
  c.in_tests = s.in_tests;
  c.build = [s, copy](CaseRun& run) {
    Tensor ids = run.random_ints({s.B, s.T}, 0, int32_t(s.V - 1));
    Tensor table = run.normal(s.table, {s.V, s.C});
    Tensor out = run.output("out", s.out, {s.B, s.T, s.C}, copy ? Compare{Compare::exact} : Compare{});
    ops::EmbeddingParams p;
    const int64_t P = 4 * s.T + 5;
    if (s.positions != Positions::none) p.position_table = run.normal(s.position_table, {P, s.C}, 0.1);
    if (s.positions == Positions::tensor) p.positions = run.random_ints({s.B, s.T}, 0, int32_t(P - 1));
    if (s.positions == Positions::offset) p.position_offset = P - s.T;  // the last T rows: the bound is hit
    run.launch = [=](Stream& st) { ops::embedding(st, out, ids, table, p); };
    run.cost = ops::cost(ops::EmbeddingArgs{out, ids, table, p});
  };
  return c;
}

}  // namespace

std::vector<OpCase> embedding_cases() {
  std::vector<OpCase> cases;
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    cases.push_back(embedding_case({1, 1, 1, 1, d, d}));
    cases.push_back(embedding_case({2, 17, 97, 33, d, d}));
    cases.push_back(embedding_case({2, 17, 97, 33, d, d, Positions::offset, d}));
    cases.push_back(embedding_case({3, 5, 50, 1600, d, d, Positions::tensor, DType::f32}));
  }
  cases.push_back(embedding_case({2, 7, 31, 19, DType::bf16, DType::f32}));
  cases.push_back(embedding_case({2, 7, 31, 19, DType::f32, DType::bf16}));
  cases.push_back(embedding_case({2, 7, 31, 19, DType::f16, DType::f32, Positions::offset, DType::bf16}));
  cases.push_back(embedding_case({1, 9, 31, 64, DType::f32, DType::f16, Positions::tensor, DType::f16}));
  // Rows a multiple of 16 bytes wide with both tables in one dtype: the GPU's vectorised path,
  // with a position term and as a widening copy.
  cases.push_back(embedding_case({2, 5, 40, 64, DType::bf16, DType::bf16, Positions::tensor, DType::bf16}));
  cases.push_back(embedding_case({1, 3, 40, 24, DType::f16, DType::f32}));
  // Bench: gpt2-xl's wte + wpe for a 256-token prompt and for one decode token.
  for (int64_t T : {256, 1})
    cases.push_back(embedding_case({1, T, 50257, 1600, DType::f32, DType::f32, Positions::offset, DType::f32, false}));
  cases.push_back(embedding_case({1, 256, 50257, 1600, DType::bf16, DType::bf16, Positions::none, DType::bf16, false}));
  return cases;
}

}  // namespace ding::testing
