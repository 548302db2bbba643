// ModelConfig from config.json text as transformers 4 and 5 write it, per family: the fields each
// family reads, the per-layer windows, and the errors for what ding does not run.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "ding/models/config.h"
#include "expect_error.h"

namespace ding::testing {
namespace {

using json = nlohmann::json;

json llama_json() {
  return {{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 3},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 300}, {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0}, {"hidden_act", "silu"}, {"torch_dtype", "bfloat16"},
          {"bos_token_id", 128000}, {"eos_token_id", json::array({128001, 128009, 7})}};
}

ModelConfig parse(const json& j) { return ModelConfig::from_json_text(j.dump(), "config.json"); }

TEST(LlamaConfig, ReadsTheFieldsTransformersWrites) {
  const ModelConfig c = parse(llama_json());
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_kv_head, 2);
  EXPECT_EQ(c.d_head, 16);
  EXPECT_EQ(c.d_ff, 96);
  EXPECT_EQ(c.norm, NormKind::rms_norm);
  EXPECT_EQ(c.positions, PositionKind::rope);
  EXPECT_EQ(c.ffn, FfnKind::gated);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.stored_dtype, DType::bf16);
  EXPECT_EQ(c.bos_token, 128000);  // outside the vocabulary: accepted, as transformers does
  EXPECT_EQ(c.eos_tokens, (std::vector<int32_t>{128001, 128009, 7}));
  EXPECT_EQ(c.reachable_eos(), (std::vector<int32_t>{7}));
  ASSERT_EQ(c.layers.size(), 3u);
  for (const LayerSpec& l : c.layers) EXPECT_EQ(l.window, 0);
}

TEST(LlamaConfig, ExplicitHeadDimAndBiases) {
  json j = llama_json();
  j["head_dim"] = 32;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.d_head, 32);
  EXPECT_TRUE(c.qkv_bias && c.out_bias && c.ffn_bias);
}

TEST(LlamaConfig, Llama3ScalingAsTransformers4And5WriteIt) {
  json v4 = llama_json();
  v4["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  json v5 = llama_json();
  v5.erase("rope_theta");
  v5["rope_parameters"] = v4["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  for (const json& j : {v4, v5}) {
    const ModelConfig c = parse(j);
    EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
    EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::llama3);
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  }
}

TEST(LlamaConfig, LinearScalingUnderTheOldKeyName) {
  json j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::linear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
}

// DeepSeek-V2's rope_scaling, under transformers 4's key; factor absent falls back to the
// context's growth, max_position_embeddings / original_max_position_embeddings.
TEST(LlamaConfig, YarnScaling) {
  json j = llama_json();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
                       {"beta_slow", 1}, {"mscale", 0.707}, {"mscale_all_dim", 0.707}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::yarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.707);
  EXPECT_DOUBLE_EQ(ops::rope_attention_factor(c.rope_scaling), 1.0);  // equal mscales cancel
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 1024}};
  j["max_position_embeddings"] = 4096;
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(ops::rope_attention_factor(c.rope_scaling), 0.1 * std::log(4.0) + 1.0);
  // original_max_position_embeddings beside the scaling (where transformers' standardisation
  // moves it), else the whole context.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(parse(j).rope_scaling.original_max_position, 4096);
  j["original_max_position_embeddings"] = 2048;
  EXPECT_EQ(parse(j).rope_scaling.original_max_position, 2048);
  j.erase("original_max_position_embeddings");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}, {"beta_fast", 1}, {"beta_slow", 2}};
  expect_error([&] { parse(j); }, ErrorCode::parse, {"beta_fast", "beta_slow"});
}

TEST(LlamaConfig, UnsupportedRopeScalingIsNamed) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  expect_error([&] { parse(j); }, ErrorCode::parse, {"longrope"});
}

// Where a config writes both, transformers 4 reads rope_scaling alone and transformers 5 takes it
// over rope_parameters (convert_rope_params_to_dict: rope_scaling or rope_parameters); an empty
// rope_scaling counts as none.
TEST(LlamaConfig, RopeScalingWinsOverRopeParameters) {
  json j = llama_json();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 1000.0}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::linear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);  // the top-level rope_theta beside rope_scaling
  j["rope_scaling"] = json::object();
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::llama3);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000.0);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(j).rope_scaling.kind, ops::RopeScalingKind::llama3);
}

