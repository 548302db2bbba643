// Tokenizer tests: ids against Hugging Face (when tools/fixtures/tokenizer_parity.py has been
// run), facts read straight from GPT-2's vocab.json, exact round trips for any bytes, strict
// UTF-8, streaming, and bad files.
#include <ding/models/tokenizer.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.h"

namespace ding {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;

const std::string kData = DING_TEST_DATA;
const std::string kVocab = kData + "/gpt2/vocab.json";
const std::string kMerges = kData + "/gpt2/merges.txt";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Loaded once: parsing 50k merges takes a moment.
const Tokenizer& gpt2() {
  static const Tokenizer tokenizer = Tokenizer::from_vocab_merges(kVocab, kMerges);
  return tokenizer;
}

const json& gpt2_vocab() {
  static const json vocab = json::parse(read_file(kVocab));
  return vocab;
}

Token vocab_id(const std::string& spelling) { return gpt2_vocab().at(spelling).get<Token>(); }

// A fresh folder per test under gtest's temp dir.
fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("ding_tokenizer_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Text a tokenizer must survive; tools/fixtures/tokenizer_parity.py has the same kinds.
std::vector<std::string> adversarial_strings() {
  std::vector<std::string> s = {
      "",
      "Hello world",
      "👩‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag",
      "e\u0301 n\u0303 a\u0308\u0308\u0308 Z\u0351\u0352\u0353",
      "日本語のテキスト、中文文本。한국어",
      "مرحبا بالعالم שלום עולם",
      "हिन्दी नमस्ते",
      "line one\r\nline two\r\n",
      "tab\there\t\tand\t",
      "     five spaces, then\n\n\n\nnewlines   \n  ",
      "digits 1234567890 3.14159 1,000,000",
      "'s 're 've 'm 'll 'd 't 'S 'RE I'M DON'T don't",
      "text<|endoftext|>more text <|endoftext|><|endoftext|>",
      "\u0085 NEL, \u00a0 NBSP, \u2028 LS, \u3000 ideographic space, \u200b ZWSP",
  };
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls += char(c), controls += "x";
  s.push_back(controls);
  s.push_back(std::string(10000, 'a'));
  s.push_back(std::string(3000, '9'));
  return s;
}

bool is_valid_utf8(const std::string& s) {
  try {
    gpt2().encode(s, {.allow_special = false, .strict_utf8 = true});
    return true;
  } catch (const Error&) {
    return false;
  }
}

// ---- parity with Hugging Face ----

TEST(Tokenizer, ParityWithHuggingFaceFixture) {
  const std::string path = kData + "/gpt2/tokenizer_parity.json";
  if (!fs::exists(path)) GTEST_SKIP() << "run tools/fixtures/tokenizer_parity.py on a machine with transformers";
  const json cases = json::parse(read_file(path));
  ASSERT_TRUE(cases.is_array());
  size_t mismatches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i].at("text").get<std::string>();
    const auto expected = cases[i].at("ids").get<std::vector<Token>>();
    const auto ids = gpt2().encode(text);
    if (ids != expected && ++mismatches <= 10)
      ADD_FAILURE() << "case " << i << " " << json(text.substr(0, 200)).dump() << ": ding gives " << json(ids).dump().substr(0, 300)
                    << ", HF gives " << json(expected).dump().substr(0, 300);
    EXPECT_EQ(gpt2().decode(ids), text) << "case " << i;
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " cases";
}

// ---- facts from vocab.json ----

TEST(Tokenizer, KnownIdsFromVocab) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.encode("Hello"), std::vector<Token>{vocab_id("Hello")});
  EXPECT_EQ(t.encode(" world"), std::vector<Token>{vocab_id("Ġworld")});
  EXPECT_EQ(t.encode("Hello world"), (std::vector<Token>{15496, 995}));  // the classic GPT-2 example
  EXPECT_EQ(t.encode("<|endoftext|>"), std::vector<Token>{50256});
  EXPECT_EQ(t.eos(), 50256);
  EXPECT_EQ(t.token_id("Ġworld"), vocab_id("Ġworld"));
  EXPECT_EQ(t.token_id("<|endoftext|>"), 50256);
  EXPECT_FALSE(t.token_id("no such token").has_value());
  EXPECT_EQ(t.decode(vocab_id("Ġworld")), " world");
  EXPECT_EQ(t.decode(vocab_id("Ċ")), "\n");
}

