// Model parity with transformers: every fixture folder (tiny random models written by
// tools/fixtures/make_gpt2_fixtures.py and make_llama_fixtures.py, with float64 reference logits
// from transformers' own model classes) is loaded and run on every available backend in each
// compute dtype: the logits of every prompt position, and a greedy continuation through decode.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ding/ding.h"
#include "ding/models/generate.h"
#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = fs::path(DING_TEST_DATA);
// The fixture sets: GPT-2 folders (with tokenizers) and Llama/Mistral/Qwen2 folders (token ids only).
const char* const kFixtureSets[] = {"gpt2-fixtures", "llama-fixtures", "moe-fixtures", "hybrid-fixtures"};

struct Fixture {
  std::string name;
  nlohmann::json meta;
  std::vector<double> logits;  // [T, V]
};

Fixture read_fixture(const fs::path& folder) {
  Fixture f;
  f.name = folder.filename().string();
  std::ifstream meta(folder / "reference.json");
  f.meta = nlohmann::json::parse(meta);
  std::ifstream raw(folder / "reference_logits.f64", std::ios::binary);
  const int64_t T = f.meta["logits_shape"][0], V = f.meta["logits_shape"][1];
  f.logits.resize(size_t(T * V));
  raw.read(reinterpret_cast<char*>(f.logits.data()), std::streamsize(f.logits.size() * sizeof(double)));
  EXPECT_TRUE(raw.good()) << "reference_logits.f64 of " << f.name << " is short";
  return f;
}

std::vector<fs::path> fixture_folders(const char* set) {
  std::vector<fs::path> folders;
  if (fs::exists(kData / set))
    for (const auto& entry : fs::directory_iterator(kData / set))
      if (entry.is_directory()) folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  return folders;
}

// Logits NMSE bound per compute dtype, against the float64 reference.
// f32: 1e-6; measured ≈ 1e-13 (GPT-2) and ≈ 1e-11 (rotary models: transformers forms the rotary
// angle and its cos/sin in float32 even in a float64 model, which ding's f32 kernels also do, but
// not identically). f16/bf16: every activation and weight rounded to the dtype at each of ~10 ops
// per block; the error compounds over layers, so the bound is a few hundred times rounding_nmse.
double logits_bound(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-6;
    case DType::f16: return 300 * rounding_nmse(DType::f16);
    default: return 300 * rounding_nmse(DType::bf16);
  }
}

// A greedy step is compared only where the reference's top-1/top-2 logit margin exceeds what
// the dtype's error can flip: comfortably above the largest logit error seen at the bound.
double margin_needed(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-3;
    case DType::f16: return 0.05;
    default: return 0.25;
  }
}

// A fixture that records transformers' own error at a dtype (own_nmse: its model class run in
// float16 / bfloat16 against the float64 logits, hf_fixtures.py) may be more sensitive to rounding
// than the dtype bound assumes (the random Qwen3-Next fixtures: near-tied routing, recurrent
// states; transformers' own bf16 error is 0.5–1.1 x the bf16 bound there). ding is then held to
// 3 x what transformers gets at that dtype, where that is looser: measured 0.96–1.2 x transformers'
// error on cpu, kokkos and cuda.
double fixture_bound(const nlohmann::json& meta, DType dtype) {
  double bound = logits_bound(dtype);
  const char* key = dtype == DType::f16 ? "float16" : dtype == DType::bf16 ? "bfloat16" : nullptr;
  if (key && meta.contains("own_nmse") && meta["own_nmse"].contains(key))
    bound = std::max(bound, 3.0 * meta["own_nmse"][key].get<double>());
  return bound;
}

struct ParityParam {
  fs::path folder;
  std::string backend;
  DType dtype;
  int64_t prefill_chunk = 256;  // smaller than the prompt: chunks carry the cache across
};

void PrintTo(const ParityParam& p, std::ostream* os) {
  *os << p.folder.filename().string() << " on " << p.backend << " in " << dtype_name(p.dtype) << " chunk " << p.prefill_chunk;
}

