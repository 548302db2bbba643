// Mixture-of-experts, latent-attention and hybrid linear-attention models (tiny Mixtral, OLMoE,
// DeepSeek-V2 and Qwen3-Next with random weights) on every backend against the reference backend: prefill and decode logits, decode
// recorded as a graph where the backend records. The reference backend
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
const char* const kTinyMixtral = R"({"model_type": "mixtral", "hidden_size": 48, "intermediate_size": 40,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
    "max_position_embeddings": 64, "num_local_experts": 6, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "sliding_window": null, "tie_word_embeddings": false})";
// q/k norms over whole projections, clip_qkv, 8 experts top-3 unnormalised.
const char* const kTinyOlmoe = R"({"model_type": "olmoe", "hidden_size": 48, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97,
    "max_position_embeddings": 64, "num_experts": 8, "num_experts_per_tok": 3, "norm_topk_prob": false,
    "clip_qkv": 0.8, "rms_norm_eps": 1e-5, "tie_word_embeddings": false})";
// Latent attention with a query bottleneck and YaRN, a dense first layer, then 8 experts in 4
// groups (2 kept), top-3, 2 shared, scaled weights.
const char* const kTinyDeepseek = R"({"model_type": "deepseek_v2", "hidden_size": 48, "intermediate_size": 64,
    "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 3, "q_lora_rank": 20,
    "kv_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 12, "v_head_dim": 10, "n_routed_experts": 8,
    "n_shared_experts": 2, "num_experts_per_tok": 3, "topk_method": "group_limited_greedy", "n_group": 4,
    "topk_group": 2, "routed_scaling_factor": 1.7, "first_k_dense_replace": 1, "vocab_size": 97,
    "max_position_embeddings": 64, "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 16,
    "mscale": 1.0, "mscale_all_dim": 0.8}, "tie_word_embeddings": false})";

// Gated DeltaNet layers around a gated full-attention one (linear, full, linear, linear), 2 key
// heads shared by 4 value heads, a 3-wide convolution, partial rotary (a quarter of 16 dims), 6
// experts top-2 with a gated shared expert, and layer 3 dense (mlp_only_layers).
const char* const kTinyQwen3Next = R"({"model_type": "qwen3_next", "hidden_size": 48, "intermediate_size": 40,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97,
    "max_position_embeddings": 64, "layer_types": ["linear_attention", "full_attention", "linear_attention",
    "linear_attention"], "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 12,
    "linear_value_head_dim": 8, "linear_conv_kernel_dim": 3, "num_experts": 6, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "mlp_only_layers": [3],
    "partial_rotary_factor": 0.25, "rope_theta": 10000.0, "tie_word_embeddings": false})";

struct TinyModel {
  const char* name;
  const char* config;
};

// Logits of a 7-token prefill and then 3 decode steps, all as one vector.
std::vector<double> run_logits(const TinyModel& tiny, const std::string& backend) {
  const Model model = Model::random(ModelConfig::from_json_text(tiny.config, tiny.name), Device::open(backend),
                                    {.dtype = DType::f32}, 7);
  Session session(model, {.graphs = backend != "ref"});
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

struct Param {
  TinyModel model;
  std::string backend;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.model.name << " on " << p.backend; }

class MoeModelOnBackend : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!registry::is_available(GetParam().backend))
      GTEST_SKIP() << "backend " << GetParam().backend << " has no device on this machine";
  }
};

// f32 kernels against double: each op's error is a few f32 ulps relative (NMSE ~1e-13 per op);
// two layers of some twenty ops and the LM head stay far below 1e-9. A wrong expert, a wrong
// weight or a row combined into the wrong token moves the logits by O(1) relative (NMSE ≫ 1e-3).
TEST_P(MoeModelOnBackend, LogitsMatchTheReferenceBackend) {
  const std::vector<double> ref = run_logits(GetParam().model, "ref");
  const std::vector<double> got = run_logits(GetParam().model, GetParam().backend);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_LT(nmse(got, ref), 1e-9);
}

std::vector<Param> params() {
  std::vector<Param> all;
  for (const TinyModel& m : {TinyModel{"mixtral", kTinyMixtral}, {"olmoe", kTinyOlmoe}, {"deepseek_v2", kTinyDeepseek},
                             {"qwen3_next", kTinyQwen3Next}})
    for (const std::string& b : registry::compiled_backends())
      if (b != "ref") all.push_back({m, b});
  return all;
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeModelOnBackend, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.model.name + std::string("_") + info.param.backend;
                         });

}  // namespace
}  // namespace ding::testing
