// ding-run as a user runs it: the default model generates, machine outputs are exact, the options
// take effect (threads, seed, context length, the model's sampling defaults, a folder without a
// tokenizer), and every bad input ends with a one-line error and exit code 1, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "op_cases.h"
#include "tools/tool_process.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

ToolResult ding_run(const std::string& args) { return run_tool(DING_RUN_BINARY, args); }

void expect_clean_failure(const ToolResult& r, const std::string& mention) {
  ding::testing::expect_clean_failure(r, "ding-run", mention);
}

nlohmann::json run_json(const std::string& args) {
  const ToolResult r = ding_run(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return r.exit_code == 0 ? nlohmann::json::parse(r.stdout_only) : nlohmann::json::object();
}

// A copy of the tiny fixture folder in a fresh directory, without the files named in `leave_out`.
fs::path copy_of_tiny(const std::string& name, const std::vector<std::string>& leave_out) {
  const fs::path dir = fs::temp_directory_path() / ("ding_run_test_" + name + "." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kTiny))
    if (std::find(leave_out.begin(), leave_out.end(), entry.path().filename()) == leave_out.end())
      fs::copy_file(entry.path(), dir / entry.path().filename());
  return dir;
}

TEST(DingRun, DefaultModelGeneratesAndSummarises) {
  const ToolResult r = ding_run("-p 'The jury said' -n 24 --greedy");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.stdout_only.rfind("The jury said", 0), 0u);
  EXPECT_GT(r.stdout_only.size(), 40u);
  for (const char* field : {"load ", "GB/s", "warm-up ", "sampling  greedy", "seed ", "prefill ", "time to first token",
                            "decode ", "tok/s", "bytes per token", "for this run's", "allocated for", "peak RSS",
                            "CPU thread"})
    EXPECT_NE(r.out.find(field), std::string::npos) << field;
}

TEST(DingRun, VersionPrintsTheVersionAndTheCompiledBackends) {
  const ToolResult r = ding_run("--version");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.stdout_only.rfind(std::string("ding-run ") + ding::kVersion + " ", 0), 0u) << r.out;
  for (const std::string& backend : ding::registry::compiled_backends())
    EXPECT_NE(r.stdout_only.find(backend), std::string::npos) << backend << " missing from: " << r.out;
}

// An installed tree, moved: a copy of the binary finds the default model at DING_RUN_MODEL_DIR
// beside itself, and without it names that folder (not the source tree's model) in its error.
TEST(DingRun, DefaultModelIsFoundRelativeToTheExecutable) {
  const fs::path prefix = fs::temp_directory_path() / ("ding_run_test_prefix." + std::to_string(getpid()));
  fs::remove_all(prefix);
  fs::create_directories(prefix / "bin");
  const fs::path binary = prefix / "bin" / "ding-run";
  fs::copy_file(DING_RUN_BINARY, binary);
  const fs::path model = (prefix / "bin" / DING_RUN_MODEL_DIR).lexically_normal();
  expect_clean_failure(run_tool(binary.string(), "--tokens 5,6,7 -n 2"), "no default model found in " + model.string());

  fs::create_directories(model.parent_path());
  fs::create_directory_symlink(kTiny, model);
  const ToolResult r = run_tool(binary.string(), "--tokens 5,6,7 -n 2 --greedy");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("ding-run: " + model.string() + " on "), std::string::npos) << r.out;
  fs::remove_all(prefix);
}

TEST(DingRun, JsonSummaryHasTheGeneratedIds) {
  const ToolResult r = ding_run("-m " + kTiny.string() + " --tokens 5,6,7 -n 6 --greedy --json");
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
  const ToolResult r = ding_run("-m " + kTiny.string() + " --tokens " + list + " -n 1 --logits-out " + out.string());
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
  const ToolResult r = ding_run("-m " + kTiny.string() + " --tokens 5,6,7 -n 1000 --greedy");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("-n 1000 clamped to 62"), std::string::npos) << r.out;
}

TEST(DingRun, BadInputFailsCleanly) {
  expect_clean_failure(ding_run("-m /nonexistent/model"), "/nonexistent/model");
  expect_clean_failure(ding_run("--backend tpu -n 1"), "unknown backend 'tpu'");
  const auto compiled = ding::registry::compiled_backends();
  for (const char* known : {"cuda", "hip", "kokkos"})
    if (std::find(compiled.begin(), compiled.end(), known) == compiled.end())
      expect_clean_failure(ding_run(std::string("--backend ") + known + " -n 1"), "not compiled into this build");
  expect_clean_failure(ding_run("--dtype f8 -n 1"), "--dtype: 'f8'");
  expect_clean_failure(ding_run("--quantize int4 -n 1"), "--quantize: 'int4' is not int8 or fp8");
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

}