class ModelParity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(ModelParity, LogitsOfEveryPromptPositionMatchTransformers) {
  const ParityParam& p = GetParam();
  if (!registry::is_available(p.backend)) GTEST_SKIP() << "backend " << p.backend << " has no device here";
  const Fixture f = read_fixture(p.folder);
  Model model = Model::load(p.folder.string(), Device::open(p.backend), {.dtype = p.dtype});
  Session session(model, {.prefill_chunk = p.prefill_chunk});
  const std::vector<Token> prompt = f.meta["prompt_ids"].get<std::vector<Token>>();
  std::vector<float> logits;
  session.prefill(0, prompt, &logits);
  ASSERT_EQ(logits.size(), f.logits.size());
  const double err = nmse(std::vector<double>(logits.begin(), logits.end()), f.logits);
  const double bound = fixture_bound(f.meta, p.dtype);
  EXPECT_LE(err, bound) << "NMSE against transformers' float64 logits";
  RecordProperty("logits_nmse", fmt::format("{:.3g}", err));
  std::printf("[ parity   ] %s on %s in %s (chunk %lld): logits NMSE %.3g (bound %.3g)\n", f.name.c_str(), p.backend.c_str(),
              std::string(dtype_name(p.dtype)).c_str(), (long long)p.prefill_chunk, err, bound);
}

TEST_P(ModelParity, GreedyTokensMatchWhereTheMarginAllows) {
  const ParityParam& p = GetParam();
  if (!registry::is_available(p.backend)) GTEST_SKIP() << "backend " << p.backend << " has no device here";
  const Fixture f = read_fixture(p.folder);
  Model model = Model::load(p.folder.string(), Device::open(p.backend), {.dtype = p.dtype});
  Session session(model, {.prefill_chunk = p.prefill_chunk});
  Sampler greedy({.temperature = 0.0f});
  const auto prompt = f.meta["greedy_prompt_ids"].get<std::vector<Token>>();
  const auto expected = f.meta["greedy_ids"].get<std::vector<Token>>();
  const auto margins = f.meta["greedy_margins"].get<std::vector<double>>();
  const GenerateResult r = generate(session, greedy, prompt, {.max_new_tokens = int64_t(expected.size()), .stop_at_eos = false});
  ASSERT_EQ(r.tokens.size(), expected.size());
  int compared = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (margins[i] < margin_needed(p.dtype)) break;  // past here a legitimate flip may change the rest
    EXPECT_EQ(r.tokens[i], expected[i]) << "greedy step " << i << " (reference margin " << margins[i] << ")";
    ++compared;
  }
  RecordProperty("greedy_tokens_compared", compared);
}

// Quantized at load (LoadOptions::quantize), f32 activations: the logits of every prompt position
// against the same float64 reference, within issue 22's bounds: 1e-3 for int8 (a row's values
// rounded to 1/254 of its range) and 2e-2 for fp8 (E4M3's 3-bit mantissa: 2^-4 relative). Only
// the projections and experts turn 8-bit; the embeddings, LM head, routers and norms stay f32.
// A fixture that records its own sensitivity (own_nmse, fixture_bound) is held to a multiple of
// transformers' own bf16 error instead, where that is looser: on the other fixtures 8-bit
// projections cost 1.5–7x (int8: 1.3e-4–7.1e-4) and 15–80x (fp8: 1.7e-3–9.9e-3) ding's bf16 error
// (4e-5–1.2e-4); on the Qwen3-Next ones 2.0–2.3x and 25–41x transformers' bf16 error.
// A fixture that records transformers' own error on the same 8-bit weights (quantized_nmse,
// tools/fixtures/quantized_reference.py: float64 arithmetic, so all of it is the format's) is held
// to twice that where it is looser: where routing is close, 8-bit weights move some token to
// another expert, and the format alone then exceeds the bound.
double quantized_bound(const nlohmann::json& meta, DType format) {
  double bound = format == DType::i8 ? 1e-3 : 2e-2;
  const double own_multiple = format == DType::i8 ? 4.0 : 60.0;
  if (meta.contains("own_nmse") && meta["own_nmse"].contains("bfloat16"))
    bound = std::max(bound, own_multiple * meta["own_nmse"]["bfloat16"].get<double>());
  const std::string format_name(dtype_name(format));
  if (meta.contains("quantized_nmse") && meta["quantized_nmse"].contains(format_name))
    bound = std::max(bound, 2.0 * meta["quantized_nmse"][format_name].get<double>());
  return bound;
}

