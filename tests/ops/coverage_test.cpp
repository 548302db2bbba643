// Required coverage: a backend listed here must implement every op of op_list.h, and every op
// must have parity cases, so a silently missing kernel or an untested op fails CI.
#include <gtest/gtest.h>

#include <set>

#include "op_cases.h"

namespace ding::testing {
namespace {

TEST(Coverage, RequiredBackendsImplementEveryOp) {
  for (const std::string& backend : registry::compiled_backends()) {
    if (!backend_must_be_complete(backend)) continue;
    // A GPU's table is reachable only through a device; without one, its completeness is still
    // enforced at link time (backends/gpu/kernel_table.cpp fills every op of op_list.h).
    if (!registry::is_available(backend)) continue;
    const auto missing = ops::missing_kernels(Device::open(backend).kernels());
    std::string list;
    for (const auto& m : missing) list += m + " ";
    EXPECT_TRUE(missing.empty()) << backend << " lacks: " << list;
  }
}

TEST(Coverage, EveryOpHasParityCases) {
  std::set<std::string> tested;
  for (const OpCase& c : all_op_cases())
    if (c.in_tests) tested.insert(c.op);
  for (const char* op : ops::kOpNames) EXPECT_TRUE(tested.count(op)) << "op " << op << " has no parity case";
}

TEST(Coverage, CaseNamesAreUniqueAndNameTheirOp) {
  std::set<std::string> names;
  for (const OpCase& c : all_op_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    EXPECT_EQ(c.name.rfind(c.op + "/", 0), 0u) << c.name << " should start with " << c.op << "/";
    EXPECT_GT(c.tolerance, 0.0) << c.name << " has no tolerance";
    EXPECT_FALSE(c.reason.empty()) << c.name << " does not say why its tolerance is what it is";
  }
}

}  // namespace
}  // namespace ding::testing
