// The tokenizer's pipeline and public API: encode runs added tokens → normalizers → added
// tokens in normalized text → pre-tokenizer → BPE → template; decode runs the decoders; and
// TextStream decodes a growing sequence without re-decoding all of it.
#include "tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>

#include "ding/error.h"
#include "tokenizer_parts.h"

namespace ding {

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path json_file = fs::path(dir) / "tokenizer.json", config = fs::path(dir) / "tokenizer_config.json";
  const fs::path vocab = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  std::unique_ptr<Impl> impl;
  if (fs::exists(json_file)) impl = tok::load_tokenizer_json(json_file.string());
  else if (fs::exists(vocab) && fs::exists(merges)) impl = tok::load_vocab_merges(vocab.string(), merges.string());
  else
    throw Error(ErrorCode::io, fmt::format("{}: no tokenizer.json, and no vocab.json + merges.txt ({} is missing)", dir,
                                           fs::exists(vocab) ? "merges.txt" : "vocab.json"));
  if (fs::exists(config)) tok::load_tokenizer_config(*impl, config.string());
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) { return Tokenizer(tok::load_tokenizer_json(path)); }

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  return Tokenizer(tok::load_vocab_merges(vocab_json, merges_txt));
}

std::vector<Token> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  if (options.strict_utf8) {
    const size_t valid = tok::valid_utf8_prefix(text);
    if (valid < text.size()) {
      const tok::Utf8Char bad = tok::utf8_char_at(text, valid);
      std::string bytes;
      for (size_t i = valid; i < text.size() && i < valid + size_t(bad.length); ++i)
        bytes += fmt::format("{}{:02X}", i > valid ? " " : "", uint8_t(text[i]));
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("encode: invalid UTF-8 at byte offset {}: {} (bytes {})", valid, bad.problem, bytes));
    }
  }
  tok::MatchScratch scratch;
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special_tokens) out = m.post_processor.before;
  const auto on_token = [&](Token id) { out.push_back(id); };
  const auto on_piece = [&](std::string_view piece) { m.model->encode(piece, out); };
  m.raw_added.split(text, options.allow_special, [&](std::string_view segment, size_t offset) {
    // Metaspace's "first" scheme prepends only to what begins the input.
    const auto pre_tokenize = [&](std::string_view sub, size_t sub_offset) {
      tok::pre_tokenize(m.pre_tokenizer, sub, offset == 0 && sub_offset == 0, scratch, on_piece);
    };
    if (m.normalizers.empty()) return m.normalized_added.split(segment, options.allow_special, pre_tokenize, on_token);
    const std::string normalized = tok::normalize(m.normalizers, segment, scratch);
    m.normalized_added.split(normalized, options.allow_special, pre_tokenize, on_token);
  }, on_token);
  if (options.add_special_tokens) out.insert(out.end(), m.post_processor.after.begin(), m.post_processor.after.end());
  return out;
}

std::string Tokenizer::decode(std::span<const Token> ids, const DecodeOptions& options) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (Token id : ids) {
    if (id < 0) throw Error(ErrorCode::invalid_argument, fmt::format("decode: token id {} is negative", id));
    // An id with no token (a hole in the vocabulary, or a row the model pads its embedding with)
    // decodes to nothing, as transformers' decode skips it: a model may sample one.
    if (size_t(id) >= m.defined.size() || !m.defined[id]) continue;
    if (options.skip_special && m.special[id]) continue;
    tokens.push_back(m.spelling[id]);
  }
  return tok::decode_tokens(m.decoders, std::move(tokens));
}

std::string Tokenizer::decode(Token id) const { return decode(std::span<const Token>(&id, 1)); }

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->defined.size()); }

size_t Tokenizer::longest_token_bytes() const {
  size_t longest = 1;
  for (const std::string& s : impl_->spelling) longest = std::max(longest, s.size());
  for (const tok::AddedToken& t : impl_->added) longest = std::max(longest, t.content.size());
  return longest;
}

std::optional<Token> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->id_of.find(std::string(token));
  if (it == impl_->id_of.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::has_token(Token id) const { return id >= 0 && size_t(id) < impl_->defined.size() && impl_->defined[id]; }

bool Tokenizer::is_special(Token id) const { return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[id]; }

std::optional<Token> Tokenizer::bos() const { return impl_->bos; }
std::optional<Token> Tokenizer::eos() const { return impl_->eos; }

// Decodes the window (the last token already shown, for context, then the new ones) and
// returns what lies past the bytes shown so far, up to the last complete character.
std::string TextStream::push(Token id) {
  window_.push_back(id);
  const std::string text = tokenizer_->decode(window_, options_);
  size_t ready = std::min(shown_, text.size());
  while (ready < text.size()) {
    const tok::Utf8Char c = tok::utf8_char_at(text, ready);
    if (c.truncated) break;
    ready += c.problem ? 1 : c.length;  // a byte that can never be valid goes out as it is
  }
  std::string out = text.substr(std::min(shown_, ready), ready - std::min(shown_, ready));
  shown_ = ready;
  if (ready == text.size()) {
    // Keep the last token decode shows as the next one's context (an id with no token or a
    // skipped special token shows nothing, so cannot serve); when there is none yet, the next
    // token is the first.
    const auto shows = [&](Token t) {
      return tokenizer_->has_token(t) && !(options_.skip_special && tokenizer_->is_special(t));
    };
    const auto context = std::find_if(window_.rbegin(), window_.rend(), shows);
    window_.erase(window_.begin(), context == window_.rend() ? window_.end() : std::prev(context.base()));
    shown_ = tokenizer_->decode(window_, options_).size();
  }
  return out;
}

std::string TextStream::flush() {
  const std::string text = tokenizer_->decode(window_, options_);
  std::string out = text.substr(std::min(shown_, text.size()));
  window_.clear();
  shown_ = 0;
  return out;
}

}  // namespace ding