class QuantizedParity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(QuantizedParity, LogitsWithEightBitProjectionsStayNearTransformers) {
  const ParityParam& p = GetParam();
  if (!registry::is_available(p.backend)) GTEST_SKIP() << "backend " << p.backend << " has no device here";
  const Fixture f = read_fixture(p.folder);
  const std::vector<Token> prompt = f.meta["prompt_ids"].get<std::vector<Token>>();
  for (DType format : {DType::i8, DType::f8e4m3}) {
    const double bound = quantized_bound(f.meta, format);
    Model model = Model::load(p.folder.string(), Device::open(p.backend), {.dtype = DType::f32, .quantize = format});
    ASSERT_EQ(model.quantized(), std::optional(format));
    const LayerWeights& first = model.weights().layers[0];
    const Tensor& mixer_in = first.attention.qkv_w.defined() ? first.attention.qkv_w
                             : first.linear.in_w.defined()  ? first.linear.in_w
                                                            : first.latent.in_w;
    EXPECT_EQ(mixer_in.dtype, format);
    EXPECT_NE(mixer_in.scales, nullptr);
    EXPECT_EQ(model.weights().token_embedding.dtype, DType::f32) << "the embedding keeps the compute dtype";
    for (const LayerWeights& layer : model.weights().layers)
      if (layer.moe.up_w.defined()) {
        EXPECT_EQ(layer.moe.up_w.dtype, format) << "the routed experts turn 8-bit";
        EXPECT_EQ(layer.moe.down_w.dtype, format);
        EXPECT_NE(layer.moe.down_w.scales, nullptr);
        EXPECT_EQ(layer.moe.router_w.dtype, DType::f32) << "the router keeps the compute dtype";
      }
    Session session(model, {.prefill_chunk = p.prefill_chunk});
    std::vector<float> logits;
    session.prefill(0, prompt, &logits);
    ASSERT_EQ(logits.size(), f.logits.size());
    const double err = nmse(std::vector<double>(logits.begin(), logits.end()), f.logits);
    EXPECT_LE(err, bound) << dtype_name(format) << " projections: NMSE against transformers' float64 logits";
    RecordProperty(fmt::format("logits_nmse_{}", dtype_name(format)), fmt::format("{:.3g}", err));
    std::printf("[ quantized] %s on %s, %s projections: logits NMSE %.3g (bound %.3g)\n", f.name.c_str(),
                p.backend.c_str(), std::string(dtype_name(format)).c_str(), err, bound);
  }
}

// LoadOptions::quantize_lm_head: the head in 8 bits as well, a tied model's as a copy of the
// embedding (whose lookup keeps the compute dtype); within the same bounds against transformers.
TEST(QuantizedLoad, TheLmHeadQuantizesOnRequest) {
  for (const char* name : {"gpt2-fixtures/tiny-f32", "llama-fixtures/llama-gqa-f32", "llama-fixtures/llama-mqa-tied-bf16"}) {
    const Fixture f = read_fixture(kData / name);
    for (DType format : {DType::i8, DType::f8e4m3}) {
      const Model model = Model::load((kData / name).string(), Device::open("cpu"),
                                      {.dtype = DType::f32, .quantize = format, .quantize_lm_head = true});
      const ModelWeights& w = model.weights();
      EXPECT_EQ(w.lm_head.dtype, format) << name;
      EXPECT_NE(w.lm_head.scales, nullptr) << name;
      EXPECT_EQ(w.token_embedding.dtype, DType::f32) << name << ": the lookup keeps the compute dtype";
      EXPECT_NE(w.lm_head.data, w.token_embedding.data) << name;
      Session session(model, {});
      std::vector<float> logits;
      session.prefill(0, f.meta["prompt_ids"].get<std::vector<Token>>(), &logits);
      const double err = nmse(std::vector<double>(logits.begin(), logits.end()), f.logits);
      EXPECT_LE(err, quantized_bound(f.meta, format)) << name << " " << dtype_name(format);
      std::printf("[ quantized] %s, %s projections and LM head: logits NMSE %.3g\n", name,
                  std::string(dtype_name(format)).c_str(), err);
    }
  }
  expect_error([&] { Model::load((kData / "gpt2-fixtures" / "tiny-f32").string(), Device::open("cpu"), {.quantize_lm_head = true}); },
               ErrorCode::invalid_argument, {"quantize_lm_head needs quantize"});
}

