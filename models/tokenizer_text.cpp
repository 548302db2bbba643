// Text primitives of the tokenizer: UTF-8, the byte-level alphabet, PCRE2 patterns, and the
// normalizers (Unicode forms through ICU when ding is built with it, Prepend, Replace).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ding/error.h"
#include "tokenizer_parts.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#ifdef DING_HAVE_ICU
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#endif

namespace ding::tok {

// ---- UTF-8 ----------------------------------------------------------------------------------

Utf8Char utf8_char_at(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return uint8_t(text[pos + i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {1};
  if (lead < 0xC0) return {1, "unexpected continuation byte"};
  if (lead < 0xC2) return {1, "overlong encoding"};
  if (lead > 0xF4) return {1, lead < 0xF8 ? "code point beyond U+10FFFF" : "byte never used in UTF-8"};
  const int length = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  // The second byte's range is narrower after E0, ED, F0 and F4: that is what excludes
  // overlong forms, UTF-16 surrogates and code points beyond U+10FFFF.
  uint8_t low = 0x80, high = 0xBF;
  const char* second_problem = "truncated sequence (a continuation byte is missing)";
  if (lead == 0xE0) low = 0xA0, second_problem = "overlong encoding";
  if (lead == 0xED) high = 0x9F, second_problem = "UTF-16 surrogate";
  if (lead == 0xF0) low = 0x90, second_problem = "overlong encoding";
  if (lead == 0xF4) high = 0x8F, second_problem = "code point beyond U+10FFFF";
  for (int i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return {i, "truncated sequence (the text ends inside a character)", true};
    const uint8_t b = byte(i);
    const bool continuation = b >= 0x80 && b <= 0xBF;
    if (i == 1 && continuation && (b < low || b > high)) return {2, second_problem};
    if (!continuation) return {i, "truncated sequence (a continuation byte is missing)"};
  }
  return {length};
}

size_t valid_utf8_prefix(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (uint8_t(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Utf8Char c = utf8_char_at(text, pos);
    if (c.problem) break;
    pos += c.length;
  }
  return pos;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

char32_t code_point_at(std::string_view text, size_t pos) {
  const int n = utf8_char_at(text, pos).length;
  char32_t cp = uint8_t(text[pos]) & (n == 1 ? 0x7F : n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(text[pos + i]) & 0x3F);
  return cp;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  // Alphabetic is letters, letter numbers and the Other_Alphabetic marks, which \p{M} covers.
  static const Regex word(R"(^[\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", false, "the \\w class");
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  std::string ch;
  append_utf8(ch, cp);
  MatchScratch scratch;
  size_t begin = 0, end = 0;
  return word.find(ch, 0, begin, end, scratch);
}

// ---- the byte-level alphabet ----------------------------------------------------------------

ByteLevelAlphabet::ByteLevelAlphabet() {
  char32_t next_stand_in = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? char32_t(b) : next_stand_in++;
    append_utf8(spelling[b], cp);
    byte_of[cp] = uint8_t(b);
  }
}

std::optional<std::string> ByteLevelAlphabet::bytes_of(std::string_view spelling_utf8) const {
  std::string bytes;
  for (size_t pos = 0; pos < spelling_utf8.size(); pos += utf8_char_at(spelling_utf8, pos).length) {
    if (utf8_char_at(spelling_utf8, pos).problem) return std::nullopt;
    auto it = byte_of.find(code_point_at(spelling_utf8, pos));
    if (it == byte_of.end()) return std::nullopt;
    bytes += char(it->second);
  }
  return bytes;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

// ---- regex ----------------------------------------------------------------------------------

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

// One ovector pair is all find needs, whatever the pattern's groups, so one scratch serves
// every pattern.
MatchScratch::MatchScratch() : data_(pcre2_match_data_create(1, nullptr)) {
  if (!data_) throw Error(ErrorCode::out_of_memory, "tokenizer: cannot allocate PCRE2 match data");
}
MatchScratch::~MatchScratch() { pcre2_match_data_free(static_cast<pcre2_match_data*>(data_)); }

Regex::Regex(std::string_view pattern, bool literal, const std::string& where) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 refuses UCP (which only changes classes) together with LITERAL.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &error_offset,
                        nullptr);
  if (!code_)
    throw Error(ErrorCode::parse, fmt::format("{}: pattern {} does not compile at offset {}: {}", where,
                                              nlohmann::json(std::string(pattern)).dump(), error_offset,
                                              pcre2_message(error)));
  // JIT is an optimisation: a PCRE2 built without it still matches, only slower.
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::find(std::string_view text, size_t from, size_t& begin, size_t& end, MatchScratch& scratch) const {
  auto* code = static_cast<const pcre2_code*>(code_);
  auto* data = static_cast<pcre2_match_data*>(scratch.data());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (from < text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr)
                        : pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    // rc 0: the ovector (one pair) was too small for the groups; the whole match is still set.
    if (rc < 0)
      throw Error(ErrorCode::internal, fmt::format("tokenizer: regex failed at byte {} of a {}-byte text: {}", from,
                                                   text.size(), pcre2_message(rc)));
    const PCRE2_SIZE* match = pcre2_get_ovector_pointer(data);
    if (match[1] > match[0]) {
      begin = match[0];
      end = match[1];
      return true;
    }
    // An empty match splits nothing (HF drops empty pieces); step over one character.
    from = match[0] + utf8_char_at(text, match[0]).length;
  }
  return false;
}

std::string Replacement::apply(std::string_view text, MatchScratch& scratch) const {
  std::string out;
  out.reserve(text.size());
  const auto replace_in = [&](std::string_view run) {
    size_t pos = 0, begin = 0, end = 0;
    while (pos < run.size()) {
      if (regex) {
        if (!regex->find(run, pos, begin, end, scratch)) break;
      } else {
        begin = run.find(literal, pos);
        if (begin == std::string_view::npos) break;
        end = begin + literal.size();
      }
      out.append(run.substr(pos, begin - pos));
      out += content;
      pos = end;
    }
    out.append(run.substr(pos));
  };
  if (!regex) {
    replace_in(text);
  } else {  // a pattern matches characters: ill-formed bytes are kept as they are
    for_each_utf8_run(text, [&](std::string_view run, bool valid) {
      if (valid) replace_in(run);
      else out.append(run);
    });
  }
  return out;
}

// ---- normalizers ----------------------------------------------------------------------------

bool have_unicode_normalization() {
#ifdef DING_HAVE_ICU
  return true;
#else
  return false;
#endif
}

const char* unicode_form_name(UnicodeForm form) {
  return form == UnicodeForm::nfc ? "NFC" : form == UnicodeForm::nfd ? "NFD" : form == UnicodeForm::nfkc ? "NFKC" : "NFKD";
}

namespace {

#ifdef DING_HAVE_ICU
const icu::Normalizer2& icu_normalizer(UnicodeForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == UnicodeForm::nfc    ? icu::Normalizer2::getNFCInstance(status)
                              : form == UnicodeForm::nfd  ? icu::Normalizer2::getNFDInstance(status)
                              : form == UnicodeForm::nfkc ? icu::Normalizer2::getNFKCInstance(status)
                                                          : icu::Normalizer2::getNFKDInstance(status);
  if (U_FAILURE(status)) throw Error(ErrorCode::internal, fmt::format("ICU normalizer unavailable: {}", u_errorName(status)));
  return *n;
}
#endif

// Normalizes the well-formed runs; ill-formed bytes (which no HF input can hold) pass as they are.
std::string unicode_normalize(UnicodeForm form, std::string_view text) {
#ifdef DING_HAVE_ICU
  const icu::Normalizer2& n = icu_normalizer(form);
  std::string out;
  out.reserve(text.size());
  for_each_utf8_run(text, [&](std::string_view run, bool valid) {
    if (!valid) return out.append(run), void();
    UErrorCode status = U_ZERO_ERROR;
    const icu::StringPiece piece(run.data(), int32_t(run.size()));
    if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return out.append(run), void();
    status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&out);
    n.normalizeUTF8(0, piece, sink, nullptr, status);
    if (U_FAILURE(status)) throw Error(ErrorCode::internal, fmt::format("ICU normalization failed: {}", u_errorName(status)));
  });
  return out;
#else
  (void)text;
  throw Error(ErrorCode::not_implemented, fmt::format("{} normalization needs ding built with ICU", unicode_form_name(form)));
#endif
}

}  // namespace

std::string normalize(const std::vector<Normalizer>& normalizers, std::string_view text, MatchScratch& scratch) {
  std::string s(text);
  for (const Normalizer& n : normalizers) {
    if (const auto* form = std::get_if<UnicodeForm>(&n)) s = unicode_normalize(*form, s);
    else if (const auto* prepend = std::get_if<Prepend>(&n)) s = s.empty() ? s : prepend->text + s;
    else s = std::get<Replacement>(n).apply(s, scratch);
  }
  return s;
}

}  // namespace ding::tok
