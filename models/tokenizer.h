// Tokenizer: byte-level BPE as used by GPT-2 and its descendants, loaded from a Hugging Face
// `tokenizer.json` or from the original `vocab.json` + `merges.txt`.
//
// encode(text) follows Hugging Face tokenizers step by step, so ids match theirs:
//   1. added tokens (e.g. <|endoftext|>) are cut out of the text first and map to their ids;
//   2. each remaining segment is pre-tokenized by the file's steps: Split by a regex (PCRE2 with
//      Unicode properties) and ByteLevel (optional prefix space, the GPT-2 regex unless
//      use_regex is false);
//   3. each piece's bytes become byte tokens, then BPE merges them, lowest merge rank first
//      and, within a rank, left to right.
// decode(ids) concatenates the tokens' raw bytes, so decode(encode(s)) == s for every byte
// string s, valid UTF-8 or not (unless the file asks for a prefix space, which encode adds).
//
// Thread safety: a Tokenizer is immutable after loading except for its word cache, which is
// guarded by a mutex, so encode/decode may be called from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ding {

using Token = int32_t;

struct EncodeOptions {
  // Occurrences of special added tokens in the text map to their ids. When false they are
  // tokenized as ordinary text (useful for untrusted input). Non-special added tokens always match.
  bool allow_special = true;
  // Invalid UTF-8 raises Error(invalid_argument) naming the byte offset. When false, invalid
  // bytes are kept: each run of them is its own piece and encodes byte by byte.
  bool strict_utf8 = false;
};

class Tokenizer {
 public:
  // tokenizer.json when the folder has one, else vocab.json + merges.txt.
  static Tokenizer from_folder(const std::string& dir);
  // Hugging Face tokenizers format; model.type must be "BPE" with a ByteLevel pre-tokenizer.
  static Tokenizer from_tokenizer_json(const std::string& path);
  // The original GPT-2 files. A "<|endoftext|>" entry in the vocabulary becomes a special
  // token and eos(), as GPT2Tokenizer does.
  static Tokenizer from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  std::vector<Token> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Raw bytes, not necessarily valid UTF-8 (a token may end inside a character; see TextStream).
  // Throws Error(invalid_argument) naming an id that is not in the vocabulary.
  std::string decode(std::span<const Token> ids) const;
  std::string decode(Token id) const;

  // One past the largest id (model vocabulary and added tokens together).
  int32_t vocab_size() const;
  // The id of a token as spelled in the vocabulary file (GPT-2 byte-level spelling, so " world"
  // is "Ġworld"), or of an added token by its content.
  std::optional<Token> token_id(std::string_view token) const;

  // End of text: "<|endoftext|>" when the vocabulary has it, or what set_eos chose.
  // Throws Error(invalid_argument) when neither applies.
  Token eos() const;
  void set_eos(Token id);  // model code may name another; throws when id is out of range

  struct Impl;  // opaque: defined in tokenizer.cpp, so PCRE2 and JSON stay out of this header

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text: push token ids as they are generated and get back only complete UTF-8
// characters, since a byte-level token can end in the middle of one. Bytes that can never
// become a valid character are passed through at once rather than held. The concatenation of
// every push() and the final flush() equals tokenizer.decode(all ids).
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(Token id);
  std::string flush();  // the held bytes of an unfinished character, if any

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // bytes of a character still waiting for its continuation bytes
};

}  // namespace ding