TEST(Tokenizer, SpecialTokensSplitTheTextOnlyWhenAllowed) {
  const Tokenizer& t = gpt2();
  const auto ids = t.encode("a<|endoftext|>b");
  EXPECT_EQ(ids, (std::vector<Token>{vocab_id("a"), 50256, vocab_id("b")}));
  const auto as_text = t.encode("a<|endoftext|>b", {.allow_special = false});
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 50256), 0);
  EXPECT_EQ(t.decode(as_text), "a<|endoftext|>b");
}

TEST(Tokenizer, PreTokenizerPiecesFollowTheGpt2Regex) {
  const Tokenizer& t = gpt2();
  const auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (Token id : t.encode(text)) out.push_back(t.decode(id));
    return out;
  };
  // Contractions are case-sensitive in GPT-2's regex: 'S is punctuation then a letter.
  EXPECT_EQ(pieces("I'm don't"), (std::vector<std::string>{"I", "'m", " don", "'t"}));
  EXPECT_EQ(pieces("IT'S"), (std::vector<std::string>{"IT", "'", "S"}));
  // \s+(?!\S) leaves the last whitespace character of a run to the next piece; GPT-2 has no
  // "ĠĠ" token, so the two leading spaces stay apart, while "ĊĊ" (628) exists but only forms
  // where the newlines are not split, at the end of the text.
  EXPECT_EQ(pieces("a   b"), (std::vector<std::string>{"a", " ", " ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (std::vector<std::string>{"a", "\n", "\n", "b"}));
  EXPECT_EQ(gpt2().encode("a\n\n"), (std::vector<Token>{vocab_id("a"), 628}));
}

TEST(Tokenizer, WordNeedingSeveralMergesDecodesToItself) {
  const Tokenizer& t = gpt2();
  for (const std::string word : {" antidisestablishmentarianism", "Pneumonoultramicroscopic", " tokenization"}) {
    const auto ids = t.encode(word);
    EXPECT_GT(ids.size(), 1u) << word;
    EXPECT_LT(ids.size(), word.size()) << word << ": merges should have combined bytes";
    std::string joined;
    for (Token id : ids) {
      ASSERT_TRUE(id >= 0 && id < t.vocab_size());
      joined += t.decode(id);
    }
    EXPECT_EQ(joined, word);
  }
}

TEST(Tokenizer, PrefixSpaceFromTokenizerJson) {
  const fs::path dir = scratch_dir("prefix_space");
  json file = {{"model", {{"type", "BPE"}, {"vocab", gpt2_vocab()}, {"merges", json::array()}}},
               {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", true}}}};
  std::ifstream merges(kMerges);
  std::string line;
  while (std::getline(merges, line))
    if (!line.starts_with("#version") && !line.empty()) file["model"]["merges"].push_back(line);
  write_file(dir / "tokenizer.json", file.dump());
  const Tokenizer t = Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string());
  EXPECT_EQ(t.encode("Hello"), std::vector<Token>{vocab_id("ĠHello")});
}

// ---- round trips ----

TEST(Tokenizer, RoundTripAdversarialStrings) {
  for (const std::string& s : adversarial_strings()) {
    EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s) << json(s.substr(0, 80)).dump();
    EXPECT_EQ(gpt2().decode(gpt2().encode(s, {.allow_special = false})), s);
  }
}

TEST(Tokenizer, RoundTripRandomBytesIncludingInvalidUtf8) {
  std::mt19937 rng(1234);
  // Mix raw bytes with pieces of UTF-8 so that both valid runs and broken sequences occur.
  const std::vector<std::string> fragments = {"a", " ", "\n", "é", "€", "😀", "\xE2\x82", "\x80", "\xFF", "\xED\xA0\x80",
                                              "\xC0\x80", "\xF4\x90\x80\x80", "'s", "<|endoftext|>", "1"};
  for (int round = 0; round < 500; ++round) {
    std::string s;
    const int parts = int(rng() % 60);
    for (int i = 0; i < parts; ++i) {
      if (rng() % 2) s += char(rng() % 256);
      else s += fragments[rng() % fragments.size()];
    }
    const auto ids = gpt2().encode(s);
    for (Token id : ids) ASSERT_TRUE(id >= 0 && id < gpt2().vocab_size());
    ASSERT_EQ(gpt2().decode(ids), s) << "round " << round;
  }
}

TEST(Tokenizer, InvalidBytesEncodeAsByteTokens) {
  const auto ids = gpt2().encode("a\xFF" "b");
  EXPECT_EQ(ids, (std::vector<Token>{vocab_id("a"), vocab_id("ÿ"), vocab_id("b")}));  // 0xFF is spelled ÿ
}

// ---- strict UTF-8 ----

struct BadUtf8 {
  const char* name;
  std::string text;
  size_t offset;
  const char* problem;
};

TEST(Tokenizer, StrictUtf8NamesTheOffset) {
  const std::vector<BadUtf8> cases = {
      {"overlong_2byte", "abc\xC0\x80", 3, "overlong"},
      {"overlong_3byte", "ab\xE0\x80\x80", 2, "overlong"},
      {"overlong_4byte", "\xF0\x80\x80\x80", 0, "overlong"},
      {"truncated_at_end", "ab\xE2\x82", 2, "truncated"},
      {"truncated_midway", "\xE2\x82x", 0, "truncated"},
      {"lone_continuation", "ok \x80", 3, "continuation"},
      {"surrogate", "x\xED\xA0\x80", 1, "surrogate"},
      {"beyond_10FFFF", "\xF4\x90\x80\x80", 0, "beyond U+10FFFF"},
      {"lead_F5", "12345\xF5\x80\x80\x80", 5, "beyond U+10FFFF"},
      {"byte_FF", "\xFF", 0, "never used"},
  };
  for (const BadUtf8& c : cases) {
    SCOPED_TRACE(c.name);
    expect_error([&] { gpt2().encode(c.text, {.strict_utf8 = true}); }, ErrorCode::invalid_argument,
                 {"offset " + std::to_string(c.offset), c.problem});
  }
  // The largest code point and the ends of every range are fine.
  EXPECT_NO_THROW(gpt2().encode("\xF4\x8F\xBF\xBF \xED\x9F\xBF \xEE\x80\x80 \xC2\x80 \xEF\xBF\xBF", {.strict_utf8 = true}));
}

// ---- streaming ----

TEST(Tokenizer, TextStreamEmitsOnlyWholeCharacters) {
  for (const std::string& s : adversarial_strings()) {
    TextStream stream(gpt2());
    std::string joined;
    for (Token id : gpt2().encode(s)) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(is_valid_utf8(piece)) << json(s.substr(0, 80)).dump();
      joined += piece;
    }
    joined += stream.flush();
    EXPECT_EQ(joined, s);
  }
  // "€" is E2 82 AC; fed one byte token at a time it appears only with the last one.
  TextStream stream(gpt2());
  EXPECT_EQ(stream.push(vocab_id("â")), "");
  EXPECT_EQ(stream.push(gpt2().encode("\x82")[0]), "");
  EXPECT_EQ(stream.push(gpt2().encode("\xAC")[0]), "€");
  // A byte that can never start a character is not held back.
  EXPECT_EQ(stream.push(vocab_id("ÿ")), "\xFF");
  EXPECT_EQ(stream.push(vocab_id("â")), "");
  EXPECT_EQ(stream.flush(), "\xE2");
}

// ---- speed and pathological input ----

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A run of one repeated character is a single pre-token that BPE merges step by step; a
// quadratic merge loop would make 1 MB of 'a' take minutes. Checked as scaling, not as a
// wall-clock bound, so a loaded machine does not fail it: 16× the input may cost at most 128×
// the time, where quadratic is 256× or more. The margin is wide because the merge heap is
// n log n and leaves the caches as it grows (40–49× for 16× measured on a 2-core machine), and
// a shared CI machine adds noise on top.
TEST(Tokenizer, LongRunsScaleLinearly) {
  auto best_encode_seconds = [](const std::string& s) {
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const auto ids = gpt2().encode(s);
      best = std::min(best, seconds_since(start));
      EXPECT_EQ(gpt2().decode(ids), s);
    }
    return best;
  };
  for (char c : {'a', ' ', '\n'}) {
    const double small = best_encode_seconds(std::string(64 << 10, c));
    const double large = best_encode_seconds(std::string(1 << 20, c));
    EXPECT_LT(large, 128 * small + 0.05) << "16x longer run of " << json(std::string(1, c)).dump() << " took "
                                        << large / small << "x the time";
  }
}

