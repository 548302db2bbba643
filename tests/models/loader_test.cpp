// Bad model folders: every malformed or mismatched file gets a ding::Error naming the file, the
// field or tensor, and the value — never a crash. Each case corrupts a copy of a valid fixture.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ding/ding.h"
#include "ding/models/model.h"
#include "ding/models/safetensors.h"
#include "ding/models/session.h"
#include "expect_error.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";
const fs::path kSharded = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "untied-sharded-bf16";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

// A fresh copy of a fixture folder in a per-test scratch directory.
class BadModel : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() / fmt_name(info->name());
    fs::remove_all(dir);
    fs::copy(kTiny, dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  static std::string fmt_name(const char* test) { return std::string("ding_bad_model_") + test; }

  // The safetensors header as JSON, and the data section after it.
  nlohmann::json header() const {
    const std::string bytes = read_all(dir / "model.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return nlohmann::json::parse(bytes.substr(8, n));
  }
  std::string data() const {
    const std::string bytes = read_all(dir / "model.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return bytes.substr(8 + n);
  }
  void write_safetensors(const nlohmann::json& h, const std::string& d) const {
    const std::string text = h.dump();
    const uint64_t n = text.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    write_all(dir / "model.safetensors", bytes + text + d);
  }
  void load() const { Model::load(dir.string(), Device::open("cpu")); }
};

TEST_F(BadModel, TruncatedFileShorterThanTheHeaderLength) {
  write_all(dir / "model.safetensors", "abc");
  expect_error([&] { load(); }, ErrorCode::parse, {"model.safetensors", "truncated", "3 bytes"});
}

TEST_F(BadModel, HeaderLengthPastTheEndOfTheFile) {
  std::string bytes = read_all(dir / "model.safetensors");
  const uint64_t huge = uint64_t(bytes.size()) * 2;
  std::memcpy(bytes.data(), &huge, 8);
  write_all(dir / "model.safetensors", bytes);
  expect_error([&] { load(); }, ErrorCode::parse, {"header length", std::to_string(huge), "past the end"});
}

TEST_F(BadModel, TruncatedDataSection) {
  std::string bytes = read_all(dir / "model.safetensors");
  write_all(dir / "model.safetensors", bytes.substr(0, bytes.size() - 100));
  expect_error([&] { load(); }, ErrorCode::parse, {"data_offsets", "outside"});
}

TEST_F(BadModel, MalformedHeaderJson) {
  const std::string text = "{\"wte.weight\": {\"dtype\": \"F32\", ";
  const uint64_t n = text.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  write_all(dir / "model.safetensors", bytes + text);
  expect_error([&] { load(); }, ErrorCode::parse, {"model.safetensors", "not valid JSON"});
}

TEST_F(BadModel, OffsetsOutOfRange) {
  nlohmann::json h = header();
  h["transformer.wte.weight"]["data_offsets"][1] = data().size() + 4096;
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"transformer.wte.weight", "outside"});
}

TEST_F(BadModel, OverlappingTensors) {
  nlohmann::json h = header();
  h["transformer.ln_f.bias"]["data_offsets"] = h["transformer.ln_f.weight"]["data_offsets"];
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"overlap", "transformer.ln_f"});
}

TEST_F(BadModel, SizeNotMatchingDtypeTimesShape) {
  nlohmann::json h = header();
  h["transformer.ln_f.bias"]["dtype"] = "F16";
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"transformer.ln_f.bias", "needs 128 bytes", "hold 256"});
}

TEST_F(BadModel, UnsupportedDtype) {
  nlohmann::json h = header();
  h["transformer.ln_f.bias"]["dtype"] = "C64";
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"transformer.ln_f.bias", "unsupported dtype", "C64"});
}

TEST_F(BadModel, ShapeNotMatchingConfig) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["n_inner"] = 100;
  write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"transformer.h.0.mlp.c_fc.weight", "[64, 256]", "[64, 100]"});
}

TEST_F(BadModel, IntegerWeightsAreRejected) {
  nlohmann::json h = header();
  h["transformer.ln_f.bias"]["dtype"] = "I32";  // 64 × 4 bytes, the same size as F32
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"transformer.ln_f.bias", "dtype i32"});
}

TEST_F(BadModel, MissingTensor) {
  nlohmann::json h = header();
  h.erase("transformer.h.1.ln_2.weight");
  write_safetensors(h, data());
  expect_error([&] { load(); }, ErrorCode::parse, {"missing tensor", "transformer.h.1.ln_2.weight"});
}

TEST_F(BadModel, MissingWeightsFile) {
  fs::remove(dir / "model.safetensors");
  expect_error([&] { load(); }, ErrorCode::io, {"no model.safetensors"});
}

