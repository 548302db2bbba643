// Parity: every op case on every compiled-in backend against the reference backend.
// Inputs are fresh random values each run (the seed is printed; DING_TEST_SEED=N repeats one),
// outputs are poisoned before each run, float outputs are compared by NMSE against the case's
// tolerance, integer outputs exactly, and NaN/inf are checked on their own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "op_cases.h"

namespace ding::testing {
namespace {

struct ParityParam {
  const OpCase* op_case;
  std::string backend;
};

// What ctest lists beside each test name, instead of the parameter's raw bytes.
void PrintTo(const ParityParam& p, std::ostream* os) { *os << p.op_case->name << " on " << p.backend; }

class Parity : public ::testing::TestWithParam<ParityParam> {};

#ifdef DING_TEST_SANITIZE
constexpr double kSanitizerCaseLimit = 1e8;
#endif

// Runs the case twice on `run` (poisoning before each) so a kernel that skips elements or
// depends on leftovers from the first run is caught.
std::vector<std::vector<double>> run_twice(CaseRun& run, std::vector<std::vector<double>>* first) {
  std::vector<std::vector<double>> results;
  for (int pass = 0; pass < 2; ++pass) {
    run.poison_outputs();
    run.run();
    results.clear();
    for (const CaseOutput& o : run.outputs()) results.push_back(run.read(o.tensor));
    if (pass == 0 && first) *first = results;
  }
  return results;
}

TEST_P(Parity, MatchesReference) {
  const OpCase& c = *GetParam().op_case;
  const std::string& backend = GetParam().backend;
  if (!registry::is_available(backend)) GTEST_SKIP() << "backend " << backend << " has no device on this machine";
  Device& device = Device::open(backend);
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("case {} on {}, seed {} (rerun with DING_TEST_SEED={})", c.name, backend, seed, seed));

  CaseRun actual_run(device, seed);
  c.build(actual_run);
#ifdef DING_TEST_SANITIZE
  // Under the sanitizers the dozen largest cases took a third of the parity suite's time, and
  // their code paths run in smaller cases too; the Release build runs them all.
  if (const double size = actual_run.cost.flops + actual_run.cost.bytes; size > kSanitizerCaseLimit)
    GTEST_SKIP() << fmt::format("{:.2g} FLOPs + bytes: larger than the sanitizer build runs ({:.0e})", size, kSanitizerCaseLimit);
#endif
  CaseRun expected_run(Device::open("ref"), seed);
  c.build(expected_run);
  expected_run.poison_outputs();
  expected_run.run();
  std::vector<std::vector<double>> first, second;
  try {
    second = run_twice(actual_run, &first);
  } catch (const Error& e) {
    // A partial backend's missing op or limited kernel (ops/kernels.h) says why; a backend that
    // must be complete fails here instead.
    if (e.code() != ErrorCode::not_implemented || backend_must_be_complete(backend)) throw;
    GTEST_SKIP() << e.what();
  }

  ASSERT_EQ(expected_run.outputs().size(), actual_run.outputs().size());
  ASSERT_FALSE(actual_run.outputs().empty()) << "case has no outputs to compare";
  for (size_t i = 0; i < actual_run.outputs().size(); ++i) {
    const CaseOutput& out = actual_run.outputs()[i];
    const std::vector<double> reference = expected_run.read(expected_run.outputs()[i].tensor);
    double worst = 0;  // of the two runs' NMSE over the bound
    for (const std::vector<double>* actual : std::array<const std::vector<double>*, 2>{&first[i], &second[i]}) {
      ASSERT_EQ(actual->size(), reference.size());
      int64_t nonfinite = 0, mismatches = 0;
      for (size_t j = 0; j < reference.size(); ++j) {
        if (std::isfinite(reference[j]) && !std::isfinite((*actual)[j])) ++nonfinite;
        if ((*actual)[j] != reference[j]) ++mismatches;
      }
      EXPECT_EQ(nonfinite, 0) << out.name << ": NaN/inf (or unwritten poison) where the reference is finite";
      int64_t ref_nonfinite = 0;
      for (double r : reference) ref_nonfinite += !std::isfinite(r);
      EXPECT_EQ(ref_nonfinite, 0) << out.name << ": the reference itself produced NaN/inf (or left poison)";
      if (out.compare.kind == Compare::exact) {
        EXPECT_LE(mismatches, out.compare.allowed_mismatches) << out.name << ": elements differ from the reference";
      } else {
        const double err = nmse(*actual, reference);
        worst = std::max(worst, err / c.tolerance);
        EXPECT_LE(err, c.tolerance) << out.name << ": NMSE " << err << " above " << c.tolerance << " (" << c.reason << ")";
      }
    }
    // In the XML report (--gtest_output), so a run can tell how close each case came to its bound.
    if (out.compare.kind != Compare::exact) RecordProperty(out.name + "_nmse_over_bound", fmt::format("{:.3g}", worst));
  }
}

std::vector<ParityParam> parity_params() {
  std::vector<ParityParam> params;
  for (const std::string& backend : registry::compiled_backends()) {
    if (backend == "ref") continue;  // the reference against itself proves nothing
    for (const OpCase& c : all_op_cases())
      if (c.in_tests) params.push_back({&c, backend});
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<ParityParam>& info) {
  std::string name = info.param.backend + "_" + info.param.op_case->name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Ops, Parity, ::testing::ValuesIn(parity_params()), param_name);

}  // namespace
}  // namespace ding::testing