// max_position_embeddings left out: each config class's default, which a YaRN scaling without
// original_max_position_embeddings takes as the original context.
TEST(LlamaConfig, MaxPositionDefaultsPerFamily) {
  const std::pair<const char*, int64_t> defaults[] = {
      {"llama", 2048}, {"mistral", 131072}, {"qwen2", 32768}, {"mixtral", 131072}, {"olmoe", 4096}};
  for (const auto& [type, positions] : defaults) {
    SCOPED_TRACE(type);
    json j = llama_json();
    j["model_type"] = type;
    j["num_local_experts"] = j["num_experts"] = 4;
    j["num_experts_per_tok"] = 2;
    j.erase("max_position_embeddings");
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    const ModelConfig c = parse(j);
    EXPECT_EQ(c.n_positions, positions);
    EXPECT_EQ(c.rope_scaling.original_max_position, positions);
  }
}

// Dynamic NTK keeps the default base up to max_position_embeddings; ding runs it that far.
TEST(LlamaConfig, DynamicScalingIsTheDefaultRopeWithinTheContext) {
  json j = llama_json();
  EXPECT_FALSE(parse(j).context_bounded);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::none);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.context_bounded);
  j["rope_scaling"] = {{"type", "dynamic"}};
  expect_error([&] { parse(j); }, ErrorCode::parse, {"factor"});
}

// hidden_act as transformers' ACT2FN names it: the dense feed-forward's function.
TEST(LlamaConfig, HiddenActNamesTheFeedForwardsFunction) {
  const std::pair<const char*, ops::ActivationFn> names[] = {
      {"silu", ops::ActivationFn::silu},           {"swish", ops::ActivationFn::silu},
      {"gelu", ops::ActivationFn::gelu_erf},       {"gelu_new", ops::ActivationFn::gelu_tanh},
      {"gelu_pytorch_tanh", ops::ActivationFn::gelu_tanh}, {"quick_gelu", ops::ActivationFn::quick_gelu},
      {"relu", ops::ActivationFn::relu}};
  for (const auto& [name, fn] : names) {
    json j = llama_json();
    j["hidden_act"] = name;
    EXPECT_EQ(parse(j).ffn_fn, fn) << name;
  }
  json j = llama_json();
  j.erase("hidden_act");
  EXPECT_EQ(parse(j).ffn_fn, ops::ActivationFn::silu);
}

// What each family's config class assumes where config.json leaves a key out, and the biases
// each family's layers have whatever the config says.
TEST(LlamaConfig, FamilyDefaultsAndBiasesAsTransformersBuildsThem) {
  json j = llama_json();
  j.erase("rope_theta");
  j.erase("rms_norm_eps");
  for (const char* type : {"llama", "mistral", "qwen2", "mixtral", "olmoe"}) {
    SCOPED_TRACE(type);
    json k = j;
    k["model_type"] = type;
    k["num_local_experts"] = k["num_experts"] = 4;
    k["num_experts_per_tok"] = 2;
    k["attention_bias"] = k["mlp_bias"] = true;
    const ModelConfig c = parse(k);
    const std::string t = type;
    EXPECT_DOUBLE_EQ(c.rope_theta, t == "mixtral" ? 1e6 : 1e4);
    EXPECT_FLOAT_EQ(c.norm_eps, t == "mixtral" || t == "olmoe" ? 1e-5f : 1e-6f);
    EXPECT_EQ(c.qkv_bias, t == "llama" || t == "olmoe" || t == "qwen2");
    EXPECT_EQ(c.out_bias, t == "llama" || t == "olmoe");
    EXPECT_EQ(c.ffn_bias, t == "llama");
  }
}

TEST(LlamaConfig, BadValuesAreNamed) {
  json j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_key_value_heads"});
  j = llama_json();
  j["hidden_act"] = "mish";
  expect_error([&] { parse(j); }, ErrorCode::parse, {"hidden_act", "mish"});
  j = llama_json();
  j["model_type"] = "mixtral";  // its experts' products fuse silu
  j["num_local_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["hidden_act"] = "gelu";
  expect_error([&] { parse(j); }, ErrorCode::parse, {"hidden_act", "gelu", "mixtral"});
  j = llama_json();
  j["rms_norm_eps"] = 1e-50;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"rms_norm_eps"});
  j = llama_json();
  j["rms_norm_eps"] = 1e39;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"rms_norm_eps"});
  j = llama_json();
  j.erase("intermediate_size");
  expect_error([&] { parse(j); }, ErrorCode::parse, {"intermediate_size"});
}

