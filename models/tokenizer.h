// Tokenizer: BPE tokenizers as Hugging Face `tokenizer.json` files describe them — byte-level
// BPE (GPT-2, Llama-3, Qwen2) and SentencePiece-style BPE (Llama-2, Mistral, Mixtral) — or
// GPT-2's original `vocab.json` + `merges.txt`.
//
// encode(text) follows Hugging Face tokenizers step by step, so ids match transformers'
// tokenizer(text)["input_ids"]:
//   1. added tokens are cut out of the text first (leftmost, then longest; with their
//      lstrip/rstrip/single_word flags); the rest is text;
//   2. each stretch of text is normalized (NFC/NFD/NFKC/NFKD through ICU, Prepend, Replace),
//      then cut again at added tokens marked "normalized";
//   3. the pre-tokenizer splits it (Split by a PCRE2 regex or a string with any behavior,
//      Metaspace, Digits, and ByteLevel, which also makes pieces byte strings);
//   4. BPE turns each piece into tokens: from characters (or bytes, for byte-level files),
//      unknown characters as <0xNN> byte tokens (byte_fallback) or the unk token, then merges,
//      lowest rank first and, within a rank, left to right;
//   5. the post-processor's template adds its tokens (e.g. Llama's BOS) around the ids.
// decode(ids) runs the file's decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip). Where Hugging Face would print U+FFFD for bytes that are not yet a whole character,
// decode keeps the bytes, so the concatenation of decodes can complete the character; for
// byte-level files decode(encode(s)) == s for every byte string s.
// A component ding does not implement (Unigram or WordPiece models, other normalizers,
// pre-tokenizers, post-processors or decoders) is an Error(not_implemented) naming it.
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
  // The post-processor's template (BOS for Llama and Mistral), as transformers does by default.
  bool add_special_tokens = true;
  // Occurrences of special added tokens in the text map to their ids. When false they are
  // tokenized as ordinary text (useful for untrusted input). Non-special added tokens always match.
  bool allow_special = true;
  // Invalid UTF-8 raises Error(invalid_argument) naming the byte offset. When false, invalid
  // bytes are kept: each run of them is its own piece and encodes byte by byte (byte-level
  // files) or as byte_fallback / unk tokens.
  bool strict_utf8 = false;
};

struct DecodeOptions {
  bool skip_special = false;  // leave out special added tokens (BOS, EOS, chat markers)
};

class Tokenizer {
 public:
  // tokenizer.json when the folder has one, else vocab.json + merges.txt; bos() and eos()
  // from tokenizer_config.json's bos_token / eos_token when the folder has that file.
  static Tokenizer from_folder(const std::string& dir);
  // Hugging Face tokenizers format. Rejects JSON nested deeper than 64 levels.
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
  // Ids with no token (holes, padded embedding rows) decode to nothing, as in transformers;
  // a negative id throws Error(invalid_argument).
  std::string decode(std::span<const Token> ids, const DecodeOptions& options = {}) const;
  std::string decode(Token id) const;  // alone: a SentencePiece word loses its leading space

  // One past the largest id (model vocabulary and added tokens together).
  int32_t vocab_size() const;
  // The longest token's spelling in bytes (vocabulary and added tokens). A spelling is never
  // shorter than the normalized text it stands for (byte-level characters, "▁" and "<0xNN>" are
  // longer than their bytes), so normalized text of B bytes encodes to at least B / this tokens:
  // a bound a caller can check before encoding a huge input.
  size_t longest_token_bytes() const;
  // The id of a token as spelled in the file ("Ġworld" in byte-level files, "▁world" in
  // SentencePiece-style ones), or of an added token by its content.
  std::optional<Token> token_id(std::string_view token) const;
  bool is_special(Token id) const;  // a special added token (skipped by DecodeOptions::skip_special)
  bool has_token(Token id) const;   // false for a hole in the vocabulary or an id past it (decode skips those)

  // Beginning and end of text, from tokenizer_config.json when from_folder found one;
  // otherwise bos is the token the post-processor puts before the text (if any) and eos is
  // "<|endoftext|>" when the vocabulary has it.
  std::optional<Token> bos() const;
  std::optional<Token> eos() const;

  struct Impl;  // opaque: defined in tokenizer_parts.h, so PCRE2, ICU and JSON stay out of this header

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streams decoded text: push token ids as they are generated and get back text that will not
// change, in complete UTF-8 characters (a byte-level or <0xNN> token can end inside one).
// Each token is decoded after the one before it, so a SentencePiece word keeps its leading
// space. Bytes that can never become a valid character are passed through at once. The
// concatenation of every push() and the final flush() equals tokenizer.decode(all ids), for
// every decoder ding supports except Strip with a nonzero stop (which trims the end).
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer, DecodeOptions options = {}) : tokenizer_(&tokenizer), options_(options) {}
  std::string push(Token id);
  std::string flush();  // the held bytes of an unfinished character, if any; the stream then starts anew

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::vector<Token> window_;  // the last fully shown token (context), then tokens not yet fully shown
  size_t shown_ = 0;           // bytes of decode(window_) already returned
};

}  // namespace ding
