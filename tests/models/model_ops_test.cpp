// The ops a model needs (model_ops) against what it dispatches, and the load-time refusal of a
// backend that lacks some of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../expect_error.h"
#include "ding/ding.h"
#include "ding/models/model.h"
#include "ding/models/sampler.h"
#include "ding/models/session.h"
#include "ding/ops/kernels.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = DING_TEST_DATA;

// Fixtures of every family and layer kind: learned positions, rope, a sliding window, biases.
const char* const kFixtures[] = {"gpt2-fixtures/tiny-f32", "llama-fixtures/llama-gqa-f32",
                                 "llama-fixtures/mistral-window-f32", "llama-fixtures/qwen2-window-linear-f32"};

// The ops a prefill, a decode step and both kinds of pick dispatch, by the profiler.
std::set<std::string> dispatched(const Model& model) {
  Session session(model, {.graphs = false});
  Profiler profiler;
  session.stream().profiler = &profiler;
  const std::vector<Token> prompt = {1, 2, 3, 4, 5};
  Sampler greedy({.temperature = 0.0f}), sampled({.temperature = 0.8f, .top_k = 5});
  const Tensor logits = session.prefill(0, prompt);
  const Token next = greedy.sample_one(session.stream(), logits);
  const Tensor step = session.decode(std::vector<Token>{next});
  sampled.sample_one(session.stream(), step);
  session.stream().profiler = nullptr;
  std::set<std::string> ops;
  for (const auto& [op, stats] : profiler.stats()) ops.insert(op);
  return ops;
}

TEST(ModelOps, AreWhatTheModelDispatches) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Model model = Model::load((kData / fixture).string(), Device::open("cpu"));
    std::set<std::string> declared;
    for (std::string_view op : model_ops(model.config())) declared.insert(std::string(op));
    EXPECT_EQ(declared, dispatched(model));
  }
}

// A mixture-of-experts model has no fixture folder of its own here; its random-weight twin
// dispatches the same ops.
TEST(ModelOps, MixtureOfExpertsModelDispatchesWhatItDeclares) {
  const ModelConfig config = ModelConfig::from_json_text(
      R"({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50, "num_local_experts": 4,
          "num_experts_per_tok": 2})",
      "tiny mixtral");
  const Model model = Model::random(config, Device::open("cpu"));
  std::set<std::string> declared;
  for (std::string_view op : model_ops(model.config())) declared.insert(std::string(op));
  EXPECT_EQ(declared, dispatched(model));
}

// cpu's table with some of a model's ops taken out.
ops::Kernels without_attention_decode_and_rope() {
  ops::Kernels k = Device::open("cpu").kernels();
  k.attention_decode = nullptr;
  k.rope = nullptr;
  return k;
}

TEST(ModelOps, ABackendWithoutSomeIsRefusedNamingThemAll) {
  const ops::Kernels k = without_attention_decode_and_rope();
  const ModelConfig llama = ModelConfig::from_json_file((kData / "llama-fixtures/llama-gqa-f32/config.json").string());
  expect_error([&] { require_kernels(k, "partial", llama, "DIR"); }, ErrorCode::not_implemented,
               {"DIR: backend partial has no kernel for attention_decode, rope", "llama model needs"});
  // GPT-2 has learned positions: only attention_decode is missing for it.
  const ModelConfig gpt2 = ModelConfig::from_json_file((kData / "gpt2-fixtures/tiny-f32/config.json").string());
  expect_error([&] { require_kernels(k, "partial", gpt2, "DIR"); }, ErrorCode::not_implemented,
               {"no kernel for attention_decode (a gpt2 model"});
  EXPECT_NO_THROW(require_kernels(Device::open("cpu").kernels(), "cpu", llama, "DIR"));
}

}  // namespace
}  // namespace ding::testing