// Sizes a config may not imply: a layer count whose per-layer structures alone took gigabytes
// before any weight was read (10^8 layers: 1.5 GB and std::bad_alloc), and sizes each in range
// whose products pass 2^63 (signed overflow in the parameter count, which UBSan reports; both
// found while writing the config fuzz target, tests/fuzz).
TEST(LlamaConfig, SizesPastWhatLoadsAreNamed) {
  json j = llama_json();
  j["num_hidden_layers"] = 100000000;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_hidden_layers", "100000000", "at most 4096"});
  j["num_hidden_layers"] = 4096;
  EXPECT_EQ(parse(j).layers.size(), 4096u);
  j = llama_json();
  j["hidden_size"] = j["intermediate_size"] = j["vocab_size"] = j["head_dim"] = int64_t(1) << 31;
  j["num_attention_heads"] = j["num_key_value_heads"] = int64_t(1) << 31;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"2^63 parameters"});
  ModelConfig c = parse(llama_json());
  c.d_model = c.d_ff = int64_t(1) << 40;
  expect_error([&] { (void)c.parameter_count(); }, ErrorCode::invalid_argument, {"parameter_count", "2^63"});
}

TEST(MistralConfig, SlidingWindowOnEveryLayerUnlessNull) {
  json j = llama_json();
  j["model_type"] = "mistral";
  j["sliding_window"] = 32;
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 32);
  j["sliding_window"] = nullptr;
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 0);
}

json mixtral_json() {
  json j = llama_json();
  j["model_type"] = "mixtral";
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["head_dim"] = nullptr;  // transformers writes MixtralConfig's unset head_dim as null
  j["sliding_window"] = nullptr;
  return j;
}

TEST(MixtralConfig, EveryLayerIsAMixtureOfRenormalisedTopKExperts) {
  const ModelConfig c = parse(mixtral_json());
  EXPECT_EQ(c.d_head, 16);
  EXPECT_EQ(c.moe.experts, 8);
  EXPECT_EQ(c.moe.d_ff, 96);
  EXPECT_EQ(c.moe.route.k, 2);
  EXPECT_EQ(c.moe.route.scoring, ops::MoeScoring::softmax);
  EXPECT_TRUE(c.moe.route.renormalize);
  EXPECT_EQ(c.moe.shared_d_ff, 0);
  ASSERT_EQ(c.layers.size(), 3u);
  for (const LayerSpec& l : c.layers) {
    EXPECT_TRUE(l.moe);
    EXPECT_EQ(l.window, 0);
  }
  // Per layer: attention 64·(64 + 2·32) + 64·64, router 8·64, experts 8·3·64·96, two norms.
  const int64_t per_layer = 64 * 128 + 64 * 64 + 8 * 64 + 8 * 3 * 64 * 96 + 2 * 64;
  EXPECT_EQ(c.parameter_count(), 3 * per_layer + 2 * 300 * 64 + 64);
}

TEST(MixtralConfig, WindowWhenSetAndBadExpertCountsAreNamed) {
  json j = mixtral_json();
  j["sliding_window"] = 40;
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 40);
  j = mixtral_json();
  j["num_experts_per_tok"] = 9;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_experts_per_tok = 9", "num_local_experts = 8"});
  j = mixtral_json();
  j["num_experts_per_tok"] = 0;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_experts_per_tok"});
}

// MixtralConfig's defaults (8 experts, 2 per token) where the keys are left out, and num_experts
// as its alias for num_local_experts (attribute_map); the two disagreeing are refused, as
// transformers versions differ in which one they keep.
TEST(MixtralConfig, ExpertCountDefaultsAndAlias) {
  json j = mixtral_json();
  j.erase("num_local_experts");
  j.erase("num_experts_per_tok");
  ModelConfig c = parse(j);
  EXPECT_EQ(c.moe.experts, 8);
  EXPECT_EQ(c.moe.route.k, 2);
  j["num_experts"] = 4;
  EXPECT_EQ(parse(j).moe.experts, 4);
  j["num_local_experts"] = 4;
  EXPECT_EQ(parse(j).moe.experts, 4);
  j["num_local_experts"] = 6;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_local_experts = 6", "num_experts = 4"});
}

