// One op computed under several configurations of a backend (GPU kernel tunings: rings, copy
// paths, segments, product cores), each configuration within every case's bound of the reference
// and, where the configurations are one computation, all of them giving the bits of the first: so
// one device runs what another chip or setting would.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ding/gpu.h"
#include "gpu_tuning_scope.h"
#include "op_cases.h"

namespace ding::testing {

// A configuration: its name in a failure's trace, what selects it on the device, the NMSE bound
// its outputs keep (0: the case's tolerance), and the forms (ding::gpu::set_form_log's "op: form")
// its calls must note over all the cases run: `noted` at least once, `never` not once (empty: no
// check). The forms say which way a switch sent the kernels, which equal outputs cannot.
struct Configuration {
  std::string name;
  std::function<void()> select;
  double bound = 0;
  std::string noted, never;
};

// Whether `device` is an NVIDIA GPU of at least compute capability `sm` (90: sm_90, whose clusters
// and bulk copies the kernels take where they can).
inline bool nvidia_at_least(const Device& device, int sm) {
  const std::string& arch = device.caps().arch;
  return arch.starts_with("sm_") && std::stoi(arch.substr(3)) >= sm;
}

// `run` over `configurations` whose selection also points the device's form log at a log of the
// configuration's own, then each configuration's `noted` and `never` checked against it.
inline void expect_forms(Device& device, const std::vector<Configuration>& configurations,
                         const std::function<void(const std::vector<Configuration>&)>& run) {
  std::vector<std::shared_ptr<gpu::FormLog>> logs;
  std::vector<Configuration> logged = configurations;
  for (Configuration& configuration : logged) {
    auto log = logs.emplace_back(std::make_shared<gpu::FormLog>());
    configuration.select = [&device, select = configuration.select, log] {
      select();
      gpu::set_form_log(device, log);
    };
  }
  run(logged);
  gpu::set_form_log(device, nullptr);
  for (size_t i = 0; i < configurations.size(); ++i) {
    const Configuration& c = configurations[i];
    const auto times = [&](const std::string& form) { return std::count(logs[i]->begin(), logs[i]->end(), form); };
    if (!c.noted.empty()) EXPECT_GT(times(c.noted), 0) << c.name << ": no call noted '" << c.noted << "'";
    if (!c.never.empty()) EXPECT_EQ(times(c.never), 0) << c.name << ": calls noted '" << c.never << "'";
  }
}

// Where two outputs of one case differ: how many elements, the first one's index and both values
// (scattered differences point to a race, one region to a path that differs).
inline std::string first_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return fmt::format("{} elements against {}", a.size(), b.size());
  size_t count = 0, first = a.size();
  for (size_t j = 0; j < a.size(); ++j)
    if (!(a[j] == b[j]) && !(std::isnan(a[j]) && std::isnan(b[j]))) {
      if (count++ == 0) first = j;
    }
  if (count == 0) return "equal but for NaNs, which never compare equal";
  return fmt::format("{} of {} elements differ, the first at {}: {} against {}", count, a.size(), first, a[first], b[first]);
}

// `c` on the reference once, then on `device` under each configuration, outputs poisoned before
// every run: each NMSE output within the configuration's bound and, with `same_bits`, equal to the
// first configuration's.
inline void expect_case_under(Device& device, const OpCase& c, uint64_t seed, const std::vector<Configuration>& configurations,
                              bool same_bits) {
  SCOPED_TRACE(c.name);
  CaseRun expected(Device::open("ref"), seed);
  c.build(expected);
  expected.poison_outputs();
  expected.run();
  CaseRun actual(device, seed);
  c.build(actual);
  std::vector<std::vector<double>> first;  // the first configuration's outputs
  for (const Configuration& configuration : configurations) {
    SCOPED_TRACE(configuration.name);
    configuration.select();
    actual.poison_outputs();
    actual.run();
    for (size_t i = 0; i < actual.outputs().size(); ++i) {
      const std::vector<double> got = actual.read(actual.outputs()[i].tensor);
      const double bound = configuration.bound > 0 ? configuration.bound : c.tolerance;
      if (actual.outputs()[i].compare.kind == Compare::nmse)
        EXPECT_LE(nmse(got, expected.read(expected.outputs()[i].tensor)), bound) << actual.outputs()[i].name << " (" << c.reason << ")";
      if (!same_bits) continue;
      if (first.size() <= i) first.push_back(got);
      else EXPECT_TRUE(got == first[i]) << actual.outputs()[i].name << ": bits differ from " << configurations[0].name << " ("
                                        << first_difference(got, first[i]) << ")";
    }
  }
}

// Every in-test case of `cases` under every configuration, all giving the same bits; returns the
// number of cases run.
inline int expect_configurations_agree(Device& device, const std::vector<OpCase>& cases,
                                       const std::vector<Configuration>& configurations) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  int count = 0;
  expect_forms(device, configurations, [&](const std::vector<Configuration>& logged) {
    for (const OpCase& c : cases) {
      if (!c.in_tests) continue;
      expect_case_under(device, c, seed, logged, /*same_bits=*/true);
      ++count;
    }
  });
  return count;
}

// The forms a switch's two settings send an op's calls to ("op: form"): `off` by every call the
// switch is off for, `on` where it is on, wherever `on_here` (the device can take that form);
// elsewhere the switch on must leave the calls in the off form too.
struct SwitchForms {
  std::string on, off;
  bool on_here = true;
};

// `c` with the forms of `f` it must note: the on form where it asks for it (`wants_on`) and the
// device can take it, and then the off form never; else the off form, and the on form never.
inline Configuration expecting(Configuration c, const SwitchForms& f, bool wants_on) {
  const bool on = wants_on && f.on_here;
  c.noted = on ? f.on : f.off;
  c.never = on ? "" : f.on;
  return c;
}

// Every in-test case of `cases` that `takes` accepts, on the cuda device (skipped without one) with
// the boolean op tuning `member` on and off (named `on` and `off`), each within the case's
// bound of the reference, and the calls in the `forms` each setting asks; at least `min_cases` of
// them. For two forms of one op whose sums are grouped differently, so that their bits may differ.
inline void expect_both_settings_keep_the_bound(const std::vector<OpCase>& cases, bool gpu::OpTuning::*member,
                                                const char* on, const char* off,
                                                const std::function<bool(const OpCase&)>& takes, int min_cases,
                                                const std::function<SwitchForms(const Device&)>& forms) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::OpTuning> tuning(cuda);
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  const SwitchForms f = forms(cuda);
  const std::vector<Configuration> settings = {expecting({on, tuning.with(member, true)}, f, true),
                                               expecting({off, tuning.with(member, false)}, f, false)};
  int count = 0;
  expect_forms(cuda, settings, [&](const std::vector<Configuration>& logged) {
    for (const OpCase& c : cases) {
      if (!c.in_tests || !takes(c)) continue;
      expect_case_under(cuda, c, seed, logged, /*same_bits=*/false);
      ++count;
    }
  });
  EXPECT_GE(count, min_cases);
}

}  // namespace ding::testing