TEST(QuantizedLoad, OnlyEightBitFormatsAreTaken) {
  const fs::path folder = kData / "gpt2-fixtures" / "tiny-f32";
  for (DType wrong : {DType::f16, DType::bf16, DType::i32})
    expect_error([&] { Model::load(folder.string(), Device::open("cpu"), {.quantize = wrong}); }, ErrorCode::invalid_argument,
                 {"Model::load", "weights quantize to i8 or f8e4m3", std::string(dtype_name(wrong))});
}

std::vector<ParityParam> quantized_params() {
  std::vector<ParityParam> params;
  for (const std::string& backend : registry::compiled_backends()) {
    if (backend == "ref") continue;
    for (const char* set : kFixtureSets)
      for (const fs::path& folder : fixture_folders(set)) params.push_back({folder, backend, DType::f32});
  }
  return params;
}

std::vector<ParityParam> parity_params() {
  std::vector<ParityParam> params;
  for (const std::string& backend : registry::compiled_backends()) {
    if (backend == "ref") continue;  // the reference kernels at model scale add minutes, not coverage
    for (const char* set : kFixtureSets)
      for (const fs::path& folder : fixture_folders(set)) {
        for (DType dtype : {DType::f32, DType::f16, DType::bf16}) params.push_back({folder, backend, dtype});
        params.push_back({folder, backend, DType::f32, 7});  // chunks of 7: caches and windows across chunks
      }
  }
  return params;
}

std::string param_name(const ::testing::TestParamInfo<ParityParam>& info) {
  std::string name = info.param.backend + "_" + info.param.folder.filename().string() + "_" +
                     std::string(dtype_name(info.param.dtype));
  if (info.param.prefill_chunk != 256) name += fmt::format("_chunk{}", info.param.prefill_chunk);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParity, ::testing::ValuesIn(parity_params()), param_name);
INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedParity, ::testing::ValuesIn(quantized_params()), param_name);

TEST(ModelFixtures, ArePresent) {
  EXPECT_GE(fixture_folders("gpt2-fixtures").size(), 4u) << "expected the GPT-2 fixtures in " << kData / "gpt2-fixtures";
  EXPECT_GE(fixture_folders("llama-fixtures").size(), 6u) << "expected the Llama-family fixtures in " << kData / "llama-fixtures";
}

}  // namespace
}  // namespace ding::testing

