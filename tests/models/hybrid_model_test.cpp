// Hybrid linear-attention models (a tiny random Qwen3-Next): what the layers' recurrent states
// must carry. A prompt fed whole, in chunks, or as a prefix and then token by token gives the same
// logits; sequences decoded together keep their own states; a forgotten sequence starts from zero
// states; and the linear layers' cache does not grow with the context. On every host backend.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "ding/ding.h"
#include "ding/models/layers/block.h"
#include "ding/models/model.h"
#include "ding/models/session.h"
#include "expect_error.h"
#include "hostile/folder_edit.h"
#include "op_cases.h"  // nmse

namespace ding::testing {
namespace {

// Linear, full, linear layers; 2 key heads shared by 4 value heads; a 4-wide convolution; 6
// experts top-2 with a gated shared expert.
const char* const kTinyHybrid = R"({"model_type": "qwen3_next", "hidden_size": 32, "intermediate_size": 40,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61,
    "max_position_embeddings": 128, "layer_types": ["linear_attention", "full_attention", "linear_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 6,
    "linear_conv_kernel_dim": 4, "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 12,
    "shared_expert_intermediate_size": 16, "partial_rotary_factor": 0.5, "tie_word_embeddings": false})";

const std::vector<Token> kPrompt = {5, 17, 42, 8, 33, 60, 1, 19, 27, 44, 12, 50, 3, 38, 22, 9, 57, 30, 14, 46};

// The chunk-wise and recurrent forms of the delta rule (which a backend picks by chunk length)
// differ by f32 rounding only: ~1e-13 relative; 1e-10 leaves room and still fails any state lost
// or applied twice (an O(1) change).
constexpr double kSameLogits = 1e-10;

class HybridModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!registry::is_available(GetParam())) GTEST_SKIP() << "backend " << GetParam() << " has no device here";
  }
  Model model() const {
    return Model::random(ModelConfig::from_json_text(kTinyHybrid, "tiny hybrid"), Device::open(GetParam()), {.dtype = DType::f32},
                         11);
  }
};

std::vector<double> host(Session& session, const Tensor& logits) {
  std::vector<float> v(size_t(logits.numel()));
  download(session.stream(), v.data(), logits, logits.nbytes());
  return {v.begin(), v.end()};
}

std::vector<double> prefill_logits(const Model& model, int64_t chunk, std::span<const Token> tokens) {
  Session session(model, {.prefill_chunk = chunk});
  std::vector<float> all;
  session.prefill(0, tokens, &all);
  return {all.begin(), all.end()};
}

TEST_P(HybridModel, ChunksAndDecodeStepsCarryTheStatesExactly) {
  const Model m = model();
  const std::vector<double> whole = prefill_logits(m, 256, kPrompt);
  for (int64_t chunk : {1, 3, 7}) EXPECT_LE(nmse(prefill_logits(m, chunk, kPrompt), whole), kSameLogits) << "chunk " << chunk;
  // A 12-token prefix, then the rest one decode step at a time.
  Session session(m, {.graphs = false});
  session.prefill(0, std::span(kPrompt).first(12));
  const int64_t V = m.config().vocab_size;
  for (size_t t = 12; t < kPrompt.size(); ++t) {
    const std::vector<double> step = host(session, session.decode(std::vector<Token>{kPrompt[t]}));
    const std::vector<double> expected(whole.begin() + int64_t(t) * V, whole.begin() + int64_t(t + 1) * V);
    EXPECT_LE(nmse(step, expected), kSameLogits) << "position " << t;
  }
}

TEST_P(HybridModel, SequencesDecodedTogetherKeepTheirOwnStates) {
  const Model m = model();
  const std::span<const Token> a = std::span(kPrompt).first(9), b = std::span(kPrompt).subspan(9, 6);
  Session together(m, {.max_batch = 2});
  together.prefill(0, a);
  together.prefill(1, b);
  const std::vector<double> both = host(together, together.decode(std::vector<Token>{7, 29}));
  const int64_t V = m.config().vocab_size;
  for (int64_t row = 0; row < 2; ++row) {
    Session alone(m);
    alone.prefill(0, row == 0 ? a : b);
    const std::vector<double> expected = host(alone, alone.decode(std::vector<Token>{row == 0 ? 7 : 29}));
    EXPECT_LE(nmse(std::vector<double>(both.begin() + row * V, both.begin() + (row + 1) * V), expected), kSameLogits) << row;
  }
}

