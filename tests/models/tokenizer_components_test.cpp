// Tokenizer components one at a time, each against facts from Hugging Face tokenizers' own unit
// tests (tokenizers/src/pre_tokenizers/*.rs, added_vocabulary.rs, decoders/*.rs) or from the
// Unicode standard; then the components ding refuses, and hostile files.
//
// To see where the pipeline cuts a text, the tests build a character-level BPE whose vocabulary
// holds the expected pieces whole, with ignore_merges: each piece then encodes to its own id
// and decodes (no decoder) to its spelling, while a piece cut differently falls apart into
// characters and shows up in the failure.
#include <ding/models/tokenizer.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "expect_error.h"

namespace ding {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;
using Pieces = std::vector<std::string>;

fs::path scratch_file(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "ding_tokenizer_components";
  fs::create_directories(dir);
  return dir / (name + ".json");
}

Tokenizer load(const json& file, const std::string& name) {
  const fs::path path = scratch_file(name);
  std::ofstream(path, std::ios::binary) << file.dump();
  return Tokenizer::from_tokenizer_json(path.string());
}

// UTF-8 characters of s.
Pieces characters(const std::string& s) {
  Pieces out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char lead = s[i];
    const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// tokenizer.json of a character-level BPE holding `pieces` whole (see the top of the file).
json piece_model_file(const Pieces& pieces) {
  std::set<std::string> spellings = {"<unk>"};
  for (const std::string& p : pieces) {
    spellings.insert(p);
    for (const std::string& c : characters(p)) spellings.insert(c);
  }
  json vocab = json::object();
  for (const std::string& s : spellings) vocab[s] = int(vocab.size());
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"},
                     {"ignore_merges", true}}}};
}

json added_token(int id, const std::string& content, bool special, json flags = json::object()) {
  json t = {{"id", id},          {"content", content}, {"special", special}, {"single_word", false},
            {"lstrip", false},   {"rstrip", false},    {"normalized", !special}};
  t.update(flags);
  return t;
}

Pieces pieces_of(const Tokenizer& t, const std::string& text, EncodeOptions options = {}) {
  Pieces out;
  for (Token id : t.encode(text, options)) out.push_back(t.decode(id));
  return out;
}

// ---- pre-tokenizers ----

// tokenizers/src/pre_tokenizers/split.rs, test "basic": the regex matches words and
// punctuation, invert makes the spaces the delimiters.
TEST(TokenizerComponents, SplitBehaviors) {
  const std::string text = "How are you doing?";
  const std::vector<std::pair<std::string, Pieces>> cases = {
      {"Removed", {"How", "are", "you", "doing", "?"}},
      {"Isolated", {"How", " ", "are", " ", "you", " ", "doing", "?"}},
      {"MergedWithPrevious", {"How ", "are ", "you ", "doing", "?"}},
      {"MergedWithNext", {"How", " are", " you", " doing", "?"}},
      {"Contiguous", {"How", " ", "are", " ", "you", " ", "doing?"}},
  };
  for (const auto& [behavior, expected] : cases) {
    json file = piece_model_file(expected);
    file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", R"(\w+|[^\w\s]+)"}}}, {"behavior", behavior},
                             {"invert", true}};
    EXPECT_EQ(pieces_of(load(file, "split_" + behavior), text), expected) << behavior;
  }
}