// MixtralConfig has no layer_types: its model windows every layer by sliding_window, whatever the
// key lists (as OLMoE's, which has no window, ignores them).
TEST(MixtralConfig, LayerTypesAreNotMixtrals) {
  json j = mixtral_json();
  j["sliding_window"] = 40;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 40);
  j["layer_types"] = {"full_attention"};
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 40);
  j = llama_json();
  j["model_type"] = "olmoe";
  j["num_experts"] = 8;
  j["layer_types"] = {"sliding_attention", "linear_attention", "full_attention"};
  j["sliding_window"] = 16;
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 0);
}

json olmoe_json() {
  json j = llama_json();
  j["model_type"] = "olmoe";
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["norm_topk_prob"] = false;
  j["clip_qkv"] = nullptr;
  return j;
}

TEST(OlmoeConfig, QkNormsClipAndUnnormalisedRouting) {
  ModelConfig c = parse(olmoe_json());
  EXPECT_EQ(c.qk_norm, QkNorm::whole_projection);
  EXPECT_EQ(c.clip_qkv, 0.0f);
  EXPECT_EQ(c.moe.experts, 8);
  EXPECT_FALSE(c.moe.route.renormalize);
  for (const LayerSpec& l : c.layers) EXPECT_TRUE(l.moe);
  json j = olmoe_json();
  j["clip_qkv"] = 8.0;
  j["norm_topk_prob"] = true;
  c = parse(j);
  EXPECT_EQ(c.clip_qkv, 8.0f);
  EXPECT_TRUE(c.moe.route.renormalize);
  j = olmoe_json();
  j["head_dim"] = 8;  // 4 heads × 8 ≠ hidden_size 64: q_norm over hidden_size would not fit
  expect_error([&] { parse(j); }, ErrorCode::parse, {"head_dim = 8", "hidden_size = 64"});
  j = olmoe_json();
  j["clip_qkv"] = -1.0;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"clip_qkv"});
}

// OlmoeConfig reads num_local_experts as its alias for num_experts (attribute_map).
TEST(OlmoeConfig, ExpertCountAlias) {
  json j = olmoe_json();
  j.erase("num_experts");
  j["num_local_experts"] = 4;
  EXPECT_EQ(parse(j).moe.experts, 4);
  j.erase("num_local_experts");
  j.erase("num_experts_per_tok");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.moe.experts, 64);
  EXPECT_EQ(c.moe.route.k, 8);
  j = olmoe_json();
  j["num_local_experts"] = 16;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_local_experts = 16", "num_experts = 8"});
}

json deepseek_json() {
  return json::parse(R"({"model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 96,
      "moe_intermediate_size": 24, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
      "q_lora_rank": null, "kv_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 12,
      "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2, "topk_method": "greedy",
      "n_group": null, "topk_group": null, "routed_scaling_factor": 1.5, "first_k_dense_replace": 1,
      "moe_layer_freq": 1, "norm_topk_prob": false, "scoring_func": "softmax", "vocab_size": 300,
      "max_position_embeddings": 160, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
      "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                       "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}})");
}

TEST(DeepseekV2Config, LatentAttentionDenseFirstLayerThenExperts) {
  const ModelConfig c = parse(deepseek_json());
  EXPECT_EQ(c.mla.q_lora_rank, 0);
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_EQ(c.mla.rope_dim, 8);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.d_head, 24);
  EXPECT_EQ(c.moe.shared_d_ff, 48);
  EXPECT_FALSE(c.moe.route.renormalize);
  EXPECT_FLOAT_EQ(c.moe.route.routed_scaling, 1.5f);
  EXPECT_EQ(c.moe.route.groups, 1);
  // transformers: (Dn + Dr)^-½ · (0.1·mscale_all_dim·ln factor + 1)².
  const double mscale = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.mla.softmax_scale, mscale * mscale / std::sqrt(24.0), 1e-6);
  ASSERT_EQ(c.layers.size(), 4u);
  EXPECT_FALSE(c.layers[0].moe);
  for (size_t l = 0; l < 4; ++l) {
    EXPECT_EQ(c.layers[l].mixer, MixerKind::latent_attention);
    if (l > 0) EXPECT_TRUE(c.layers[l].moe);
  }
  // Per layer: q 64·4·24, kv_a 64·40 + 32, kv_b 32·4·28, o 4·12·64, two norms; the dense layer's
  // FFN 3·64·96, the others' router 8·64, experts 8·3·64·24 and shared 3·64·48.
  const int64_t attention = 64 * 96 + 64 * 40 + 32 + 32 * 112 + 48 * 64 + 2 * 64;
  const int64_t dense = 3 * 64 * 96, moe = 8 * 64 + 8 * 3 * 64 * 24 + 3 * 64 * 48;
  EXPECT_EQ(c.parameter_count(), 4 * attention + dense + 3 * moe + 2 * 300 * 64 + 64);
}

