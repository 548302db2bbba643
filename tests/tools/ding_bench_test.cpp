// ding-bench as a user runs it: the thread count it reports is the one it runs, the named shapes
// are Hugging Face configs the library parses, and command-line errors exit 1 with one line.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "tools/tool_process.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

ToolResult ding_bench(const std::string& args) { return run_tool(DING_BENCH_BINARY, args); }

TEST(DingBench, ThreadsAreWhatTheOpenMpRuntimeRuns) {
  const std::string run = "model -m " + kTiny.string() + " --backend cpu --dtype f32 --prompt 4 --new 2";
  for (int threads : {1, 3}) {
    const ToolResult r = ding_bench(run + " --threads " + std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.stdout_only.find(", " + std::to_string(threads) + " CPU threads\n"), std::string::npos) << r.out;
    EXPECT_NE(r.stdout_only.find("roofline "), std::string::npos) << r.out;
  }
}

// Each named shape parses into the context its config states; the fit check runs before any of
// the billions of random weights are drawn, so a prompt one past it fails at once.
TEST(DingBench, NamedShapesAreParsedConfigs) {
  const struct {
    const char* shape;
    int positions;
  } shapes[] = {{"gpt2", 1024},         {"gpt2-xl", 1024},     {"llama-3.2-1b", 131072},
                {"llama-3.1-8b", 131072}, {"olmoe-1b-7b", 4096}, {"deepseek-v2-lite", 163840}};
  for (const auto& s : shapes) {
    const ToolResult r = ding_bench(fmt::format("model --shape {} --backend cpu --prompt {} --new 1", s.shape, s.positions));
    expect_clean_failure(r, "ding-bench", fmt::format("must fit the {} positions", s.positions));
  }
  expect_clean_failure(ding_bench("model --shape gpt3 --backend cpu"), "ding-bench", "llama-3.1-8b");
}

// The line of ding-bench's output that starts with `start` (empty when none does).
std::string line_starting(const std::string& out, const std::string& start) {
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    if (out.compare(at, start.size(), start) == 0) return out.substr(at, end - at) + " ";
    at = end + 1;
  }
  return "";
}

// --paired decodes the quantized model and its unquantized twin a step each in turn and prints both
// rates with their ratio; without --quantize there is no twin to pair, and it says so.
TEST(DingBench, PairedDecodesTheUnquantizedTwinInTurn) {
  const std::string run = "model -m " + kTiny.string() + " --backend cpu --dtype f32 --prompt 4 --new 3";
  const ToolResult r = ding_bench(run + " --quantize int8 --paired");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string paired = line_starting(r.stdout_only, "paired ");
  EXPECT_NE(paired.find("3 steps of each"), std::string::npos) << r.out;
  EXPECT_NE(paired.find(": f32 "), std::string::npos) << r.out;
  EXPECT_NE(paired.find(", f32 with i8 projections "), std::string::npos) << r.out;
  EXPECT_NE(paired.find("x "), std::string::npos) << r.out;
  expect_clean_failure(ding_bench(run + " --paired"), "ding-bench", "give --quantize int8 or fp8");
}

// --skip-op leaves an op out of every step (timing only) and says so; a name that is no op is refused.
TEST(DingBench, SkipOpLeavesTheOpOutAndNamesIt) {
  const std::string run = "model -m " + kTiny.string() + " --backend cpu --dtype f32 --prompt 4 --new 3";
  const ToolResult r = ding_bench(run + " --skip-op attention_decode");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(line_starting(r.stdout_only, "skipped ops ").find("attention_decode"), std::string::npos) << r.out;
  EXPECT_NE(line_starting(r.stdout_only, "decode ").find("3 steps"), std::string::npos) << r.out;
  expect_clean_failure(ding_bench(run + " --skip-op attention"), "ding-bench", "--skip-op attention: not an op");
}

// --profile-by-bytes splits the profile's rows of an op by the bytes its calls move: the tiny model's
// decode step has products of several sizes; without --profile it is refused.
TEST(DingBench, ProfileByBytesGivesAnOpARowPerSize) {
  const std::string run = "model -m " + kTiny.string() + " --backend cpu --dtype f32 --prompt 4 --new 3";
  const ToolResult r = ding_bench(run + " --profile --profile-by-bytes");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t profile_at = r.stdout_only.find("per-op profile of 3 decode steps");
  ASSERT_NE(profile_at, std::string::npos) << r.out;
  const std::string decode = r.stdout_only.substr(profile_at);
  size_t rows = 0;
  for (size_t at = decode.find("\nmatmul ("); at != std::string::npos; at = decode.find("\nmatmul (", at + 1)) ++rows;
  EXPECT_GE(rows, 3u) << r.out;  // the fused QKV, the out-projection, the MLP's two and the LM head: sizes apart
  expect_clean_failure(ding_bench(run + " --profile-by-bytes"), "ding-bench", "--profile");
}