// split.rs "regex_string" and "invert": a String pattern, a Regex, and an inverted match agree.
TEST(TokenizerComponents, SplitStringRegexAndInvertAgree) {
  const Pieces expected = {"Hey,", "man!"};
  const std::vector<json> patterns = {
      {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Removed"}, {"invert", false}},
      {{"type", "Split"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"behavior", "Removed"}, {"invert", false}},
      {{"type", "Split"}, {"pattern", {{"Regex", R"([^\s]+)"}}}, {"behavior", "Removed"}, {"invert", true}},
  };
  for (size_t i = 0; i < patterns.size(); ++i) {
    json file = piece_model_file(expected);
    file["pre_tokenizer"] = patterns[i];
    EXPECT_EQ(pieces_of(load(file, "split_agree" + std::to_string(i)), "Hey, man!"), expected) << patterns[i].dump();
  }
  // A String pattern is literal: regex characters in it mean themselves.
  json file = piece_model_file({"a", "b"});
  file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", ".*"}}}, {"behavior", "Removed"}};
  EXPECT_EQ(pieces_of(load(file, "split_literal"), "a.*b"), (Pieces{"a", "b"}));
}

// tokenizers/src/pre_tokenizers/digits.rs.
TEST(TokenizerComponents, Digits) {
  for (const bool individual : {false, true}) {
    const Pieces expected = individual ? Pieces{"Hey ", "1", "2", "3", " friend!"} : Pieces{"Hey ", "123", " friend!"};
    json file = piece_model_file(expected);
    file["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", individual}};
    EXPECT_EQ(pieces_of(load(file, "digits"), "Hey 123 friend!"), expected) << individual;
  }
}

