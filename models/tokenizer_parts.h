// The parts a Tokenizer is assembled from, in the order encode uses them: added tokens cut
// out of the text, normalizers, pre-tokenizers, the BPE model, the post-processor's template;
// and the decoders that decode runs. Each mirrors the Hugging Face tokenizers component of the
// same name (tokenizer.json "type"), so a file's pipeline maps one to one onto these.
//
// Internal to the tokenizer (tokenizer*.cpp, bpe.cpp): no third-party headers, so PCRE2,
// ICU and JSON stay in the .cpp files.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tokenizer.h"

namespace ding::tok {

// ---- UTF-8 (tokenizer_text.cpp) -------------------------------------------------------------

// The well-formed UTF-8 character at text[pos] (Unicode Table 3-7), or why there is none.
struct Utf8Char {
  int length = 1;                 // bytes of the character, or of the malformed prefix when problem is set
  const char* problem = nullptr;  // null when well formed
  bool truncated = false;         // the text ended inside a character that could still complete
};
Utf8Char utf8_char_at(std::string_view text, size_t pos);
size_t valid_utf8_prefix(std::string_view text);  // length of the longest well-formed prefix
void append_utf8(std::string& out, char32_t cp);
char32_t code_point_at(std::string_view text, size_t pos);  // of a well-formed character at pos

// Calls on_run(run, valid) for the alternating runs of well-formed and ill-formed UTF-8.
template <class OnRun>
void for_each_utf8_run(std::string_view text, OnRun&& on_run) {
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) on_run(text.substr(0, valid), true);
    size_t invalid = valid;
    while (invalid < text.size() && utf8_char_at(text, invalid).problem) invalid += utf8_char_at(text, invalid).length;
    if (invalid > valid) on_run(text.substr(valid, invalid - valid), false);
    text.remove_prefix(invalid);
  }
}

// Unicode White_Space (what \s means to the Rust regex crate that HF uses for added tokens).
bool is_white_space(char32_t cp);
// \w as the Rust regex crate defines it: Alphabetic, marks, decimal digits, connector
// punctuation, ZWNJ/ZWJ. Decides HF's single_word added tokens.
bool is_word_char(char32_t cp);

// GPT-2 spells every byte as a printable character so that vocabulary files are text: the
// printable bytes ! to ~, ¡ to ¬ and ® to ÿ stand for themselves, the other 68 (controls,
// space, DEL, NBSP, soft hyphen) become U+0100, U+0101, ... in byte order. A space is "Ġ".
struct ByteLevelAlphabet {
  std::array<std::string, 256> spelling;  // byte → its character, UTF-8 encoded
  std::unordered_map<char32_t, uint8_t> byte_of;
  ByteLevelAlphabet();
  // The bytes a spelling stands for; nullopt when a character is outside the alphabet.
  std::optional<std::string> bytes_of(std::string_view spelling_utf8) const;
};
const ByteLevelAlphabet& byte_level_alphabet();

// ---- regex (tokenizer_text.cpp) -------------------------------------------------------------

// Per-call matching state (PCRE2 match data), so a compiled Regex is shared by all threads.
class MatchScratch {
 public:
  MatchScratch();
  ~MatchScratch();
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_;
};

// A PCRE2 pattern with UTF-8 and Unicode properties (what HF's Oniguruma patterns use).
class Regex {
 public:
  // literal: the pattern is a plain string (HF {"String": ...}). where: names it in errors.
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The first non-empty match in text[from..] as [begin, end); false when there is none.
  // text must be well-formed UTF-8.
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, MatchScratch& scratch) const;

 private:
  void* code_;
  bool jit_ = false;
};

// HF's Replace pattern: a literal string or a regex, each match replaced by `content`.
struct Replacement {
  std::string literal;           // used when regex is null
  std::unique_ptr<Regex> regex;
  std::string content;
  std::string apply(std::string_view text, MatchScratch& scratch) const;
};

// ---- normalizers (tokenizer_text.cpp) --------------------------------------------------------

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
struct Prepend {
  std::string text;  // prepended to a non-empty segment
};
using Normalizer = std::variant<UnicodeForm, Prepend, Replacement>;
// Applies a sequence of normalizers. A Unicode form needs ding built with ICU; the parser
// checks that (have_unicode_normalization) so normalize itself does not throw for it.
std::string normalize(const std::vector<Normalizer>& normalizers, std::string_view text, MatchScratch& scratch);
bool have_unicode_normalization();
const char* unicode_form_name(UnicodeForm form);  // "NFC", as tokenizer.json spells it

// ---- pre-tokenizers (tokenizer_pretokenize.cpp) ---------------------------------------------

// How a Split keeps its matches (HF SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct SplitStep {
  std::unique_ptr<Regex> pattern;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;  // the pieces between matches are the "matches"
};
// Must be the last step: it turns pieces into bytes for a byte-level model.
struct ByteLevelStep {
  bool add_prefix_space = false;
  std::unique_ptr<Regex> gpt2_split;  // null unless use_regex
};
enum class PrependScheme { always, first, never };
struct MetaspaceStep {
  std::string replacement = "\xE2\x96\x81";  // ▁, which replaces every space
  PrependScheme prepend_scheme = PrependScheme::always;
  bool split = true;  // a piece per word, each starting with its ▁
};
using PreTokenizerStep = std::variant<SplitStep, ByteLevelStep, MetaspaceStep>;

// Applies the steps to a segment of text, calling on_piece for each final piece.
// at_text_start: the segment begins the input (Metaspace's "first" prepend scheme).
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view segment, bool at_text_start,
                  MatchScratch& scratch, const std::function<void(std::string_view)>& on_piece);