TEST(DeepseekV2Config, GroupLimitedRoutingAndQueryBottleneck) {
  json j = deepseek_json();
  j["q_lora_rank"] = 20;
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 4;
  j["topk_group"] = 2;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.mla.q_lora_rank, 20);
  EXPECT_EQ(c.moe.route.groups, 4);
  EXPECT_EQ(c.moe.route.top_groups, 2);
}

// Keys a config.json leaves out take transformers' DeepseekV2Config defaults; null ones mean none.
TEST(DeepseekV2Config, AbsentKeysTakeTransformersDefaults) {
  json j = deepseek_json();
  for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                          "n_routed_experts", "n_shared_experts", "moe_intermediate_size"})
    j.erase(key);
  j["num_experts_per_tok"] = 6;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.rope_dim, 64);
  EXPECT_EQ(c.mla.nope_dim, 128);
  EXPECT_EQ(c.mla.value_dim, 128);
  EXPECT_EQ(c.moe.experts, 64);
  EXPECT_EQ(c.moe.d_ff, 1407);
  EXPECT_EQ(c.moe.shared_d_ff, 2 * 1407);
  EXPECT_TRUE(c.layers[1].moe);

  j = deepseek_json();
  j["n_shared_experts"] = nullptr;
  c = parse(j);
  EXPECT_EQ(c.moe.shared_d_ff, 0);
  EXPECT_TRUE(c.layers[1].moe);
  j["n_routed_experts"] = nullptr;  // a dense model
  c = parse(j);
  for (const LayerSpec& layer : c.layers) EXPECT_FALSE(layer.moe);
}

// transformers' DeepseekV2Attention scales the scores by mscale(factor, mscale_all_dim)² under any
// rope type but the default one; the default type, or no mscale_all_dim, leaves (Dn + Dr)^-½.
TEST(DeepseekV2Config, SoftmaxScaleUnderEveryScaledRope) {
  json j = deepseek_json();
  const double mscale = 0.1 * 0.5 * std::log(4.0) + 1.0;
  for (const char* type : {"linear", "dynamic"}) {
    SCOPED_TRACE(type);
    j["rope_scaling"] = {{"type", type}, {"factor", 4.0}, {"mscale_all_dim", 0.5}};
    EXPECT_NEAR(parse(j).mla.softmax_scale, mscale * mscale / std::sqrt(24.0), 1e-6);
  }
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  EXPECT_NEAR(parse(j).mla.softmax_scale, 1.0 / std::sqrt(24.0), 1e-6);
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mscale_all_dim", 0.5}};
  EXPECT_NEAR(parse(j).mla.softmax_scale, 1.0 / std::sqrt(24.0), 1e-6);
}

TEST(DeepseekV2Config, UnsupportedOrBadFieldsAreNamed) {
  const std::vector<std::pair<std::string, json>> bad = {
      {"topk_method", "noaux_tc"}, {"scoring_func", "sigmoid"}, {"moe_layer_freq", 2}, {"qk_rope_head_dim", 7},
      {"attention_bias", true},   {"kv_lora_rank", 0},         {"num_experts_per_tok", 9}};
  for (const auto& [field, value] : bad) {
    json j = deepseek_json();
    j[field] = value;
    expect_error([&] { parse(j); }, ErrorCode::parse, {field});
  }
  json j = deepseek_json();
  j["topk_method"] = "group_limited_greedy";
  j["n_group"] = 3;  // 8 experts do not split into 3 groups
  j["topk_group"] = 2;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"n_group = 3"});
  j["n_group"] = 4;
  j["topk_group"] = 1;  // 2 experts kept, top-2: fine; top-3 is not
  j["num_experts_per_tok"] = 3;
  expect_error([&] { parse(j); }, ErrorCode::parse, {"num_experts_per_tok = 3", "topk_group = 1"});
}