// tokenizers/src/pre_tokenizers/metaspace.rs: "basic", "multiple_spaces", and the prepend
// schemes around an added token ("non_legacy_meta_space").
TEST(TokenizerComponents, Metaspace) {
  const auto metaspace = [](const std::string& scheme, bool split) {
    return json{{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  };
  json file = piece_model_file({"▁Hey", "▁friend!", "▁"});
  file["pre_tokenizer"] = metaspace("always", true);
  const Tokenizer always = load(file, "metaspace_always");
  EXPECT_EQ(pieces_of(always, "Hey friend!"), (Pieces{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pieces_of(always, "Hey   friend!"), (Pieces{"▁Hey", "▁", "▁", "▁friend!"}));

  file = piece_model_file({"▁Hey▁my▁friend▁", "how▁are▁you", "▁Hey▁", "how", "Hey▁my"});
  // json::array: clang takes a braced list of one json for a copy of it (CWG 2137), not an array.
  file["added_tokens"] = json::array({added_token(int(file["model"]["vocab"].size()), "<s>", true)});
  file["pre_tokenizer"] = metaspace("first", false);
  const Tokenizer first = load(file, "metaspace_first");
  EXPECT_EQ(pieces_of(first, "Hey my friend <s>how▁are you"), (Pieces{"▁Hey▁my▁friend▁", "<s>", "how▁are▁you"}));
  EXPECT_EQ(pieces_of(first, " Hey <s>how"), (Pieces{"▁Hey▁", "<s>", "how"}));
  // "first" means the start of the input: after a leading added token nothing is prepended.
  EXPECT_EQ(pieces_of(first, "<s>how"), (Pieces{"<s>", "how"}));
  file["pre_tokenizer"] = metaspace("never", false);
  EXPECT_EQ(pieces_of(load(file, "metaspace_never"), "Hey my"), (Pieces{"Hey▁my"}));
}

// A Sequence applies its steps in order; ByteLevel last, with the GPT-2 split and a prefix space.
TEST(TokenizerComponents, ByteLevelIsTheLastStep) {
  json file = piece_model_file({"a"});
  file["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  expect_error([&] { load(file, "byte_level_first"); }, ErrorCode::not_implemented, {"after ByteLevel"});
}

// ---- added tokens ----

// tokenizers/src/tokenizer/added_vocabulary.rs: "test_single_word_is_correct",
// "test_single_word_is_unicode_correct", "test_lstrip_unicode_space" (there with a Lowercase
// normalizer; here with none, so the text keeps its case).
TEST(TokenizerComponents, AddedTokenFlags) {
  const auto with_mask = [](const Pieces& text_pieces, json flags, const std::string& name) {
    json file = piece_model_file(text_pieces);
    file["added_tokens"] = json::array({added_token(int(file["model"]["vocab"].size()), "<mask>", false, flags)});
    return load(file, name);
  };
  const Tokenizer single = with_mask({" My name ", " A<mask> <mask>ony ", ", ", "- \u25CC\u0330<mask>"},
                                     {{"single_word", true}}, "single_word");
  EXPECT_EQ(pieces_of(single, "<mask> My name <mask> A<mask> <mask>ony <mask>"),
            (Pieces{"<mask>", " My name ", "<mask>", " A<mask> <mask>ony ", "<mask>"}));
  // Punctuation is not a word character; a combining mark is.
  EXPECT_EQ(pieces_of(single, "<mask>, <mask>- \u25CC\u0330<mask>"), (Pieces{"<mask>", ", ", "<mask>", "- \u25CC\u0330<mask>"}));

  const Tokenizer strip = with_mask({"Hi", "there"}, {{"single_word", true}, {"lstrip", true}, {"rstrip", true}}, "strip");
  // The whitespace around each <mask> (tab and U+2000 included) goes into the token; a token
  // does not take back what the one before it took.
  EXPECT_EQ(pieces_of(strip, "Hi <mask> there\t<mask>\t<mask>\u2000"), (Pieces{"Hi", "<mask>", "there", "<mask>", "<mask>"}));
}

// added_vocabulary.rs "test_encode_special_tokens": with specials treated as text, a special
// match still consumes its text in the raw pass, and a normalized token can match inside it.
TEST(TokenizerComponents, SpecialTokensAsText) {
  json file = piece_model_file({"Hi <m", " there\t<m", "\t<m", "\u2000 <pad> <m", "<pad><pad>", "Hi", "there"});
  const int next = int(file["model"]["vocab"].size());
  file["added_tokens"] = {added_token(next, "<mask>", true, {{"lstrip", true}, {"rstrip", true}, {"single_word", true}}),
                          added_token(next + 1, "ask>", false), added_token(next + 2, "<pad>", true)};
  const Tokenizer t = load(file, "specials_as_text");
  const std::string text = "Hi <mask> there\t<mask>\t<mask>\u2000 <pad> <mask><pad><pad>";
  EXPECT_EQ(pieces_of(t, text, {.allow_special = false}),
            (Pieces{"Hi <m", "ask>", " there\t<m", "ask>", "\t<m", "ask>", "\u2000 <pad> <m", "ask>", "<pad><pad>"}));
  EXPECT_EQ(pieces_of(t, text), (Pieces{"Hi", "<mask>", "there", "<mask>", "<mask>", "<pad>", "<mask>", "<pad>", "<pad>"}));
}

// Leftmost first, then longest; matches never overlap.
TEST(TokenizerComponents, AddedTokensLeftmostLongest) {
  json file = piece_model_file({"x", "<b"});
  const int next = int(file["model"]["vocab"].size());
  file["added_tokens"] = {added_token(next, "<a>", true), added_token(next + 1, "<a><b>", true),
                          added_token(next + 2, "a><b", true)};
  const Tokenizer t = load(file, "leftmost_longest");
  EXPECT_EQ(pieces_of(t, "x<a><b>x"), (Pieces{"x", "<a><b>", "x"}));
  // "a><b" starts inside the match at 0, so it never matches.
  EXPECT_EQ(pieces_of(t, "<a><b"), (Pieces{"<a>", "<b"}));
}

// ---- normalizers ----

// Llama-2's layout: the normalizer prepends ▁ to each stretch of text and replaces spaces.
TEST(TokenizerComponents, PrependAndReplace) {
  json file = piece_model_file({"▁Hey▁friend", "▁again"});
  file["added_tokens"] = json::array({added_token(int(file["model"]["vocab"].size()), "<s>", true)});
  file["normalizer"] = {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Prepend"}, {"prepend", "▁"}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  const Tokenizer t = load(file, "prepend_replace");
  // Each stretch between added tokens is normalized on its own, so each gets its ▁.
  EXPECT_EQ(pieces_of(t, "Hey friend<s>again"), (Pieces{"▁Hey▁friend", "<s>", "▁again"}));
  EXPECT_EQ(pieces_of(t, "<s>"), (Pieces{"<s>"}));
  EXPECT_TRUE(t.encode("").empty());
}

// Unicode's own example pairs (UAX #15): NFC composes, NFD decomposes, NFKC also folds
// compatibility characters such as the ﬁ ligature.
TEST(TokenizerComponents, UnicodeNormalization) {
  json file = piece_model_file({"\u00e9", "e\u0301", "fi", "\ufb01", "\u00c5"});
  for (const auto& [form, text, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"NFC", "e\u0301", "\u00e9"},
           {"NFC", "\u212b", "\u00c5"},  // the Ångström sign is a singleton decomposition
           {"NFC", "\ufb01", "\ufb01"},
           {"NFD", "\u00e9", "e\u0301"},
           {"NFKC", "\ufb01", "fi"}}) {
    file["normalizer"] = {{"type", form}};
    try {
      const Tokenizer t = load(file, "unicode_" + form);
      EXPECT_EQ(pieces_of(t, text), Pieces{expected}) << form << " " << json(text).dump();
    } catch (const Error& e) {  // a build without ICU refuses the file, by the form's name
      EXPECT_EQ(e.code(), ErrorCode::not_implemented);
      EXPECT_NE(std::string(e.what()).find(form + " normalization needs ding built with ICU"), std::string::npos) << e.what();
    }
  }
}

// ---- the BPE model ----

// A character outside the vocabulary becomes its UTF-8 bytes as <0xNN> tokens (byte_fallback)
// or the unk token, consecutive unknown characters fusing into one unk with fuse_unk.
TEST(TokenizerComponents, ByteFallbackAndUnk) {
  json file = piece_model_file({"a", "b"});
  json& vocab = file["model"]["vocab"];
  for (const char* byte : {"<0xC3>", "<0xA9>", "<0xE2>", "<0x82>", "<0xAC>"}) vocab[byte] = int(vocab.size());
  file["model"]["byte_fallback"] = true;
  file["decoder"] = {{"type", "ByteFallback"}};
  const Tokenizer fallback = load(file, "byte_fallback");
  EXPECT_EQ(pieces_of(fallback, "aéb"), (Pieces{"a", "\xC3", "\xA9", "b"}));  // raw bytes, one per token
  EXPECT_EQ(fallback.decode(fallback.encode("aé€b")), "aé€b");
  // A character whose bytes are not all there is unknown.
  EXPECT_EQ(pieces_of(fallback, "a😀b"), (Pieces{"a", "<unk>", "b"}));

  file = piece_model_file({"a", "b"});
  file["model"]["fuse_unk"] = true;
  const Tokenizer fused = load(file, "fuse_unk");
  EXPECT_EQ(pieces_of(fused, "a€😀b€"), (Pieces{"a", "<unk>", "b", "<unk>"}));
  file["model"]["fuse_unk"] = false;
  EXPECT_EQ(pieces_of(load(file, "no_fuse_unk"), "a€😀b"), (Pieces{"a", "<unk>", "<unk>", "b"}));
}

// With ignore_merges a piece in the vocabulary maps to its id whatever the merges would build.
TEST(TokenizerComponents, IgnoreMerges) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  json file = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"b c", "a bc"}}}}};
  // No merge builds "ab" from a and b, so BPE gives a·bc → abc, and "ab" stays two tokens.
  EXPECT_EQ(load(file, "merges").encode("ab"), (std::vector<Token>{0, 1}));
  EXPECT_EQ(load(file, "merges").encode("abc"), (std::vector<Token>{5}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(file, "ignore_merges").encode("ab"), (std::vector<Token>{3}));
}

