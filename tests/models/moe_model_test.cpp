// A mixture-of-experts model (a tiny Mixtral with random weights) on every backend against the
// reference backend: prefill and decode logits, and the ops it dispatches. The reference backend
// runs every op in double, so it is the oracle for how the layer composes route, group, the
// expert products and combine; transformers' own logits come with the fixtures
// (tools/fixtures/make_moe_fixtures.py).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "ding/ding.h"
#include "ding/models/model.h"
#include "ding/models/session.h"
#include "op_cases.h"  // nmse

namespace ding::testing {
namespace {

// 6 experts, top-2, GQA; C = 48 so that the CPU's SIMD loops run whole vectors and a tail.
ModelConfig tiny_mixtral() {
  return ModelConfig::from_json_text(R"({"model_type": "mixtral", "hidden_size": 48, "intermediate_size": 40,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
      "max_position_embeddings": 64, "num_local_experts": 6, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "sliding_window": null, "tie_word_embeddings": false})",
                                     "tiny mixtral");
}

// Logits of a 7-token prefill and then 3 decode steps, all as one vector.
std::vector<double> run_logits(const std::string& backend) {
  const Model model = Model::random(tiny_mixtral(), Device::open(backend), {.dtype = DType::f32}, 7);
  Session session(model, {.graphs = false});
  std::vector<double> all;
  const auto append = [&](const Tensor& logits) {
    ASSERT_EQ(logits.dtype, DType::f32);  // the model's compute dtype
    std::vector<float> host(size_t(logits.numel()));
    download(session.stream(), host.data(), logits, logits.nbytes());
    all.insert(all.end(), host.begin(), host.end());
  };
  append(session.prefill(0, std::vector<Token>{3, 14, 15, 92, 65, 35, 89}));
  for (Token t : {79, 32, 38}) append(session.decode(std::vector<Token>{t}));
  return all;
}

class MoeModelOnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!registry::is_available(GetParam())) GTEST_SKIP() << "backend " << GetParam() << " has no device on this machine";
  }
};

// f32 kernels against double: each op's error is a few f32 ulps relative (NMSE ~1e-13 per op);
// two layers of some twenty ops and the LM head stay far below 1e-9. A wrong expert, a wrong
// weight or a row combined into the wrong token moves the logits by O(1) relative (NMSE ≫ 1e-3).
TEST_P(MoeModelOnBackend, LogitsMatchTheReferenceBackend) {
  const std::vector<double> ref = run_logits("ref");
  const std::vector<double> got = run_logits(GetParam());
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_LT(nmse(got, ref), 1e-9);
}

std::vector<std::string> backends() {
  std::vector<std::string> names;
  for (const std::string& b : registry::compiled_backends())
    if (b != "ref") names.push_back(b);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeModelOnBackend, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ding::testing