TEST(DingRun, ThreadsAreWhatTheOpenMpRuntimeRuns) {
  // "threads" is read back from the OpenMP runtime in the process; 3 differs from the default of
  // a 2-core machine, and from an OMP_NUM_THREADS set around the tests.
  const std::string run = "-m " + kTiny.string() + " --tokens 5,6,7 -n 2 --greedy";
  for (int threads : {1, 2, 3}) EXPECT_EQ(run_json(run + " --threads " + std::to_string(threads))["threads"], threads);
  EXPECT_NE(ding_run(run + " --threads 1").out.find("1 CPU thread\n"), std::string::npos);
  expect_clean_failure(ding_run(run + " --threads 0"), "--threads");
}

TEST(DingRun, SeedIsRandomUnlessGivenAndFixesTheOutput) {
  const std::string run = "-m " + kTiny.string() + " --tokens 5,6,7 -n 16 --temp 1.5 --top-k 0 --top-p 1";
  const nlohmann::json a = run_json(run), b = run_json(run);
  // Two seeds from std::random_device agree with probability 2^-64.
  EXPECT_NE(a["seed"], b["seed"]);
  const nlohmann::json c = run_json(run + " --seed " + a["seed"].dump());
  EXPECT_EQ(c["seed"], a["seed"]);
  EXPECT_EQ(c["generated_ids"], a["generated_ids"]) << "the printed seed reproduces the run";
  const nlohmann::json top = run_json(run + " --seed 18446744073709551615");
  EXPECT_EQ(top["seed"].get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(run_json(run + " --seed 18446744073709551615")["generated_ids"], top["generated_ids"]);
  EXPECT_NE(ding_run(run + " --seed 7").out.find("seed 7"), std::string::npos) << "the summary prints it";
}

TEST(DingRun, SeedsOutsideZeroToTwoToThe64AreErrors) {
  const std::string run = "-m " + kTiny.string() + " --tokens 5,6,7 -n 2";
  for (const char* seed : {"-1", "1e23", "2^64", "18446744073709551616", "0x10", "12abc", "+3", "''"})
    expect_clean_failure(ding_run(run + " --seed=" + seed), "--seed");
  expect_clean_failure(ding_run(run + " --seed -1"), "--seed");
}

TEST(DingRun, CtxSizeSetsTheCacheLength) {
  const std::string run = "-m " + kTiny.string() + " --tokens 5,6,7 -n 100 --greedy";
  const nlohmann::json whole = run_json(run), small = run_json(run + " -c 16");
  EXPECT_EQ(whole["ctx_size"], 64) << "default: the model's context";
  EXPECT_EQ(small["ctx_size"], 16);
  EXPECT_EQ(small["max_new_tokens"], 16 - 3 + 1) << "the last sampled token is never cached";
  EXPECT_TRUE(small["clamped"]);
  EXPECT_EQ(small["kv_cache_bytes"].get<int64_t>() * 64, whole["kv_cache_bytes"].get<int64_t>() * 16);
  expect_clean_failure(ding_run(run + " --ctx-size 0"), "--ctx-size");
  expect_clean_failure(ding_run("-m " + kTiny.string() + " --tokens 5,6,7,8,9 -c 4"), "context is 4 (-c 4)");
}

TEST(DingRun, RunsOnEveryCompiledBackend) {
  for (const std::string& backend : ding::registry::compiled_backends()) {
    if (!ding::registry::is_available(backend)) continue;
    const ToolResult r = ding_run("-m " + kTiny.string() + " --tokens 5,6,7 -n 4 --greedy --backend " + backend);
    EXPECT_EQ(r.exit_code, 0) << backend << ": " << r.out;
    EXPECT_NE(r.out.find(" on " + backend + " "), std::string::npos) << backend << ": " << r.out;
  }
}

TEST(DingRun, SummaryReportsDtypeLoadSpeedWarmUpAndFirstToken) {
  const nlohmann::json j = run_json("-m " + kTiny.string() + " --tokens 5,6,7 -n 4 --greedy --backend cpu");
  EXPECT_EQ(j["dtype"], "f32") << "no --dtype: the library's choice on the CPU";
  EXPECT_EQ(run_json("-m " + kTiny.string() + " --tokens 5,6,7 -n 4 --greedy --backend cpu --dtype bf16")["dtype"], "bf16");
  EXPECT_GT(j["load_gbps"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["load_gbps"].get<double>(),
                   j["weights_bytes"].get<double>() / j["load_seconds"].get<double>() * 1e-9);
  EXPECT_GE(j["warm_up_seconds"].get<double>(), 0);
  EXPECT_GE(j["ttft_seconds"].get<double>(), j["prefill_seconds"].get<double>()) << "prefill, then the first sample";
  EXPECT_TRUE(j["greedy"]);
}

// --quantize: the projections in 8 bits (the summary says which), the rest as they were.
TEST(DingRun, QuantizeStoresTheProjectionsInEightBits) {
  const std::string run = "-m " + kTiny.string() + " --tokens 5,6,7 -n 4 --greedy --backend cpu";
  const nlohmann::json plain = run_json(run);
  EXPECT_TRUE(plain["weights_quantized"].is_null());
  for (const auto& [flag, name] : {std::pair{"int8", "i8"}, std::pair{"fp8", "f8e4m3"}}) {
    const nlohmann::json j = run_json(run + " --quantize " + flag);
    EXPECT_EQ(j["weights_quantized"], name) << flag;
    EXPECT_EQ(j["generated_ids"].size(), 4u) << flag;
    EXPECT_LT(j["weights_bytes"].get<double>(), plain["weights_bytes"].get<double>()) << flag << ": f32 projections to 8 bits";
  }
}

// Llama-3's eos ids in a tiny model of 260 tokens: accepted as transformers does, said once on stderr.
TEST(DingRun, EosIdsOutsideTheVocabularyAreANote) {
  const std::string folder = (std::filesystem::path(DING_TEST_DATA) / "llama-fixtures" / "llama-mqa-tied-bf16").string();
  const ToolResult r = ding_run("-m " + folder + " --backend cpu --tokens 1,2,3 -n 4 --greedy");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.stderr_only.find("note: eos id 128001, 128009 and bos id 128000 outside the vocabulary of 260"),
            std::string::npos) << r.stderr_only;
  const ToolResult tiny = ding_run("-m " + kTiny.string() + " --tokens 1,2,3 -n 2");
  EXPECT_EQ(tiny.stderr_only.find("note: eos"), std::string::npos) << tiny.stderr_only;
}

// Inputs that once fell back to defaults, hung, took minutes or exited 0 with the output lost.
TEST(DingRun, HostileInputsFailCleanly) {
  const std::string tiny = "-m " + kTiny.string() + " --backend cpu -n 2";
  expect_clean_failure(ding_run("-m '' -n 1"), "-m: the folder path is empty");
  expect_clean_failure(ding_run(tiny + " --tokens ''"), "--tokens: no ids given");
  expect_clean_failure(ding_run(tiny + " -f " + fs::temp_directory_path().string()), "not a regular file (a directory)");
  // 8 MB: refused from its size (the tiny model's 64 positions hold at most a few kB of text)
  // before it is read or tokenized.
  const fs::path huge = fs::temp_directory_path() / ("ding_run_huge_prompt." + std::to_string(getpid()));
  std::ofstream(huge) << std::string(size_t(8) << 20, 'a');
  expect_clean_failure(ding_run(tiny + " -f " + huge.string()), "the context is 64");
  fs::remove(huge);
  // Text that cannot be written is an error, not a success.
  expect_clean_failure(ding_run(tiny + " -p hi > /dev/full"), "writing the output failed");
}

// A copy of the tiny fixture whose first MLP bias (f32) holds `value` in every element.
fs::path tiny_with_mlp_bias(const std::string& name, float value) {
  const fs::path dir = copy_of_tiny(name, {});
  const fs::path weights = dir / "model.safetensors";
  std::string bytes;
  {
    std::ifstream in(weights, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  const auto& bias = header.at("transformer.h.0.mlp.c_fc.bias");
  EXPECT_EQ(bias.at("dtype"), "F32");
  for (uint64_t at = bias.at("data_offsets")[0]; at < bias.at("data_offsets")[1].get<uint64_t>(); at += 4)
    std::memcpy(bytes.data() + 8 + n + at, &value, 4);
  std::ofstream(weights, std::ios::binary) << bytes;
  return dir;
}

// Finite weights whose activations overflow f16 (an MLP bias of 60000: its GELU sums past 65504
// in the residual stream): the step's logits are NaN, and ding-run stops with an error instead
// of sampling a token from them.
TEST(DingRun, NonFiniteLogitsAreAnErrorNotAToken) {
  const fs::path dir = tiny_with_mlp_bias("overflow", 60000.0f);
  const ToolResult r = ding_run("-m " + dir.string() + " --backend cpu --dtype f16 -n 3 --tokens 1,2 --json");
  expect_clean_failure(r, "NaN or infinite");
  EXPECT_EQ(r.stdout_only, "") << "no tokens or summary on stdout";
  fs::remove_all(dir);
}

// --no-weight-check skips the load's check: a NaN weight is refused by name while loading without
// it, and loads with it (the run then stops at the step's non-finite logits instead).
TEST(DingRun, NoWeightCheckSkipsTheLoadsCheck) {
  const fs::path dir = tiny_with_mlp_bias("nan_weight", NAN);
  const std::string args = "-m " + dir.string() + " --backend cpu -n 2 --tokens 1,2";
  const ToolResult checked = ding_run(args);
  expect_clean_failure(checked, "transformer.h.0.mlp.c_fc.bias");
  EXPECT_NE(checked.out.find("holds NaN"), std::string::npos) << checked.out;
  const ToolResult unchecked = ding_run(args + " --no-weight-check");
  expect_clean_failure(unchecked, "NaN or infinite");
  EXPECT_EQ(unchecked.out.find("c_fc.bias"), std::string::npos) << unchecked.out;
  fs::remove_all(dir);
}

// A context whose KV cache the machine cannot hold (here ~950 GiB): refused with the numbers before
// anything is allocated, not "allocated" lazily and killed when touched.
TEST(DingRun, ContextPastTheMachinesMemoryIsRefusedUpFront) {
  const fs::path llama = fs::path(DING_TEST_DATA) / "llama-fixtures" / "llama-gqa-f32";
  expect_clean_failure(ding_run("-m " + llama.string() + " --backend cpu -c 2000000000 -n 2 --tokens 1,2"), "GiB free");
}

TEST(DingRun, CommandLineErrorsExitOneWithOneLine) {
  expect_clean_failure(ding_run("--no-such-flag"), "--no-such-flag");
  expect_clean_failure(ding_run("-n"), "-n");
  expect_clean_failure(ding_run("-n -3"), "-n");
  expect_clean_failure(ding_run("-n many"), "many");
  expect_clean_failure(ding_run("-p a -f b"), "excludes");
  expect_clean_failure(ding_run("--temp warm"), "warm");
  const ToolResult help = ding_run("--help");
  EXPECT_EQ(help.exit_code, 0) << help.out;
  EXPECT_NE(help.out.find("--ctx-size"), std::string::npos) << help.out;
}

TEST(DingRun, FolderWithoutTokenizerRunsOnTokenIds) {
  const fs::path dir = copy_of_tiny("no_tokenizer", {"vocab.json", "merges.txt", "tokenizer.json"});
  const std::string run = "-m " + dir.string() + " --tokens 5,6,7 -n 6 --greedy";
  const ToolResult r = ding_run(run);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = run_json(run);
  EXPECT_TRUE(j["generated_text"].is_null());
  std::string ids;  // stdout is the generated ids, space separated, and a newline; an EOS ends it unshown
  auto streamed = j["generated_ids"];
  if (j["stop_reason"] == "eos") streamed.erase(streamed.size() - 1);
  for (const auto& id : streamed) ids += (ids.empty() ? "" : " ") + id.dump();
  EXPECT_EQ(r.stdout_only, ids + "\n");
  EXPECT_EQ(j["generated_ids"], run_json("-m " + kTiny.string() + " --tokens 5,6,7 -n 6 --greedy")["generated_ids"])
      << "the same model with its tokenizer";
  const std::string no_tokenizer = "the model folder has no tokenizer (tokenizer.json or vocab.json + merges.txt); pass --tokens";
  expect_clean_failure(ding_run("-m " + dir.string() + " -p hello"), no_tokenizer);
  expect_clean_failure(ding_run("-m " + dir.string()), no_tokenizer);
  expect_clean_failure(ding_run(run + " --stop x"), "--stop");
  fs::remove_all(dir);
}

TEST(DingRun, UnsetSamplingFlagsTakeGenerationConfig) {
  const fs::path dir = copy_of_tiny("generation_config", {});
  const std::string run = "-m " + dir.string() + " --tokens 5,6,7 -n 2";
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": false, "temperature": 0.5, "top_k": 7})";
  const nlohmann::json greedy = run_json(run);
  EXPECT_TRUE(greedy["greedy"]) << "do_sample false";
  const nlohmann::json sampled = run_json(run + " --top-p 0.9");
  EXPECT_FALSE(sampled["greedy"]) << "a sampling flag asks for sampling";
  EXPECT_FLOAT_EQ(sampled["temperature"].get<float>(), 0.5f);
  EXPECT_EQ(sampled["top_k"], 7);
  EXPECT_FLOAT_EQ(sampled["top_p"].get<float>(), 0.9f);
  EXPECT_EQ(sampled["sampling_from_generation_config"], (std::vector<std::string>{"temperature", "top_k"}));

  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  const nlohmann::json defaults = run_json(run + " --temp 1.2");
  EXPECT_FALSE(defaults["greedy"]);
  EXPECT_FLOAT_EQ(defaults["temperature"].get<float>(), 1.2f) << "the flag wins";
  EXPECT_FLOAT_EQ(defaults["top_p"].get<float>(), 0.9f);
  EXPECT_EQ(defaults["top_k"], 40) << "neither flag nor file: ding-run's default";
  EXPECT_TRUE(run_json(run + " --greedy")["greedy"]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ding::testing
