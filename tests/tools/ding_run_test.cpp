// ding-run as a user runs it: the default model generates, machine outputs are exact, and every
// bad input ends with a one-line error and a non-zero exit, never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "op_cases.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

struct Result {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
  std::string stdout_only;
};

Result ding_run(const std::string& args) {
  // One stderr file per process: ctest runs these tests in parallel processes.
  const fs::path err = fs::temp_directory_path() / ("ding_run_test_stderr." + std::to_string(getpid()) + ".txt");
  Result r;
  const std::string command = std::string(DING_RUN_BINARY) + " " + args + " 2>" + err.string();
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.stdout_only.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err);
  r.out = r.stdout_only + std::string(std::istreambuf_iterator<char>(in), {});
  fs::remove(err);
  return r;
}

void expect_clean_failure(const Result& r, const std::string& mention) {
  EXPECT_EQ(r.exit_code, 1) << r.out;  // 1 = a reported error; a crash would be ≥ 128
  EXPECT_NE(r.out.find("ding-run: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(mention), std::string::npos) << "missing '" << mention << "' in: " << r.out;
}

TEST(DingRun, DefaultModelGeneratesAndSummarises) {
  const Result r = ding_run("-p 'The jury said' -n 24 --greedy");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.stdout_only.rfind("The jury said", 0), 0u);
  EXPECT_GT(r.stdout_only.size(), 40u);
  for (const char* field : {"load ", "prefill ", "decode ", "tok/s", "KV cache", "peak RSS"})
    EXPECT_NE(r.out.find(field), std::string::npos) << field;
}

TEST(DingRun, JsonSummaryHasTheGeneratedIds) {
  const Result r = ding_run("-m " + kTiny.string() + " --tokens 5,6,7 -n 6 --greedy --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.stdout_only);
  EXPECT_EQ(j["generated_ids"].size(), 6u);
  EXPECT_EQ(j["prompt_ids"], (std::vector<int>{5, 6, 7}));
  EXPECT_GT(j["decode_tokens_per_second"].get<double>(), 0);
  EXPECT_EQ(j["stop_reason"], "max_tokens");
}

TEST(DingRun, LogitsOutIsTheRawF32LogitsOfEveryPromptPosition) {
  std::ifstream meta_in(kTiny / "reference.json");
  const auto meta = nlohmann::json::parse(meta_in);
  const auto ids = meta["prompt_ids"].get<std::vector<int>>();
  std::string list;
  for (int id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const fs::path out = fs::temp_directory_path() / "ding_run_logits.f32";
  const Result r = ding_run("-m " + kTiny.string() + " --tokens " + list + " -n 1 --logits-out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const int64_t T = meta["logits_shape"][0], V = meta["logits_shape"][1];
  ASSERT_EQ(int64_t(fs::file_size(out)), T * V * 4) << "the file holds exactly [n_prompt, V] f32";
  std::vector<float> got(size_t(T * V));
  std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(got.data()), std::streamsize(got.size() * 4));
  std::vector<double> reference(size_t(T * V));
  std::ifstream(kTiny / "reference_logits.f64", std::ios::binary)
      .read(reinterpret_cast<char*>(reference.data()), std::streamsize(reference.size() * 8));
  EXPECT_LE(nmse(std::vector<double>(got.begin(), got.end()), reference), 1e-6);
  fs::remove(out);
}

TEST(DingRun, TooManyNewTokensAreClampedAndSaidSo) {
  const Result r = ding_run("-m " + kTiny.string() + " --tokens 5,6,7 -n 1000 --greedy");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("-n 1000 clamped to 62"), std::string::npos) << r.out;
}

TEST(DingRun, BadInputFailsCleanly) {
  expect_clean_failure(ding_run("-m /nonexistent/model"), "/nonexistent/model");
  expect_clean_failure(ding_run("--backend tpu -n 1"), "unknown backend 'tpu'");
  expect_clean_failure(ding_run("--backend kokkos -n 1"), "not compiled into this build");
  expect_clean_failure(ding_run("--dtype f8 -n 1"), "--dtype: 'f8'");
  expect_clean_failure(ding_run("-m " + kTiny.string() + " --tokens 1,x,3"), "'x' is not an integer");
  expect_clean_failure(ding_run("-m " + kTiny.string() + " --tokens 1,600"), "id 600 is outside the vocabulary of 512");
  expect_clean_failure(ding_run("-f /nonexistent/prompt.txt"), "cannot open");

  const fs::path long_prompt = fs::temp_directory_path() / "ding_run_long_prompt.txt";
  std::string many_words;
  for (int i = 0; i < 700; ++i) many_words += " the";  // 700 tokens, past the 512 positions
  std::ofstream(long_prompt) << many_words;
  expect_clean_failure(ding_run("-f " + long_prompt.string()), "context is 512");

  const fs::path bad_utf8 = fs::temp_directory_path() / "ding_run_bad_utf8.txt";
  std::ofstream(bad_utf8, std::ios::binary) << "caf\xc3(";
  expect_clean_failure(ding_run("-f " + bad_utf8.string()), "UTF-8");
  fs::remove(long_prompt);
  fs::remove(bad_utf8);

  const Result usage = ding_run("--no-such-flag");
  EXPECT_NE(usage.exit_code, 0);
  EXPECT_LT(usage.exit_code, 128);
}

}  // namespace
}  // namespace ding::testing