TEST(Qwen2Config, WindowFromMaxWindowLayersOnAndQkvBiases) {
  json j = llama_json();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  j["max_window_layers"] = 1;
  const ModelConfig c = parse(j);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.out_bias);
  EXPECT_EQ(c.layers[0].window, 0);
  EXPECT_EQ(c.layers[1].window, 16);
  EXPECT_EQ(c.layers[2].window, 16);
  j["use_sliding_window"] = false;
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 0);
  j["use_sliding_window"] = true;
  j["sliding_window"] = nullptr;  // Qwen2Config: no window at all
  for (const LayerSpec& l : parse(j).layers) EXPECT_EQ(l.window, 0);
}

TEST(Qwen2Config, LayerTypesWhenWritten) {
  json j = llama_json();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.layers[0].window, 16);
  EXPECT_EQ(c.layers[1].window, 0);
  EXPECT_EQ(c.layers[2].window, 16);
  j["layer_types"] = {"sliding_attention", "linear_attention", "full_attention"};
  expect_error([&] { parse(j); }, ErrorCode::parse, {"linear_attention"});
  j["layer_types"] = {"full_attention"};
  expect_error([&] { parse(j); }, ErrorCode::parse, {"layer_types"});
}

json qwen3_next_json() {
  return json::parse(R"({"model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 8,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
      "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 12, "linear_conv_kernel_dim": 4,
      "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24, "shared_expert_intermediate_size": 32,
      "vocab_size": 300, "rope_theta": 10000.0, "partial_rotary_factor": 0.25, "mlp_only_layers": [5]})");
}

TEST(Qwen3NextConfig, LayersByIntervalPartialRotaryAndGatedAttention) {
  const ModelConfig c = parse(qwen3_next_json());
  ASSERT_EQ(c.layers.size(), 8u);
  // transformers' default: every 4th layer is full attention.
  for (size_t l = 0; l < 8; ++l) {
    EXPECT_EQ(c.layers[l].mixer, (l + 1) % 4 == 0 ? MixerKind::attention : MixerKind::linear_attention) << l;
    EXPECT_EQ(c.layers[l].moe, l != 5) << l;
  }
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.qk_norm, QkNorm::per_head);
  EXPECT_TRUE(c.attention_gate);
  EXPECT_TRUE(c.moe.shared_gate);
  EXPECT_TRUE(c.moe.route.renormalize);  // norm_topk_prob defaults to true
  EXPECT_EQ(c.linear.conv_channels(), 2 * 2 * 16 + 4 * 12);
  EXPECT_EQ(c.n_positions, 32768);
  // A linear layer: the q/k/v/z/b/a projection, the convolution, A_log and dt_bias, the gated
  // norm, out_proj; a full one: q (with its gate), k, v, o and the two head norms. Each layer's
  // MoE: router, experts, shared expert and its gate; layer 5's dense FFN instead.
  const int64_t linear = 64 * (112 + 48 + 8) + 112 * 4 + 8 + 12 + 48 * 64;
  const int64_t full = 64 * (2 * 128 + 2 * 64) + 128 * 64 + 2 * 32;
  const int64_t moe = 8 * 64 + 8 * 3 * 64 * 24 + 3 * 64 * 32 + 64, dense = 3 * 64 * 96;
  EXPECT_EQ(c.parameter_count(), 6 * linear + 2 * full + 7 * moe + dense + 8 * 2 * 64 + 2 * 300 * 64 + 64);
}

TEST(Qwen3NextConfig, LayerTypesRopeParametersAndDefaults) {
  json j = qwen3_next_json();
  j["layer_types"] = {"full_attention", "linear_attention", "linear_attention", "linear_attention",
                      "full_attention", "linear_attention", "full_attention", "linear_attention"};
  j.erase("head_dim");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.5}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.layers[0].mixer, MixerKind::attention);
  EXPECT_EQ(c.layers[1].mixer, MixerKind::linear_attention);
  EXPECT_EQ(c.layers[6].mixer, MixerKind::attention);
  EXPECT_EQ(c.d_head, 256);  // Qwen3NextConfig's default, not hidden_size / heads
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500.0);
  j = qwen3_next_json();
  j["num_experts"] = 0;  // every layer dense
  for (const LayerSpec& l : parse(j).layers) EXPECT_FALSE(l.moe);
}

