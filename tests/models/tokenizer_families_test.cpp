// Tokenizers as the Llama-2/3, Mistral and Qwen2 families ship them, against transformers:
// each folder of tests/data/tokenizers (written by tools/fixtures/make_tokenizer_fixtures.py)
// holds a small trained tokenizer.json in the family's layout and expected.json with, per text,
// PreTrainedTokenizerFast's ids with and without the template's special tokens and its decodes.
#include <ding/models/tokenizer.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"

namespace ding {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;

const fs::path kFixtures = fs::path(DING_TEST_DATA) / "tokenizers";

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::string shown(const std::string& text) { return json(text.substr(0, 120)).dump(); }

bool is_valid_utf8(const Tokenizer& t, const std::string& s) {
  try {
    t.encode(s, {.strict_utf8 = true});
    return true;
  } catch (const Error&) {
    return false;
  }
}

class TokenizerFamily : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    folder_ = kFixtures / GetParam();
    if (!fs::exists(folder_ / "expected.json"))
      GTEST_SKIP() << folder_ << " is missing: run tools/fixtures/make_tokenizer_fixtures.py on a machine with transformers";
    expected_ = read_json(folder_ / "expected.json");
    try {
      tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_folder(folder_.string()));
    } catch (const Error& e) {
      // A build without ICU (a machine without libicu-dev) refuses Unicode normalizers by name.
      if (std::string(e.what()).find("needs ding built with ICU") != std::string::npos) GTEST_SKIP() << e.what();
      throw;
    }
  }

  // expected.json's texts, each with transformers' ids and decodes.
  const json& cases() const { return expected_.at("cases"); }

  fs::path folder_;
  json expected_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(TokenizerFamily, EncodeMatchesTransformers) {
  const Tokenizer& t = *tokenizer_;
  size_t mismatches = 0;
  for (size_t i = 0; i < cases().size(); ++i) {
    const json& c = cases()[i];
    const std::string text = c.at("text").get<std::string>();
    const auto ids = t.encode(text);
    const auto plain = t.encode(text, {.add_special_tokens = false});
    if (ids != c.at("ids").get<std::vector<Token>>() && ++mismatches <= 8)
      ADD_FAILURE() << "case " << i << " " << shown(text) << "\n  ding:         " << json(ids).dump().substr(0, 400)
                    << "\n  transformers: " << c.at("ids").dump().substr(0, 400) << "\n  tokens:       "
                    << c.at("tokens").dump().substr(0, 400);
    if (plain != c.at("ids_no_special").get<std::vector<Token>>() && ++mismatches <= 8)
      ADD_FAILURE() << "case " << i << " " << shown(text) << " add_special_tokens=false\n  ding:         "
                    << json(plain).dump().substr(0, 400) << "\n  transformers: " << c.at("ids_no_special").dump().substr(0, 400);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases().size() << " texts, " << GetParam() << " (versions "
                            << expected_.at("versions").dump() << ")";
}

TEST_P(TokenizerFamily, DecodeMatchesTransformers) {
  const Tokenizer& t = *tokenizer_;
  size_t mismatches = 0;
  for (size_t i = 0; i < cases().size(); ++i) {
    const json& c = cases()[i];
    const auto ids = c.at("ids").get<std::vector<Token>>();
    const std::string decoded = t.decode(ids), skipped = t.decode(ids, {.skip_special = true});
    if (decoded != c.at("decode").get<std::string>() && ++mismatches <= 8)
      ADD_FAILURE() << "case " << i << "\n  ding:         " << shown(decoded) << "\n  transformers: " << shown(c.at("decode"));
    if (skipped != c.at("decode_skip_special").get<std::string>() && ++mismatches <= 8)
      ADD_FAILURE() << "case " << i << " skip_special\n  ding:         " << shown(skipped)
                    << "\n  transformers: " << shown(c.at("decode_skip_special"));
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases().size() << " texts, " << GetParam();
}

// Streaming gives the same text as decoding at once, in whole characters, whether the file's
// decoder strips a leading space (SentencePiece) or a token ends inside a character.
TEST_P(TokenizerFamily, TextStreamMatchesDecode) {
  const Tokenizer& t = *tokenizer_;
  for (const json& c : cases()) {
    const auto ids = c.at("ids").get<std::vector<Token>>();
    for (const DecodeOptions options : {DecodeOptions{}, DecodeOptions{.skip_special = true}}) {
      TextStream stream(t, options);
      std::string joined;
      for (Token id : ids) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(is_valid_utf8(t, piece)) << shown(c.at("text"));
        joined += piece;
      }
      joined += stream.flush();
      EXPECT_EQ(joined, t.decode(ids, options)) << shown(c.at("text"));
    }
  }
}

// Ids with no token (past the vocabulary: a padded embedding row a model may sample) decode to
// nothing, and must not take the context a SentencePiece decoder's leading-space strip needs:
// streaming "her", a padding id, "▁pl" once lost the space decode keeps (found by fuzzing).
TEST_P(TokenizerFamily, TextStreamMatchesDecodeAcrossIdsWithoutAToken) {
  const Tokenizer& t = *tokenizer_;
  const Token padding = t.vocab_size() + 3;
  ASSERT_FALSE(t.has_token(padding));
  for (const json& c : cases()) {
    std::vector<Token> ids;
    for (Token id : c.at("ids").get<std::vector<Token>>()) {
      ASSERT_TRUE(t.has_token(id));
      ids.insert(ids.end(), {id, padding});
    }
    for (const DecodeOptions options : {DecodeOptions{}, DecodeOptions{.skip_special = true}}) {
      TextStream stream(t, options);
      std::string joined;
      for (Token id : ids) joined += stream.push(id);
      joined += stream.flush();
      EXPECT_EQ(joined, t.decode(ids, options)) << shown(c.at("text"));
    }
  }
}

// bos and eos as tokenizer_config.json names them, and the template's tokens where it has them.
TEST_P(TokenizerFamily, BosAndEosFromTheConfig) {
  const Tokenizer& t = *tokenizer_;
  const json config = read_json(folder_ / "tokenizer_config.json");
  for (const char* key : {"bos_token", "eos_token"}) {
    const std::optional<Token> got = std::string(key) == "bos_token" ? t.bos() : t.eos();
    if (!config.contains(key) || config[key].is_null()) {
      EXPECT_FALSE(got.has_value()) << key;
      continue;
    }
    ASSERT_TRUE(got.has_value()) << key;
    EXPECT_EQ(got, t.token_id(config[key].get<std::string>())) << key;
    EXPECT_TRUE(t.is_special(*got)) << key;
  }
  // The template's tokens are what separates ids from ids_no_special.
  const json& empty = cases()[0];
  ASSERT_EQ(empty.at("text"), "");
  const auto added = empty.at("ids").get<std::vector<Token>>();
  if (t.bos()) EXPECT_EQ(added, std::vector<Token>{*t.bos()});
  else EXPECT_TRUE(added.empty());
  // Loading the file alone finds the same BOS through the template.
  const Tokenizer alone = Tokenizer::from_tokenizer_json((folder_ / "tokenizer.json").string());
  EXPECT_EQ(alone.bos(), t.bos());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFamily,
                         ::testing::Values("llama3-bpe", "qwen2-bpe", "llama2-spm", "mistral-spm", "spm-unk"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

double seconds_to_encode(const Tokenizer& t, const std::string& text) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = t.encode(text);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    EXPECT_FALSE(ids.empty());
  }
  return best;
}

// Text without added tokens is one segment; a SentencePiece-style file without a pre-tokenizer
// makes it one piece, and a run of one letter is one word in every layout. 16× the input may
// cost at most 128× the time (quadratic is 256× or more): the merge heap is n log n and leaves
// the caches as it grows, and a loaded machine adds noise, so the bound stays far from both.
TEST_P(TokenizerFamily, LongTextsScaleLinearly) {
  std::ifstream in(fs::path(DING_TEST_DATA) / "text" / "brown_sample.txt", std::ios::binary);
  std::stringstream sample;
  sample << in.rdbuf();
  for (const std::string& unit : {sample.str(), std::string(4096, 'a')}) {
    std::string small, large;
    while (small.size() < (64u << 10)) small += unit;
    while (large.size() < (1u << 20)) large += unit;
    const double t_small = seconds_to_encode(*tokenizer_, small), t_large = seconds_to_encode(*tokenizer_, large);
    EXPECT_LT(t_large, 128 * t_small + 0.05) << GetParam() << ": 16x longer text took " << t_large / t_small << "x the time";
  }
}

// decode(encode(s)) == s for any bytes, ill-formed UTF-8 included, where the file's pipeline
// loses nothing: byte-level BPE without a normalizer, and Llama-2's byte_fallback layout (whose
// decoder strips the ▁ its normalizer prepends). Special tokens are encoded as text here.
TEST(TokenizerFamily, RandomBytesRoundTrip) {
  const char* fixed = std::getenv("DING_TEST_SEED");
  const uint64_t seed = fixed ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with DING_TEST_SEED=" + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  const std::vector<std::string> fragments = {"a", " ", "  ", "\n", "\t", "é", "€", "😀", "\xE2\x82", "\x80", "\xFF",
                                              "\xED\xA0\x80", "'s", "<s>", "<|eot_id|>", "12345", "日本", "e\u0301"};
  for (const char* name : {"llama3-bpe", "llama2-spm"}) {
    if (!fs::exists(kFixtures / name / "tokenizer.json")) GTEST_SKIP() << name << " is missing";
    const Tokenizer t = Tokenizer::from_folder((kFixtures / name).string());
    for (int round = 0; round < 300; ++round) {
      std::string s;
      for (int i = int(rng() % 40); i > 0; --i) s += rng() % 3 == 0 ? std::string(1, char(rng() % 256)) : fragments[rng() % fragments.size()];
      if (s.find("\xE2\x96\x81") != std::string::npos) continue;  // a literal ▁ decodes as a space in SentencePiece files
      const auto ids = t.encode(s, {.add_special_tokens = false, .allow_special = false});
      ASSERT_EQ(t.decode(ids), s) << name << " round " << round << " " << json(ids).dump();
    }
  }
}

// Models ding does not implement are refused by name, from files the tokenizers library wrote.
TEST(TokenizerFamily, UnsupportedModelsAreNamed) {
  const fs::path dir = kFixtures / "unsupported";
  if (!fs::exists(dir / "unigram.json")) GTEST_SKIP() << dir << " is missing: run tools/fixtures/make_tokenizer_fixtures.py";
  expect_error([&] { Tokenizer::from_tokenizer_json((dir / "unigram.json").string()); }, ErrorCode::not_implemented,
               {"unigram.json", "model.type", "\"Unigram\"", "not supported"});
  expect_error([&] { Tokenizer::from_tokenizer_json((dir / "wordpiece.json").string()); }, ErrorCode::not_implemented,
               {"wordpiece.json", "model.type", "\"WordPiece\"", "not supported"});
}

}  // namespace
}  // namespace ding