TEST(Tokenizer, EncodeThroughputOnBrownText) {
  const std::string sample = read_file(kData + "/text/brown_sample.txt");
  ASSERT_GT(sample.size(), 100000u);
  std::string text;
  while (text.size() < (4u << 20)) text += sample;
  // A fresh tokenizer, so the word cache starts cold as it would in a new process.
  const Tokenizer t = Tokenizer::from_vocab_merges(kVocab, kMerges);
  const auto start = std::chrono::steady_clock::now();
  const auto ids = t.encode(text);
  const double seconds = seconds_since(start);
  const double mb_per_s = double(text.size()) / 1e6 / seconds;
  std::cout << "[ encode   ] " << text.size() << " bytes → " << ids.size() << " tokens in " << seconds * 1e3 << " ms: "
            << mb_per_s << " MB/s\n";
  RecordProperty("encode_mb_per_s", std::to_string(mb_per_s));
  EXPECT_EQ(t.decode(ids), text);
}

TEST(Tokenizer, ConcurrentEncodesShareTheWordCache) {
  const std::string sample = read_file(kData + "/text/brown_sample.txt");
  const Tokenizer t = Tokenizer::from_vocab_merges(kVocab, kMerges);
  const auto expected = gpt2().encode(sample);
  std::vector<std::vector<Token>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = t.encode(sample); });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// ---- the two file formats agree ----

