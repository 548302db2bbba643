// ding-quantize as a user runs it: it writes a folder that ding-run loads and runs as it is, with
// the same generated ids as quantizing at load, and every bad input ends with a one-line error and
// exit code 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/tool_process.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

ToolResult ding_quantize(const std::string& args) { return run_tool(DING_QUANTIZE_BINARY, args); }

fs::path out_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ding_quantize_test_" + name + "." + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(DingQuantize, WritesAFolderThatDingRunLoadsAsQuantizingAtLoadWould) {
  for (const char* format : {"int8", "fp8"}) {
    const fs::path out = out_dir(format);
    const ToolResult r = ding_quantize(kTiny.string() + " " + out.string() + " --dtype " + format);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.stdout_only.find(std::string("in ") + format + " with row scales"), std::string::npos) << r.out;
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(out / "config.json"));
    EXPECT_EQ(config["quantization_config"]["quant_method"], "ding");
    const std::string run = " --tokens 5,6,7 -n 6 --greedy --backend cpu --json";
    const ToolResult stored = run_tool(DING_RUN_BINARY, "-m " + out.string() + run);
    const ToolResult at_load = run_tool(DING_RUN_BINARY, "-m " + kTiny.string() + run + " --quantize " + format);
    ASSERT_EQ(stored.exit_code, 0) << stored.out;
    ASSERT_EQ(at_load.exit_code, 0) << at_load.out;
    const nlohmann::json a = nlohmann::json::parse(stored.stdout_only), b = nlohmann::json::parse(at_load.stdout_only);
    EXPECT_EQ(a["generated_ids"], b["generated_ids"]) << format;
    EXPECT_EQ(a["weights_quantized"], b["weights_quantized"]) << format;
    EXPECT_EQ(a["weights_bytes"], b["weights_bytes"]) << format;
    fs::remove_all(out);
  }
}

TEST(DingQuantize, BadInputsFailCleanly) {
  const fs::path out = out_dir("bad");
  expect_clean_failure(ding_quantize(kTiny.string() + " " + out.string()), "ding-quantize", "--dtype is required");
  expect_clean_failure(ding_quantize(kTiny.string() + " " + out.string() + " --dtype int4"), "ding-quantize",
                       "--dtype 'int4' is not int8 or fp8");
  expect_clean_failure(ding_quantize("/nonexistent " + out.string() + " --dtype int8"), "ding-quantize", "not a directory");
  expect_clean_failure(ding_quantize(kTiny.string() + " " + kTiny.string() + " --dtype int8"), "ding-quantize",
                       "is the input folder");
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace ding::testing