// A long SentencePiece-style piece is merged word by word, cut before each ▁ — but only when
// no merge joins across such a cut; here one does, so the piece must stay whole.
TEST(TokenizerComponents, MergeAcrossMetaspaceKeepsThePieceWhole) {
  const json vocab = {{"a", 0}, {"b", 1}, {"▁", 2}, {"▁b", 3}, {"a▁b", 4}};
  const json file = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"▁ b", "a ▁b"}}}}};
  EXPECT_EQ(load(file, "across_metaspace").encode("a▁b▁b"), (std::vector<Token>{4, 3}));
}

// ---- post-processor and decoders ----

TEST(TokenizerComponents, TemplateAroundTheIds) {
  json file = piece_model_file({"x"});
  const int bos = int(file["model"]["vocab"].size()), eos = bos + 1;
  file["added_tokens"] = {added_token(bos, "<s>", true), added_token(eos, "</s>", true)};
  const auto special = [](const std::string& id) { return json{{"SpecialToken", {{"id", id}, {"type_id", 0}}}}; };
  file["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single", {special("<s>"), {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, special("</s>")}},
         {"pair", json::array()},
         {"special_tokens",
          {{"<s>", {{"id", "<s>"}, {"ids", {bos}}, {"tokens", {"<s>"}}}},
           {"</s>", {{"id", "</s>"}, {"ids", {eos}}, {"tokens", {"</s>"}}}}}}}}}};
  const Tokenizer t = load(file, "template");
  const Token x = *t.token_id("x");
  EXPECT_EQ(t.encode("x"), (std::vector<Token>{bos, x, eos}));
  EXPECT_EQ(t.encode(""), (std::vector<Token>{bos, eos}));
  EXPECT_EQ(t.encode("x", {.add_special_tokens = false}), std::vector<Token>{x});
  EXPECT_EQ(t.bos(), bos) << "the one token before the text";
  EXPECT_EQ(t.decode(t.encode("x"), {.skip_special = true}), "x");
}

