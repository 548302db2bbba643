// ding-run over the hostile corpus (corpus.h): every case must end within its time limit and
// memory limit with exit code 1 and one `ding-run: error:` line naming what was wrong. A crash
// (exit ≥ 128), a hang (timeout's 124), an exit 0 or a second line fails the case.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "corpus.h"
#include "tools/tool_process.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

// Per case: 60 s of wall time (a regression that hangs fails instead of stalling the suite) and
// 8 GiB of address space (OpenMP threads reserve stacks; a real runaway allocation goes far past).
// AddressSanitizer reserves terabytes of address space for its shadow memory at start, so a
// sanitizer build limits what malloc hands out instead, by ASan's own option.
#ifdef DING_TEST_SANITIZE
constexpr const char* kLimits = "ASAN_OPTIONS=\"$ASAN_OPTIONS:malloc_limit_mb=8192\" timeout 60 ";
#else
constexpr const char* kLimits = "ulimit -v 8388608 && timeout 60 ";
#endif

class HostileCorpus : public ::testing::TestWithParam<hostile::Case> {};

TEST_P(HostileCorpus, DingRunFailsCleanly) {
  const hostile::Case& c = GetParam();
  const fs::path root = fs::temp_directory_path() / ("ding_hostile_corpus." + std::to_string(getpid()));
  const fs::path dir = hostile::build(c, root);
  const ToolResult r = run_tool(std::string(kLimits) + DING_RUN_BINARY, "-m " + dir.string() + " " + c.args);
  EXPECT_NE(r.exit_code, 124) << c.name << ": timed out (a hang): " << r.out;
  expect_clean_failure(r, "ding-run", c.mention);
  fs::remove_all(dir);
  std::error_code ignored;
  fs::remove(root, ignored);  // only once empty: other cases of this process may still use it
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileCorpus, ::testing::ValuesIn(hostile::cases()),
                         [](const ::testing::TestParamInfo<hostile::Case>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace ding::testing