json tokenizer_json_from_gpt2(bool merges_as_pairs, bool explicit_split) {
  json merges = json::array();
  std::ifstream in(kMerges);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("#version") || line.empty()) continue;
    if (!merges_as_pairs) merges.push_back(line);
    else merges.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", !explicit_split}};
  const json gpt2_split = {
      {"type", "Split"},
      {"pattern", {{"Regex", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
      {"behavior", "Isolated"},
      {"invert", false}};
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", explicit_split ? json{{"type", "Sequence"}, {"pretokenizers", {gpt2_split, byte_level}}} : byte_level},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", gpt2_vocab()}, {"merges", merges}}}};
}

TEST(Tokenizer, TokenizerJsonMatchesVocabMergesOnBrownText) {
  const std::string sample = read_file(kData + "/text/brown_sample.txt");
  const auto expected = gpt2().encode(sample);
  struct Variant {
    const char* name;
    bool pairs, split;
  };
  for (const Variant v : {Variant{"string_merges", false, false}, Variant{"pair_merges", true, false},
                          Variant{"explicit_split", true, true}}) {
    SCOPED_TRACE(v.name);
    const fs::path dir = scratch_dir(std::string("format_") + v.name);
    write_file(dir / "tokenizer.json", tokenizer_json_from_gpt2(v.pairs, v.split).dump());
    const Tokenizer t = Tokenizer::from_folder(dir.string());
    EXPECT_EQ(t.encode(sample), expected);
    EXPECT_EQ(t.encode("x<|endoftext|>"), (std::vector<Token>{vocab_id("x"), 50256}));
    EXPECT_EQ(t.eos(), 50256);
  }
  // Without tokenizer.json the folder falls back to vocab.json + merges.txt.
  EXPECT_EQ(Tokenizer::from_folder(kData + "/gpt2").encode(sample), expected);
}

// ---- bad input ----

TEST(Tokenizer, BadFilesRaiseErrorsNamingThem) {
  const fs::path dir = scratch_dir("bad_files");
  expect_error([&] { Tokenizer::from_folder(dir.string()); }, ErrorCode::io, {dir.string(), "vocab.json"});
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "nope.json").string(), kMerges); }, ErrorCode::io, {"nope.json"});
  expect_error([&] { Tokenizer::from_vocab_merges(kVocab, (dir / "nope.txt").string()); }, ErrorCode::io, {"nope.txt"});

  write_file(dir / "broken.json", "{\"a\": 1,");
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "broken.json").string(), kMerges); }, ErrorCode::parse,
               {"broken.json", "not valid JSON"});
  write_file(dir / "array.json", "[1, 2]");
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "array.json").string(), kMerges); }, ErrorCode::parse,
               {"array.json", "not a JSON object", "array"});
  write_file(dir / "bad_id.json", R"({"a": -3})");
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "bad_id.json").string(), kMerges); }, ErrorCode::parse,
               {"bad_id.json", "\"a\"", "-3"});
  write_file(dir / "few_bytes.json", R"({"a": 0, "b": 1})");
  expect_error([&] { Tokenizer::from_vocab_merges((dir / "few_bytes.json").string(), kMerges); }, ErrorCode::parse,
               {"few_bytes.json", "byte 0x00"});

  write_file(dir / "unknown.txt", "#version: 0.2\nĠ t\nzqxjv t\n");
  expect_error([&] { Tokenizer::from_vocab_merges(kVocab, (dir / "unknown.txt").string()); }, ErrorCode::parse,
               {"unknown.txt:3", "left token \"zqxjv\""});
  write_file(dir / "unmerged.txt", "Ġ t\nfoo bar\n");  // both known, "foobar" is not
  expect_error([&] { Tokenizer::from_vocab_merges(kVocab, (dir / "unmerged.txt").string()); }, ErrorCode::parse,
               {"unmerged.txt:2", "merged token \"foobar\""});
  write_file(dir / "three.txt", "Ġ t\nĠ a b\n");
  expect_error([&] { Tokenizer::from_vocab_merges(kVocab, (dir / "three.txt").string()); }, ErrorCode::parse,
               {"three.txt:2", "Ġ a b"});
}

