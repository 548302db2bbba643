// One op computed under several configurations of a backend (GPU kernel tunings: rings, copy
// paths, segments), each configuration within every case's bound of the reference and all of them
// giving the bits of the first: so one device runs what another chip or setting would.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "op_cases.h"

namespace ding::testing {

// Runs every in-test case of `cases` on `device` once per name in `configurations`, calling
// `configure(k)` before the k-th; returns the number of cases run.
inline int expect_configurations_agree(Device& device, const std::vector<OpCase>& cases,
                                       const std::vector<std::string>& configurations,
                                       const std::function<void(size_t)>& configure) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  int count = 0;
  for (const OpCase& c : cases) {
    if (!c.in_tests) continue;
    SCOPED_TRACE(c.name);
    CaseRun expected(Device::open("ref"), seed);
    c.build(expected);
    expected.poison_outputs();
    expected.run();
    CaseRun actual(device, seed);
    c.build(actual);
    std::vector<std::vector<double>> first;  // the first configuration's outputs
    for (size_t k = 0; k < configurations.size(); ++k) {
      SCOPED_TRACE(configurations[k]);
      configure(k);
      actual.poison_outputs();
      actual.run();
      for (size_t i = 0; i < actual.outputs().size(); ++i) {
        const std::vector<double> got = actual.read(actual.outputs()[i].tensor);
        const std::vector<double> reference = expected.read(expected.outputs()[i].tensor);
        if (actual.outputs()[i].compare.kind == Compare::nmse)
          EXPECT_LE(nmse(got, reference), c.tolerance) << actual.outputs()[i].name << " (" << c.reason << ")";
        if (first.size() <= i) first.push_back(got);
        else EXPECT_TRUE(got == first[i]) << actual.outputs()[i].name << ": bits differ from " << configurations[0];
      }
    }
    ++count;
  }
  return count;
}

}  // namespace ding::testing