// tokenizers/src/decoders: strip.rs, byte_fallback.rs, fuse.rs and metaspace.rs behaviour,
// through whole decoder chains as files write them.
TEST(TokenizerComponents, Decoders) {
  json file = piece_model_file({"▁Hey", "▁friend", "▁", "Hey"});
  json& vocab = file["model"]["vocab"];
  for (const char* byte : {"<0xE5>", "<0x8F>", "<0xAB>"}) vocab[byte] = int(vocab.size());
  const auto ids = [&](const Pieces& pieces) {
    std::vector<Token> out;
    for (const std::string& p : pieces) out.push_back(file["model"]["vocab"].at(p).get<Token>());
    return out;
  };
  const auto decode_with = [&](const json& decoder, const Pieces& pieces) {
    file["decoder"] = decoder;
    return load(file, "decoder").decode(ids(pieces));
  };
  const json llama2 = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode_with(llama2, {"▁Hey", "▁friend"}), "Hey friend");  // one leading space stripped
  EXPECT_EQ(decode_with(llama2, {"▁", "▁Hey"}), " Hey");
  EXPECT_EQ(decode_with(llama2, {"<0xE5>", "<0x8F>", "<0xAB>", "▁Hey"}), "叫 Hey");  // byte_fallback.rs's 叫
  // Without Fuse, Strip cuts every token.
  EXPECT_EQ(decode_with({{"type", "Sequence"}, {"decoders", {llama2["decoders"][0], llama2["decoders"][3]}}},
                        {"▁Hey", "▁friend"}),
            "Heyfriend");
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(decode_with(metaspace, {"▁Hey", "▁friend"}), "Hey friend");
  EXPECT_EQ(decode_with(metaspace, {"Hey", "▁friend"}), "Hey friend");
  json never = metaspace;
  never["prepend_scheme"] = "never";
  EXPECT_EQ(decode_with(never, {"▁Hey", "▁friend"}), " Hey friend");
  // No decoder: HF joins the token strings with spaces.
  EXPECT_EQ(decode_with(nullptr, {"▁Hey", "Hey"}), "▁Hey Hey");

  // A stream decodes each token after the one before it, so the second word keeps its space.
  file["decoder"] = llama2;
  const Tokenizer t = load(file, "stream");
  TextStream stream(t);
  std::string streamed;
  for (Token id : ids({"▁Hey", "▁friend", "<0xE5>", "<0x8F>"})) streamed += stream.push(id);
  EXPECT_EQ(streamed, "Hey friend") << "the unfinished 叫 is held back";
  EXPECT_EQ(stream.push(ids({"<0xAB>"})[0]), "叫");
}

// ---- what ding refuses ----

