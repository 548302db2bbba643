// Session, Sampler and generate on a fixture model: incremental decode agrees with prefill,
// batched decode agrees with single sequences, and every stop condition and bad input behaves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ding/ding.h"
#include "ding/models/generate.h"
#include "expect_error.h"
#include "op_cases.h"
#include "tiny_fixture.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;
std::vector<Token> cycle(int64_t n) {  // n tokens of a fixed, non-constant pattern
  std::vector<Token> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(Token(7 + (i * 37) % 500));
  return ids;
}

struct GenerateTest : ::testing::Test {
  Model model = Model::load(kTinyFixture.string(), Device::open("cpu"));
};

TEST_F(GenerateTest, DecodeStepByStepMatchesPrefill) {
  const auto prompt = tiny_prompt_ids(12);
  Session whole(model);
  std::vector<float> expected;
  whole.prefill(0, prompt, &expected);
  Session stepwise(model);
  std::vector<float> actual;
  Tensor logits = stepwise.prefill(0, std::span(prompt).first(1), &actual);
  const int64_t V = model.config().vocab_size;
  for (size_t i = 1; i < prompt.size(); ++i) {
    const Token t[1] = {prompt[i]};
    logits = stepwise.decode(t);
    const float* row = static_cast<const float*>(logits.data);
    actual.insert(actual.end(), row, row + V);
  }
  EXPECT_LE(nmse(std::vector<double>(actual.begin(), actual.end()), std::vector<double>(expected.begin(), expected.end())),
            1e-10);
}

TEST_F(GenerateTest, ChunkedPrefillMatchesOneChunk) {
  const auto prompt = tiny_prompt_ids(20);
  Session one(model), chunked(model, {.prefill_chunk = 7});
  std::vector<float> a, b;
  one.prefill(0, prompt, &a);
  chunked.prefill(0, prompt, &b);
  EXPECT_LE(nmse(std::vector<double>(b.begin(), b.end()), std::vector<double>(a.begin(), a.end())), 1e-10);
}

TEST_F(GenerateTest, BatchedDecodeMatchesSeparateSequences) {
  const auto a = cycle(9), b = tiny_prompt_ids(4);
  const Token next[2] = {11, 23};
  Session batch(model, {.max_batch = 2});
  batch.prefill(0, a);
  batch.prefill(1, b);
  const Tensor both = batch.decode(next);
  const int64_t V = model.config().vocab_size;
  std::vector<float> rows(static_cast<const float*>(both.data), static_cast<const float*>(both.data) + 2 * V);
  for (int s = 0; s < 2; ++s) {
    Session single(model);
    single.prefill(0, s == 0 ? a : b);
    const Token t[1] = {next[s]};
    const Tensor one = single.decode(t);
    const float* r = static_cast<const float*>(one.data);
    EXPECT_LE(nmse(std::vector<double>(rows.begin() + s * V, rows.begin() + (s + 1) * V), std::vector<double>(r, r + V)), 1e-10)
        << "sequence " << s;
  }
}

TEST_F(GenerateTest, PromptLongerThanTheContextIsRefused) {
  Session session(model);
  Sampler greedy({.temperature = 0});
  expect_error([&] { generate(session, greedy, cycle(65), {}); }, ErrorCode::invalid_argument,
               {"prompt has 65 tokens", "context holds 64"});
  expect_error([&] { generate(session, greedy, {}, {}); }, ErrorCode::invalid_argument, {"prompt is empty"});
}

TEST_F(GenerateTest, MaxNewTokensIsClampedToTheContextLeft) {
  Session session(model);
  Sampler greedy({.temperature = 0});
  const GenerateResult r = generate(session, greedy, cycle(60), {.max_new_tokens = 20, .stop_at_eos = false});
  EXPECT_TRUE(r.clamped);
  EXPECT_EQ(r.max_new_tokens, 5);  // 64 positions − 60 prompt + the last token, never fed back
  EXPECT_EQ(r.tokens.size(), 5u);
  EXPECT_EQ(r.reason, StopReason::context_full);
}

TEST_F(GenerateTest, StopsAtAStopString) {
  Session session(model);
  Sampler greedy({.temperature = 0});
  const GenerateResult free_run = generate(session, greedy, tiny_prompt_ids(5), {.max_new_tokens = 8, .stop_at_eos = false});
  ASSERT_EQ(free_run.tokens.size(), 8u);
  const std::string stop = model.tokenizer().decode(std::span(free_run.tokens).subspan(2, 2));
  const GenerateResult r = generate(session, greedy, tiny_prompt_ids(5), {.max_new_tokens = 8, .stop_at_eos = false, .stop_strings = {stop}});
  EXPECT_EQ(r.reason, StopReason::stop_string);
  EXPECT_LE(r.tokens.size(), 4u);
  EXPECT_NE(model.tokenizer().decode(r.tokens).find(stop), std::string::npos);
}