// The cache table at toy size on the CPU: a row per attention kind with its bytes per token. At
// width 128 (one head of 128) in f32 over one layer, MHA, GQA and MQA all keep K and V of one
// head, 2·128·4 = 1024 bytes; MLA its latent and rope key, (512 + 64)·4 = 2304.
TEST(DingBench, CacheTableHasEveryAttentionKind) {
  const ToolResult r = ding_bench("cache --backend cpu --dtype f32 --layers 1 --width 128 --contexts 8 16 --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* kind : {"MHA ", "GQA ", "MQA "}) EXPECT_NE(line_starting(r.stdout_only, kind).find(" 1024 "), std::string::npos) << r.out;
  EXPECT_NE(line_starting(r.stdout_only, "MLA ").find(" 2304 "), std::string::npos) << r.out;
  EXPECT_NE(r.stdout_only.find("MB at 16"), std::string::npos) << r.out;
  expect_clean_failure(ding_bench("cache --contexts 0"), "ding-bench", "--contexts");
}

// Perplexity of the shipped model on the Brown sample: the slice and its windows as asked, a loss
// between 0 and ln V, the same within 1 % with bf16 activations or int8 projections (PyTorch's
// number for the full validation slice, 5.549 nats, is in models/default/training.json;
// tools/bench/perplexity_table.sh reproduces it on the GPU-free machine).
TEST(DingBench, PerplexityScoresTheTailOfATextInWindows) {
  const std::string text = (fs::path(DING_TEST_DATA) / "text" / "brown_sample.txt").string();
  const std::string model = (fs::path(DING_TEST_DATA) / ".." / ".." / "models" / "default").string();
  auto loss_of = [&](const std::string& extra) {
    const ToolResult r = ding_bench("perplexity -m " + model + " -f " + text + " --backend cpu --tail 0.125 --window 128" + extra);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.stdout_only.find("in 24 windows of 128"), std::string::npos) << r.out;  // ⌊(3152 − 1) / 128⌋
    const size_t at = r.stdout_only.find("\nloss ");
    return at == std::string::npos ? -1.0 : std::stod(r.stdout_only.substr(at + 6));
  };
  const double f32 = loss_of(""), bf16 = loss_of(" --dtype bf16"), int8 = loss_of(" --quantize int8 --quantize-lm-head");
  EXPECT_GT(f32, 0.0);
  EXPECT_LT(f32, std::log(50257.0));
  EXPECT_NEAR(bf16, f32, 0.01 * f32);
  EXPECT_NEAR(int8, f32, 0.01 * f32);
  expect_clean_failure(ding_bench("perplexity -m " + model + " -f " + text + " --tail 0"), "ding-bench", "--tail 0 is not in (0, 1]");
  expect_clean_failure(ding_bench("perplexity -m " + model + " -f " + text + " --window 1"), "ding-bench", "--window 1 must be ≥ 2");
  expect_clean_failure(ding_bench("perplexity -m " + model + " -f /nonexistent.txt"), "ding-bench", "/nonexistent.txt");
  expect_clean_failure(ding_bench("perplexity -m " + model + " -f " + text + " --quantize-lm-head"), "ding-bench",
                       "quantize_lm_head needs quantize");
}

TEST(DingBench, CommandLineErrorsExitOneWithOneLine) {
  expect_clean_failure(ding_bench("model --no-such-flag"), "ding-bench", "--no-such-flag");
  expect_clean_failure(ding_bench("ops --threads 0"), "ding-bench", "--threads");
  expect_clean_failure(ding_bench("ops --op no_such_op"), "ding-bench", "no_such_op");
  expect_clean_failure(ding_bench(""), "ding-bench", "subcommand");
  EXPECT_EQ(ding_bench("--help").exit_code, 0);
}

// Results that cannot be written are an error, not a success.
TEST(DingBench, UnwritableOutputIsAnError) {
  expect_clean_failure(ding_bench("ops --backend cpu --op softmax --all --filter rows3_Tk37_hugenegative_f32 > /dev/full"), "ding-bench",
                       "writing the output failed");
}

}  // namespace
}  // namespace ding::testing