TEST(TokenizerComponents, UnsupportedComponentsAreNamed) {
  const json base = piece_model_file({"a"});
  const auto expect_unsupported = [&](const char* key, const json& value, std::initializer_list<std::string> parts) {
    json file = base;
    if (std::string(key) == "model") file["model"].update(value);
    else file[key] = value;
    expect_error([&] { load(file, "unsupported"); }, ErrorCode::not_implemented, parts);
  };
  expect_unsupported("model", {{"type", "WordLevel"}}, {"model.type", "WordLevel"});
  expect_unsupported("model", {{"continuing_subword_prefix", "##"}}, {"model.continuing_subword_prefix", "##"});
  expect_unsupported("model", {{"dropout", 0.1}}, {"model.dropout", "0.1"});
  expect_unsupported("normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "x"}}, {{"type", "Lowercase"}}}}},
                     {"normalizer.normalizers[1].type", "Lowercase"});
  expect_unsupported("normalizer", {{"type", "BertNormalizer"}}, {"normalizer.type", "BertNormalizer"});
  expect_unsupported("pre_tokenizer", {{"type", "Whitespace"}}, {"pre_tokenizer.type", "Whitespace"});
  expect_unsupported("pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "UnicodeScripts"}}}}},
                     {"pre_tokenizer.pretokenizers[0].type", "UnicodeScripts"});
  expect_unsupported("post_processor", {{"type", "RobertaProcessing"}}, {"post_processor.type", "RobertaProcessing"});
  expect_unsupported("post_processor", {{"type", "BertProcessing"}}, {"post_processor.type", "BertProcessing"});
  expect_unsupported("decoder", {{"type", "WordPiece"}}, {"decoder.type", "WordPiece"});
  expect_unsupported("decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "CTC"}}}}},
                     {"decoder.decoders[1].type", "CTC"});
}

TEST(TokenizerComponents, MalformedComponentsAreNamed) {
  const json base = piece_model_file({"a"});
  const auto expect_parse_error = [&](const char* key, const json& value, std::initializer_list<std::string> parts) {
    json file = base;
    file[key] = value;
    expect_error([&] { load(file, "malformed"); }, ErrorCode::parse, parts);
  };
  expect_parse_error("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}}, {"pre_tokenizer.pattern", "(unclosed"});
  expect_parse_error("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}},
                     {"pre_tokenizer.behavior", "Sideways"});
  expect_parse_error("pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "ab"}}, {"pre_tokenizer.replacement", "\"ab\""});
  expect_parse_error("pre_tokenizer", {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}},
                     {"pre_tokenizer.prepend_scheme", "sometimes"});
  expect_parse_error("pre_tokenizer", {{"pretokenizers", json::array()}}, {"pre_tokenizer", "no \"type\""});
  expect_parse_error("normalizer", {{"type", "Prepend"}}, {"normalizer", "prepend"});
  expect_parse_error("decoder", {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}, {"decoder.start", "-1"});
  expect_parse_error("post_processor", {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}}},
                     {"post_processor.single[0]", "<s>"});
  expect_parse_error("post_processor",
                     {{"type", "TemplateProcessing"},
                      {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {999}}, {"tokens", {"<s>"}}}}}}},
                     {"post_processor", "999"});
  json unk = base;
  unk["model"]["unk_token"] = "<missing>";
  expect_error([&] { load(unk, "unk"); }, ErrorCode::parse, {"model.unk_token", "<missing>"});
}

// Deep nesting is refused before any parser recurses into it.
TEST(TokenizerComponents, DeeplyNestedJsonIsRefused) {
  const fs::path path = scratch_file("nested");
  std::ofstream(path, std::ios::binary) << std::string(100000, '[') << std::string(100000, ']');
  expect_error([&] { Tokenizer::from_tokenizer_json(path.string()); }, ErrorCode::parse, {"nested deeper than 64"});
  json file = piece_model_file({"a"});
  json seq = {{"type", "Fuse"}};
  for (int i = 0; i < 40; ++i) seq = {{"type", "Sequence"}, {"decoders", {seq}}};
  file["decoder"] = seq;
  expect_error([&] { load(file, "nested_decoders"); }, ErrorCode::parse, {"nested deeper than 64"});
}

}  // namespace
}  // namespace ding