TEST_P(HybridModel, AForgottenSequenceStartsFromZeroStates) {
  const Model m = model();
  const std::span<const Token> other = std::span(kPrompt).first(10), tokens = std::span(kPrompt).subspan(10, 5);
  const std::vector<double> fresh = prefill_logits(m, 256, tokens);
  Session session(m, {.max_batch = 2});
  session.prefill(0, other);
  session.reset(0);
  std::vector<float> again;
  session.prefill(0, tokens, &again);
  EXPECT_LE(nmse(std::vector<double>(again.begin(), again.end()), fresh), kSameLogits);
  // Sequence 1, used then forgotten, decoded from position 0 beside sequence 0.
  session.prefill(1, other);
  session.reset(1);
  const std::vector<double> rows = host(session, session.decode(std::vector<Token>{3, tokens[0]}));
  const int64_t V = m.config().vocab_size;
  const std::vector<double> first(fresh.begin(), fresh.begin() + V);
  EXPECT_LE(nmse(std::vector<double>(rows.begin() + V, rows.end()), first), kSameLogits);
}

TEST_P(HybridModel, LinearLayersCacheTheSameAtAnyContext) {
  const Model m = model();
  const ModelConfig& c = m.config();
  // Per sequence: the convolution's 3 inputs of 2·2·8 + 4·6 channels and the f32 4 × 8 × 6 state.
  const double linear = 3.0 * (32 + 24) * 4 + 4 * 8 * 6 * 4;
  EXPECT_DOUBLE_EQ(layer_cache_bytes(c, 0, DType::f32, 1, 10, 1), linear);
  EXPECT_DOUBLE_EQ(layer_cache_bytes(c, 0, DType::f32, 1, 100000, 1), linear);
  EXPECT_DOUBLE_EQ(layer_cache_bytes(c, 2, DType::f32, 3, 5, 1), 3 * linear);
  // The full-attention layer's grows with the context: K and V of 2 heads of 8 per position.
  EXPECT_DOUBLE_EQ(model_cache_bytes(c, DType::f32, 1, 1000) - model_cache_bytes(c, DType::f32, 1, 100), 900.0 * 2 * 2 * 8 * 4);
  Session small(m, {.max_tokens = 16}), large(m, {.max_tokens = 128});
  EXPECT_EQ(large.kv_cache_bytes() - small.kv_cache_bytes(), size_t(112 * 2 * 2 * 8 * 4));
}

namespace fs = std::filesystem;

// A copy of the f32 hybrid fixture in a scratch folder, edited through hostile/folder_edit.h.
class BadHybridFolder : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          (std::string("ding_bad_hybrid_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::copy(fs::path(DING_TEST_DATA) / "hybrid-fixtures" / "qwen3-next-f32", dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void load() const { Model::load(dir.string(), Device::open("cpu")); }
  // Element `element` of the stored f32 tensor `name` becomes NaN.
  void put_nan(const std::string& name, size_t element) const {
    hostile::Safetensors file(dir / "model.safetensors");
    const nlohmann::json header = nlohmann::json::parse(file.header);
    const size_t at = header[name]["data_offsets"][0].get<size_t>() + 4 * element;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(file.data.data() + at, &nan, 4);
    file.write(dir / "model.safetensors");
  }
};

TEST_F(BadHybridFolder, ProjectionOfTheWrongShapeIsNamed) {
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(dir / "config.json"));
  cfg["linear_value_head_dim"] = 10;  // the stored in_proj_qkvz has rows for 12
  hostile::write_all(dir / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"model.layers.0.linear_attn.in_proj_qkvz.weight", "[160, 64]", "[144, 64]"});
}

TEST_F(BadHybridFolder, MissingDecayParameterIsNamed) {
  hostile::Safetensors file(dir / "model.safetensors");
  nlohmann::json header = nlohmann::json::parse(file.header);
  header.erase("model.layers.2.linear_attn.A_log");
  file.header = header.dump();
  file.write(dir / "model.safetensors");
  expect_error([&] { load(); }, ErrorCode::parse, {"missing tensor", "model.layers.2.linear_attn.A_log"});
}

TEST_F(BadHybridFolder, NaNInTheConvolutionIsNamed) {
  put_nan("model.layers.0.linear_attn.conv1d.weight", 5);
  expect_error([&] { load(); }, ErrorCode::parse, {"model.layers.0.linear_attn.conv1d.weight", "NaN", "[1, 0, 1]"});
}

// Loaded unchecked, a NaN in a projection cannot become 8 bits: quantizing at load names it.
TEST_F(BadHybridFolder, NaNInAProjectionToQuantizeIsNamed) {
  put_nan("model.layers.1.self_attn.o_proj.weight", 70);  // row 1 of [64, 64]
  for (DType format : {DType::i8, DType::f8e4m3})
    expect_error([&] { Model::load(dir.string(), Device::open("cpu"), {.check_weights = false, .quantize = format}); },
                 ErrorCode::parse, {"model.layers.1.self_attn.o_proj.weight", "NaN", "row 1"});
}

INSTANTIATE_TEST_SUITE_P(Backends, HybridModel, ::testing::Values("cpu", "kokkos", "cuda", "hip"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ding::testing
