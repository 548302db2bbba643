// Decoders: each maps the list of token strings to a new list (HF's Decoder::decode_chain),
// in file order; decode joins what the last one leaves.
#include <type_traits>
#include <utility>

#include "tokenizer_parts.h"

namespace ding::tok {

namespace {

using Tokens = std::vector<std::string>;

std::string join(const Tokens& tokens, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += separator;
    out += tokens[i];
  }
  return out;
}

// "<0x41>" → 0x41, as HF's ByteFallback reads it.
std::optional<uint8_t> fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return uint8_t(value);
}

// Characters as HF's char iteration sees them; an ill-formed byte (kept raw by ByteFallback)
// counts as one.
std::vector<std::string_view> characters(std::string_view s) {
  std::vector<std::string_view> chars;
  for (size_t pos = 0; pos < s.size();) {
    const Utf8Char c = utf8_char_at(s, pos);
    const size_t n = c.problem ? 1 : c.length;
    chars.push_back(s.substr(pos, n));
    pos += n;
  }
  return chars;
}

Tokens byte_level(const Tokens& tokens) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string bytes;
  for (const std::string& t : tokens) {
    // A token with a character outside the alphabet (an added token, say) keeps its own bytes.
    if (auto b = alphabet.bytes_of(t)) bytes += *b;
    else bytes += t;
  }
  return {bytes};
}

Tokens byte_fallback(Tokens tokens) {
  Tokens out;
  std::string run;  // bytes of consecutive <0xNN> tokens
  for (std::string& t : tokens) {
    if (auto b = fallback_byte(t)) {
      run += char(*b);
      continue;
    }
    if (!run.empty()) out.push_back(std::exchange(run, {}));
    out.push_back(std::move(t));
  }
  if (!run.empty()) out.push_back(std::move(run));
  return out;
}

Tokens strip(const StripDecoder& d, Tokens tokens) {
  std::string content;
  append_utf8(content, d.content);
  for (std::string& t : tokens) {
    const auto chars = characters(t);
    size_t first = 0, last = chars.size();
    while (first < std::min(d.start, chars.size()) && chars[first] == content) ++first;
    while (chars.size() - last < d.stop && last > first && chars[last - 1] == content) --last;
    std::string kept;
    for (size_t i = first; i < last; ++i) kept += chars[i];
    t = std::move(kept);
  }
  return tokens;
}

Tokens metaspace(const MetaspaceDecoder& d, Tokens tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    // HF drops every ▁ of the first token (not only a leading one) unless the scheme is never.
    const std::string_view replacement = (i == 0 && d.prepend_scheme != PrependScheme::never) ? "" : " ";
    std::string out;
    std::string_view t = tokens[i];
    for (size_t pos = t.find(d.replacement); pos != std::string_view::npos; pos = t.find(d.replacement)) {
      out.append(t.substr(0, pos));
      out += replacement;
      t.remove_prefix(pos + d.replacement.size());
    }
    out.append(t);
    tokens[i] = std::move(out);
  }
  return tokens;
}

}  // namespace

std::string decode_tokens(const std::vector<Decoder>& decoders, std::vector<std::string> tokens) {
  if (decoders.empty()) return join(tokens, " ");
  MatchScratch scratch;
  for (const Decoder& decoder : decoders) {
    tokens = std::visit(
        [&](const auto& d) -> Tokens {
          using D = std::decay_t<decltype(d)>;
          if constexpr (std::is_same_v<D, ByteLevelDecoder>) return byte_level(tokens);
          else if constexpr (std::is_same_v<D, ByteFallbackDecoder>) return byte_fallback(std::move(tokens));
          else if constexpr (std::is_same_v<D, FuseDecoder>) return {join(tokens, "")};
          else if constexpr (std::is_same_v<D, StripDecoder>) return strip(d, std::move(tokens));
          else if constexpr (std::is_same_v<D, MetaspaceDecoder>) return metaspace(d, std::move(tokens));
          else {  // Replace
            for (std::string& t : tokens) t = d.apply(t, scratch);
            return std::move(tokens);
          }
        },
        decoder);
  }
  return join(tokens, "");
}

}  // namespace ding::tok