TEST_F(BadModel, MissingConfig) {
  fs::remove(dir / "config.json");
  expect_error([&] { load(); }, ErrorCode::io, {"config.json", "cannot open"});
}

TEST_F(BadModel, MalformedConfig) {
  write_all(dir / "config.json", "{\"model_type\": \"gpt2\", ");
  expect_error([&] { load(); }, ErrorCode::parse, {"config.json", "not valid JSON"});
}

TEST_F(BadModel, ConfigFieldOfTheWrongType) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["n_head"] = "four";
  write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"config.json", "n_head", "positive integer", "\"four\""});
}

TEST_F(BadModel, ConfigHeadsNotDividingWidth) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["n_head"] = 5;
  write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"n_embd = 64", "n_head = 5"});
}

TEST_F(BadModel, UnknownModelType) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["model_type"] = "mamba";
  write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"unknown model_type", "mamba"});
}

TEST_F(BadModel, UnsupportedActivation) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["activation_function"] = "mish";
  write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"activation_function", "mish"});
}

TEST_F(BadModel, MissingTokenizerFiles) {
  fs::remove(dir / "merges.txt");
  expect_error([&] { load(); }, ErrorCode::io, {"merges.txt"});
}

TEST_F(BadModel, HalfATokenizerIsNamed) {
  fs::remove(dir / "vocab.json");
  expect_error([&] { load(); }, ErrorCode::io, {"vocab.json"});
}

// What transformers loads, ding loads: a folder without tokenizer files runs on token ids.
TEST_F(BadModel, FolderWithoutTokenizerFilesLoadsForTokenIds) {
  fs::remove(dir / "merges.txt");
  fs::remove(dir / "vocab.json");
  const Model model = Model::load(dir.string(), Device::open("cpu"));
  EXPECT_FALSE(model.has_tokenizer());
  expect_error([&] { model.tokenizer(); }, ErrorCode::invalid_argument, {"no tokenizer", dir.string()});
  Session session(model);
  EXPECT_NO_THROW(session.prefill(0, std::vector<Token>{1, 2, 3}));
}

// Padded or truncated embedding tables are common: a tokenizer larger than vocab_size and
// bos/eos ids outside the table load; an id outside the table is refused where it enters.
TEST_F(BadModel, TokenizerLargerThanTheEmbeddingTableLoads) {
  nlohmann::json cfg = nlohmann::json::parse(read_all(dir / "config.json"));
  cfg["vocab_size"] = 300;
  cfg["bos_token_id"] = 50256;
  cfg["eos_token_id"] = 50256;
  write_all(dir / "config.json", cfg.dump());
  nlohmann::json header_json = header();
  const std::string d = data();
  // Keep the file consistent with vocab_size 300: wte's first 300 rows are a view of its bytes.
  auto& wte = header_json[header_json.contains("transformer.wte.weight") ? "transformer.wte.weight" : "wte.weight"];
  wte["shape"][0] = 300;
  const int64_t begin = wte["data_offsets"][0];
  wte["data_offsets"][1] = begin + 300 * int64_t(wte["shape"][1]) * 4;
  write_safetensors(header_json, d);
  const Model model = Model::load(dir.string(), Device::open("cpu"));
  EXPECT_TRUE(model.has_tokenizer());
  EXPECT_EQ(model.tokenizer().vocab_size(), 512);
  EXPECT_TRUE(model.config().reachable_eos().empty());
  Session session(model);
  expect_error([&] { session.prefill(0, std::vector<Token>{1, 400}); }, ErrorCode::invalid_argument, {"400", "300"});
}

TEST_F(BadModel, NotAFolder) {
  expect_error([&] { Model::load((dir / "nope").string(), Device::open("cpu")); }, ErrorCode::io, {"nope", "not a directory"});
}

TEST(ShardedModel, IndexPointingAtAMissingShardFails) {
  const fs::path dir = fs::temp_directory_path() / "ding_bad_sharded";
  fs::remove_all(dir);
  fs::copy(kSharded, dir);
  fs::remove(dir / "model-00003-of-00005.safetensors");
  expect_error([&] { Model::load(dir.string(), Device::open("cpu")); }, ErrorCode::io, {"model-00003-of-00005.safetensors"});
  fs::remove_all(dir);
}

TEST(ShardedModel, LoadsEveryShard) {
  const WeightFiles files = WeightFiles::open_folder(kSharded.string());
  EXPECT_TRUE(files.has("lm_head.weight"));
  EXPECT_TRUE(files.has("transformer.h.1.mlp.c_proj.weight"));
  EXPECT_EQ(files.get("transformer.wte.weight").shape, (std::vector<int64_t>{512, 40}));
}

}  // namespace
}  // namespace ding::testing