TEST_F(GenerateTest, StopsAtEndOfText) {
  // Make the model's first greedy token its end-of-text token by editing a copy's config.
  Session session(model);
  Sampler greedy({.temperature = 0});
  const Token first = generate(session, greedy, tiny_prompt_ids(5), {.max_new_tokens = 1}).tokens.at(0);
  const fs::path dir = fs::temp_directory_path() / "ding_eos_model";
  fs::remove_all(dir);
  fs::copy(kTinyFixture, dir);
  std::ifstream in(dir / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["eos_token_id"] = first;
  std::ofstream(dir / "config.json") << cfg.dump();
  Model eos_model = Model::load(dir.string(), Device::open("cpu"));
  Session eos_session(eos_model);
  const GenerateResult r = generate(eos_session, greedy, tiny_prompt_ids(5), {.max_new_tokens = 10});
  EXPECT_EQ(r.reason, StopReason::eos);
  EXPECT_EQ(r.tokens, std::vector<Token>{first});
  fs::remove_all(dir);
}

TEST_F(GenerateTest, SeedsReproduce) {
  Session session(model);
  auto run = [&](uint64_t seed) {
    Sampler s({.temperature = 1.0f, .top_p = 0.95f, .seed = seed});
    return generate(session, s, tiny_prompt_ids(3), {.max_new_tokens = 12, .stop_at_eos = false}).tokens;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));  // 12 tokens from a flat random model: equal only by a 1-in-huge chance
}

TEST_F(GenerateTest, RepetitionPenaltyAvoidsRepeats) {
  Session session(model);
  Sampler plain({.temperature = 0}), penalised({.temperature = 0, .repetition_penalty = 100.0f});
  const auto prompt = tiny_prompt_ids(6);
  const auto p = generate(session, penalised, prompt, {.max_new_tokens = 10, .stop_at_eos = false}).tokens;
  // With a huge penalty no token of the context is chosen again while fresh tokens have positive logits.
  std::vector<Token> seen(prompt.begin(), prompt.end());
  int repeats = 0;
  for (Token t : p) {
    repeats += std::find(seen.begin(), seen.end(), t) != seen.end();
    seen.push_back(t);
  }
  const auto q = generate(session, plain, prompt, {.max_new_tokens = 10, .stop_at_eos = false}).tokens;
  EXPECT_NE(p, q);
  EXPECT_LE(repeats, 2);
}

TEST_F(GenerateTest, BadSessionUse) {
  Session session(model, {.max_batch = 2});
  const Token bad[1] = {512};
  expect_error([&] { session.decode(bad); }, ErrorCode::invalid_argument, {"token 512", "vocabulary of 512"});
  expect_error([&] { session.prefill(2, cycle(3)); }, ErrorCode::invalid_argument, {"sequence 2", "batch of 2"});
  expect_error([&] { session.prefill(0, cycle(65)); }, ErrorCode::invalid_argument, {"65 tokens do not fit", "64 positions"});
  expect_error([&] { Session(model, {.max_tokens = 65}); }, ErrorCode::invalid_argument, {"max_tokens 65", "64 positions"});
  expect_error([&] { Session(model, {.prefill_chunk = -1}); }, ErrorCode::invalid_argument, {"prefill_chunk (-1"});
  expect_error([&] { Session(model, {.max_batch = 0}); }, ErrorCode::invalid_argument, {"max_batch (0)"});
  const Token three[3] = {1, 2, 3};
  expect_error([&] { session.decode(three); }, ErrorCode::invalid_argument, {"3 tokens for a batch of 2"});
}

TEST(Sampler, RejectsOutOfRangeOptions) {
  expect_error([] { Sampler({.temperature = -1}); }, ErrorCode::invalid_argument, {"temperature", "-1"});
  expect_error([] { Sampler({.top_k = -2}); }, ErrorCode::invalid_argument, {"top_k", "-2"});
  expect_error([] { Sampler({.top_p = 0}); }, ErrorCode::invalid_argument, {"top_p", "0"});
  expect_error([] { Sampler({.min_p = 1}); }, ErrorCode::invalid_argument, {"min_p", "1"});
  expect_error([] { Sampler({.repetition_penalty = 0}); }, ErrorCode::invalid_argument, {"repetition_penalty"});
}

}  // namespace
}  // namespace ding::testing