TEST(Tokenizer, UnsupportedTokenizerJsonIsNamed) {
  const fs::path dir = scratch_dir("unsupported");
  const auto expect_rejected = [&](const json& file, ErrorCode code, std::initializer_list<std::string> parts) {
    write_file(dir / "tokenizer.json", file.dump());
    expect_error([&] { Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string()); }, code, parts);
  };
  json file = tokenizer_json_from_gpt2(false, false);
  json wordpiece = file;
  wordpiece["model"]["type"] = "WordPiece";
  expect_rejected(wordpiece, ErrorCode::not_implemented, {"tokenizer.json", "model.type", "WordPiece"});
  json whitespace = file;
  whitespace["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_rejected(whitespace, ErrorCode::not_implemented, {"pre_tokenizer.type", "Whitespace"});
  json nested = file;
  nested["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Punctuation"}}, file["pre_tokenizer"]}}};
  expect_rejected(nested, ErrorCode::not_implemented, {"pre_tokenizer.pretokenizers[0].type", "Punctuation"});
  json normalizer = file;
  normalizer["normalizer"] = {{"type", "Lowercase"}};
  expect_rejected(normalizer, ErrorCode::not_implemented, {"normalizer.type", "Lowercase"});
  json bad_regex = tokenizer_json_from_gpt2(false, true);
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_rejected(bad_regex, ErrorCode::parse, {"pre_tokenizer.pretokenizers[0].pattern", "(unclosed"});
  json bad_merge = file;
  bad_merge["model"]["merges"][5] = 42;
  expect_rejected(bad_merge, ErrorCode::parse, {"model.merges[5]", "42"});
  json unknown_merge = file;
  unknown_merge["model"]["merges"][7] = "Ġ zzzzqqq";
  expect_rejected(unknown_merge, ErrorCode::parse, {"model.merges[7]", "zzzzqqq"});
  json vocab_array = file;
  vocab_array["model"]["vocab"] = json::array();
  expect_rejected(vocab_array, ErrorCode::parse, {"model.vocab", "not a JSON object"});
  json wrong_type = file;
  wrong_type["added_tokens"][0]["special"] = "yes";
  expect_rejected(wrong_type, ErrorCode::parse, {"tokenizer.json"});
}

// A model may sample an id the tokenizer has no token for (a padded embedding row, a hole in the
// vocabulary): tokenizers' decode (what transformers' fast tokenizers run) skips it, and so does
// ding's, instead of failing mid-generation. A negative id is no token id at all.
TEST(Tokenizer, DecodeSkipsIdsWithoutATokenAndRejectsNegativeOnes) {
  EXPECT_EQ(gpt2().decode(Token(50257)), "");
  const std::vector<Token> with_padding = {15496, 50300, 995}, without = {15496, 995};
  EXPECT_EQ(gpt2().decode(with_padding), gpt2().decode(without));
  const std::vector<Token> ids = {15496, -1};
  expect_error([&] { gpt2().decode(ids); }, ErrorCode::invalid_argument, {"decode", "-1"});
}

TEST(Tokenizer, NoEosWhenTheVocabularyHasNone) {
  const fs::path dir = scratch_dir("no_eos");
  json vocab = gpt2_vocab();
  vocab.erase("<|endoftext|>");
  write_file(dir / "vocab.json", vocab.dump());
  write_file(dir / "merges.txt", "Ġ t\n");
  const Tokenizer t = Tokenizer::from_folder(dir.string());
  EXPECT_EQ(t.encode("<|endoftext|>").size(), 13u) << "no special token, and only one merge: a token per byte";
  EXPECT_FALSE(t.eos().has_value());
  EXPECT_FALSE(t.bos().has_value());
}

}  // namespace
}  // namespace ding