// Qwen3NextConfig's num_key_value_heads default is 2, not the query heads; layer_types' legacy
// names read as transformers remaps them (remap_legacy_layer_types).
TEST(Qwen3NextConfig, KvHeadsDefaultAndLegacyLayerTypes) {
  json j = qwen3_next_json();
  j.erase("num_key_value_heads");
  j["num_attention_heads"] = 8;
  EXPECT_EQ(parse(j).n_kv_head, 2);
  j = qwen3_next_json();
  j["layer_types"] = {"mamba", "mamba", "mamba", "attention", "linear_attention", "linear_attention", "linear_attention",
                      "full_attention"};
  const ModelConfig c = parse(j);
  for (size_t l = 0; l < 8; ++l)
    EXPECT_EQ(c.layers[l].mixer, l == 3 || l == 7 ? MixerKind::attention : MixerKind::linear_attention) << l;
}

// partial_rotary_factor in rope_parameters counts where they are the rope's parameters; a
// rope_scaling beside them takes their place, and the factor comes from the top level.
TEST(Qwen3NextConfig, PartialRotaryFactorFollowsTheRopeParametersInUse) {
  json j = qwen3_next_json();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_EQ(parse(j).rotary_dim, 16);
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.rope_scaling.kind, ops::RopeScalingKind::linear);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
}

TEST(Qwen3NextConfig, UnsupportedOrBadFieldsAreNamed) {
  const std::vector<std::pair<std::string, json>> bad = {
      {"linear_num_value_heads", 3},  {"linear_key_head_dim", 512},   {"linear_conv_kernel_dim", 1},
      {"linear_conv_kernel_dim", 17}, {"hidden_act", "gelu"},         {"partial_rotary_factor", 0.01},
      {"mlp_only_layers", {"one"}},   {"mlp_only_layers", "all"},     {"num_experts_per_tok", 9},
      {"layer_types", {"linear_attention"}}};
  for (const auto& [field, value] : bad) {
    json j = qwen3_next_json();
    j[field] = value;
    expect_error([&] { parse(j); }, ErrorCode::parse, {field});
  }
  json j = qwen3_next_json();
  j["mlp_only_layers"] = {9, -1};  // no such layers: every layer keeps its mixture, as in transformers
  for (const LayerSpec& l : parse(j).layers) EXPECT_TRUE(l.moe);
  j = qwen3_next_json();
  j["layer_types"] = std::vector<std::string>(8, "sliding_attention");
  expect_error([&] { parse(j); }, ErrorCode::parse, {"layer_types[0]", "sliding_attention"});
}

// GPT2Attention's factor: 1/√D unless scale_attn_weights is false, over layer + 1 where
// scale_attn_by_inverse_layer_idx.
TEST(Gpt2Config, AttentionScaleByLayer) {
  json j = {{"model_type", "gpt2"}, {"n_layer", 3}, {"n_head", 4}, {"n_embd", 64}, {"vocab_size", 300}, {"n_positions", 32}};
  for (const LayerSpec& l : parse(j).layers) EXPECT_FLOAT_EQ(l.attention_scale, 0.25f);
  j["scale_attn_by_inverse_layer_idx"] = true;
  ModelConfig c = parse(j);
  for (int l = 0; l < 3; ++l) EXPECT_FLOAT_EQ(c.layers[size_t(l)].attention_scale, 0.25f / float(l + 1));
  j["scale_attn_weights"] = false;
  c = parse(j);
  for (int l = 0; l < 3; ++l) EXPECT_FLOAT_EQ(c.layers[size_t(l)].attention_scale, 1.0f / float(l + 1));
}

TEST(ModelConfigFamilies, UnknownModelTypeListsTheSupportedOnes) {
  json j = llama_json();
  j["model_type"] = "mamba";
  expect_error([&] { parse(j); }, ErrorCode::parse, {"llama, mistral, qwen2"});
}

}  // namespace
}  // namespace ding::testing