// ---- added tokens (tokenizer_added.cpp) -----------------------------------------------------

struct AddedToken {
  std::string content;
  Token id = 0;
  bool special = false;
  bool single_word = false;  // matches only between non-word characters
  bool lstrip = false;       // takes the whitespace before it
  bool rstrip = false;       // takes the whitespace after it
  bool normalized = false;   // matched in normalized text (its content normalized too)
};

// One side of the added vocabulary: the tokens matched in raw text, or in normalized text.
class AddedTokenMatcher {
 public:
  void add(const AddedToken& token, std::string pattern);  // pattern: what is searched for
  bool empty() const { return entries_.empty(); }
  // Splits text into stretches (on_text(stretch, offset)) and matched tokens (on_token(id)),
  // leftmost match first and, at one position, the longest, as HF's Aho-Corasick does.
  // Special tokens are skipped (left as text) unless allow_special.
  void split(std::string_view text, bool allow_special, const std::function<void(std::string_view, size_t)>& on_text,
             const std::function<void(Token)>& on_token) const;

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  std::vector<Entry> entries_;                        // longest first within each first byte
  std::array<std::vector<uint32_t>, 256> by_first_;   // entry indices by the pattern's first byte
};

// ---- the BPE model (bpe.cpp) ----------------------------------------------------------------

class Bpe {
 public:
  struct Options {
    bool byte_level = false;     // pieces are raw bytes, each starting as its byte-alphabet token
    bool byte_fallback = false;  // a character outside the vocabulary becomes <0xNN> tokens
    bool fuse_unk = false;       // consecutive unknown characters become one unk
    bool ignore_merges = false;  // a piece that is itself in the vocabulary maps straight to it
    std::optional<Token> unk;
  };
  struct Merge {
    std::string left, right;
  };

  // vocabulary: spelling → id; merges in rank order. where(i) names merge i for errors.
  Bpe(const std::unordered_map<std::string, Token>& vocabulary, const std::vector<Merge>& merges, Options options,
      const std::string& where, const std::function<std::string(size_t)>& where_merge);

  void encode(std::string_view piece, std::vector<Token>& out) const;

 private:
  struct PairRank {
    int32_t rank;  // position in the merges list; lower merges first
    Token merged;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, Token, StringHash, std::equal_to<>>;

  void encode_word(std::string_view word, std::vector<Token>& out) const;
  void initial_symbols(std::string_view word, std::vector<Token>& symbols) const;
  void merge(std::vector<Token>& symbols) const;
  static uint64_t pair_key(Token left, Token right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

  Options options_;
  StringMap vocab_;                                   // spelling → id
  StringMap id_of_bytes_;                             // byte-level: raw bytes → id, for ignore_merges
  std::array<Token, 256> byte_token_{};               // byte-level: each byte's own token
  std::array<Token, 256> fallback_token_{};           // byte_fallback: <0xNN>, or -1
  std::unordered_map<uint64_t, PairRank> merges_;     // key: left id << 32 | right id
  // No merge joins a symbol ending in another character to one starting with ▁, so a long
  // SentencePiece-style piece can be cut before each ▁ that follows another character.
  bool cut_at_metaspace_ = false;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<Token>, StringHash, std::equal_to<>> cache_;
};

// ---- post-processor and decoders (tokenizer_decode.cpp) --------------------------------------

// TemplateProcessing's "single" template, reduced to the ids around the sequence ($A).
struct PostProcessor {
  std::vector<Token> before, after;
};

struct ByteLevelDecoder {};   // byte-alphabet spellings → bytes, the whole text as one token
struct ByteFallbackDecoder {};  // runs of <0xNN> tokens → their bytes
struct FuseDecoder {};        // every token joined into one
struct StripDecoder {
  char32_t content = U' ';
  size_t start = 0, stop = 0;  // at most this many `content` characters cut from each token's ends
};
struct MetaspaceDecoder {
  std::string replacement = "\xE2\x96\x81";
  PrependScheme prepend_scheme = PrependScheme::always;
};
using Decoder = std::variant<ByteLevelDecoder, ByteFallbackDecoder, FuseDecoder, StripDecoder, MetaspaceDecoder,
                             Replacement>;

// Runs the decoders over token spellings and joins the result; without decoders, HF joins
// the spellings with spaces. Bytes are kept as they are where HF would put U+FFFD for an
// ill-formed sequence, so a stream can complete characters across calls.
std::string decode_tokens(const std::vector<Decoder>& decoders, std::vector<std::string> tokens);

// ---- loading (tokenizer_json.cpp) ----------------------------------------------------------

std::unique_ptr<Tokenizer::Impl> load_tokenizer_json(const std::string& path);
std::unique_ptr<Tokenizer::Impl> load_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
// bos_token / eos_token from a tokenizer_config.json.
void load_tokenizer_config(Tokenizer::Impl& impl, const std::string& path);

}  // namespace ding::tok

namespace ding {

struct Tokenizer::Impl {
  std::vector<tok::AddedToken> added;
  tok::AddedTokenMatcher raw_added;         // matched in the text as given
  tok::AddedTokenMatcher normalized_added;  // matched after normalization
  std::vector<tok::Normalizer> normalizers;
  std::vector<tok::PreTokenizerStep> pre_tokenizer;
  std::unique_ptr<tok::Bpe> model;
  tok::PostProcessor post_processor;
  std::vector<tok::Decoder> decoders;

  std::vector<std::string> spelling;  // id → the token as the decoders see it
  std::vector<bool> defined;          // ids may have gaps
  std::vector<bool> special;          // id → a special added token
  std::unordered_map<std::string, Token> id_of;  // added content first, then vocabulary spelling
  std::optional<Token> bos, eos;
};

}  // namespace ding