namespace ding::testing {
namespace {

// transformers 5 writes rope_parameters and dtype; transformers 4 wrote rope_theta, rope_scaling
// and torch_dtype. The same weights under either spelling give the same logits.
// A sliding-window layer's cache holds its window and one prefill chunk (a rolling cache), not the
// context: on the Mistral fixture (window 8, every layer sliding) with chunks of 7 and a
// 128-position context, 8 + 7 − 1 = 14 slots per layer. ModelParity's chunk-7 runs check that
// such caches give transformers' logits and tokens for prompts and continuations past 14.
TEST(ModelFixtures, SlidingWindowCacheHoldsTheWindowAndOneChunk) {
  const fs::path folder = kData / "llama-fixtures" / "mistral-window-f32";
  Model model = Model::load(folder.string(), Device::open("cpu"), {.dtype = DType::f32});
  const ModelConfig& c = model.config();
  for (const LayerSpec& layer : c.layers) ASSERT_EQ(layer.window, 8);
  Session session(model, {.max_batch = 2, .max_tokens = 128, .prefill_chunk = 7});
  const size_t slots = 8 + 7 - 1;
  EXPECT_EQ(session.kv_cache_bytes(), size_t(c.n_layer) * 2 * 2 * slots * size_t(c.n_kv_head * c.d_head) * sizeof(float));
  // A prompt of 100 tokens wraps the 14 slots many times. Every position's logits equal those of a
  // session whose single 100-token chunk keeps a plain cache (slots = the 128 positions).
  std::vector<Token> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = Token(i * 7 % c.vocab_size);
  std::vector<float> rolling, plain;
  session.prefill(0, prompt, &rolling);
  Session whole(model, {.max_batch = 1, .max_tokens = 128, .prefill_chunk = 128});
  whole.prefill(0, prompt, &plain);
  ASSERT_EQ(rolling.size(), plain.size());
  // f32 on both sides; only the chunking of the products differs, so only summation order can: the
  // bound sits far above f32 rounding noise and far below a wrong key (NMSE of order 1).
  EXPECT_LE(nmse(std::vector<double>(rolling.begin(), rolling.end()), std::vector<double>(plain.begin(), plain.end())), 1e-10);
}

// transformers' dynamic NTK rope computes the default frequencies until a sequence outgrows
// max_position_embeddings: a fixture relabelled dynamic gives the same logits, and a session that
// could outgrow that context is refused.
TEST(ModelConfigSpelling, DynamicRopeIsTheDefaultWithinMaxPositions) {
  const fs::path folder = kData / "llama-fixtures" / "llama-gqa-f32";
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(folder / "config.json"));
  ASSERT_EQ(cfg["rope_parameters"]["rope_type"], "default");
  const fs::path copy = fs::temp_directory_path() / "ding_dynamic_rope_config";
  fs::remove_all(copy);
  fs::copy(folder, copy);
  cfg["rope_parameters"]["rope_type"] = "dynamic";
  cfg["rope_parameters"]["factor"] = 4.0;
  std::ofstream(copy / "config.json") << cfg.dump(2);
  const std::vector<Token> prompt = read_fixture(folder).meta["prompt_ids"].get<std::vector<Token>>();
  const int64_t positions = cfg["max_position_embeddings"].get<int64_t>();
  std::vector<float> plain, dynamic;
  {
    Model model = Model::load(folder.string(), Device::open("cpu"), {.dtype = DType::f32});
    Session(model, {.max_tokens = positions}).prefill(0, prompt, &plain);
  }
  {
    Model model = Model::load(copy.string(), Device::open("cpu"), {.dtype = DType::f32});
    Session(model, {.max_tokens = positions}).prefill(0, prompt, &dynamic);
    expect_error([&] { Session(model, {.max_tokens = positions + 1}); }, ErrorCode::invalid_argument,
                 {fmt::format("max_tokens {}", positions + 1), "max_position_embeddings", "dynamic"});
  }
  EXPECT_EQ(dynamic, plain);
  fs::remove_all(copy);
}

TEST(ModelConfigSpelling, Transformers4ConfigGivesTheSameLogitsAsTransformers5) {
  int compared = 0;
  for (const fs::path& folder : fixture_folders("llama-fixtures")) {
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(folder / "config.json"));
    if (!cfg.contains("rope_parameters")) continue;
    const fs::path copy = fs::temp_directory_path() / ("ding_v4_config_" + folder.filename().string());
    fs::remove_all(copy);
    fs::copy(folder, copy);
    nlohmann::json rope = cfg["rope_parameters"];
    cfg.erase("rope_parameters");
    cfg["rope_theta"] = rope["rope_theta"];
    rope.erase("rope_theta");
    if (rope["rope_type"] != "default") cfg["rope_scaling"] = rope;
    if (cfg.contains("dtype")) {
      cfg["torch_dtype"] = cfg["dtype"];
      cfg.erase("dtype");
    }
    std::ofstream(copy / "config.json") << cfg.dump(2);
    const std::vector<Token> prompt = read_fixture(folder).meta["prompt_ids"].get<std::vector<Token>>();
    std::vector<float> v5, v4;
    {
      Model model = Model::load(folder.string(), Device::open("cpu"), {.dtype = DType::f32});
      Session(model).prefill(0, prompt, &v5);
    }
    {
      Model model = Model::load(copy.string(), Device::open("cpu"), {.dtype = DType::f32});
      Session(model).prefill(0, prompt, &v4);
    }
    EXPECT_EQ(v4, v5) << folder.filename();
    fs::remove_all(copy);
    ++compared;
  }
  EXPECT_GE(compared, 6) << "every Llama-family fixture is written by transformers 5 with rope_parameters";
}

}  // namespace
}  // namespace ding::testing
