#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "ding/error.h"

namespace ding {

namespace {

using nlohmann::json;

// The pre-tokenization regex of GPT-2 (openai/gpt-2 encoder.py), also what HF's ByteLevel
// pre-tokenizer applies when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

constexpr const char* kEndOfText = "<|endoftext|>";

// Ids beyond this are a corrupt file, not a vocabulary (the largest real ones are ~260k);
// the bound keeps a bad id from sizing a multi-gigabyte table.
constexpr int64_t kMaxTokenId = int64_t(1) << 24;

// Words longer than this are rare and would crowd the cache; they are re-merged each time.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kWordCacheCapacity = size_t(1) << 16;

// ---- UTF-8 ----------------------------------------------------------------------------------

// The well-formed UTF-8 character at text[pos] (Unicode Table 3-7), or why there is none.
struct Utf8Char {
  int length = 1;                 // bytes of the character, or of the malformed prefix when problem is set
  const char* problem = nullptr;  // null when well formed
  bool truncated = false;         // the text ended inside a character that could still complete
};

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

// Length of the longest prefix of text that is well-formed UTF-8.
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

// Calls on_run(run, valid) for the alternating runs of well-formed and malformed UTF-8.
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

// ---- the byte-level alphabet ----------------------------------------------------------------

// GPT-2 spells every byte as a printable character so that vocabulary files are text: the
// printable bytes ! to ~, ¡ to ¬ and ® to ÿ stand for themselves, the other 68 (controls,
// space, DEL, NBSP, soft hyphen) become U+0100, U+0101, ... in byte order. A space is "Ġ".
struct ByteLevelAlphabet {
  std::array<std::string, 256> spelling;     // byte → its character, UTF-8 encoded
  std::unordered_map<char32_t, uint8_t> byte_of;

  ByteLevelAlphabet() {
    char32_t next_stand_in = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? char32_t(b) : next_stand_in++;
      append_utf8(spelling[b], cp);
      byte_of[cp] = uint8_t(b);
    }
  }

  // The raw bytes a vocabulary spelling stands for. A character outside the alphabet (never in
  // GPT-2's files) keeps its own UTF-8 bytes, as the HF ByteLevel decoder does.
  std::string bytes_of(std::string_view spelling_utf8) const {
    std::string bytes;
    size_t pos = 0;
    while (pos < spelling_utf8.size()) {
      const int n = utf8_char_at(spelling_utf8, pos).length;
      char32_t cp = uint8_t(spelling_utf8[pos]) & (n == 1 ? 0x7F : n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
      for (int i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(spelling_utf8[pos + i]) & 0x3F);
      auto it = byte_of.find(cp);
      if (it != byte_of.end()) bytes += char(it->second);
      else bytes.append(spelling_utf8.substr(pos, n));
      pos += n;
    }
    return bytes;
  }
};

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

// ---- regex ----------------------------------------------------------------------------------

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// A compiled pre-tokenization pattern. The code is shared by all threads; each encode call
// brings its own match data.
class SplitRegex {
 public:
  // `literal`: the pattern is a plain string (HF Split with {"String": ...}).
  SplitRegex(const std::string& pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                          &error_offset, nullptr);
    if (!code_)
      throw Error(ErrorCode::parse, fmt::format("{}: pattern {} does not compile at offset {}: {}", where,
                                                json(pattern).dump(), error_offset, pcre2_message(error)));
    // JIT is an optimisation: a PCRE2 built without it still matches, only slower.
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~SplitRegex() { pcre2_code_free(code_); }
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;
  MatchData new_match_data() const {
    MatchData data(pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    if (!data) throw Error(ErrorCode::out_of_memory, "tokenizer: cannot allocate PCRE2 match data");
    return data;
  }

  // HF's "Isolated" split: every match is a piece and so is every stretch between matches.
  // `text` must be valid UTF-8 (checked by the caller, hence PCRE2_NO_UTF_CHECK).
  template <class OnPiece>
  void split(std::string_view text, pcre2_match_data* data, OnPiece&& on_piece) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t gap_start = 0, search_from = 0;
    while (search_from < text.size()) {
      const int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data, nullptr)
                          : pcre2_match(code_, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0)
        throw Error(ErrorCode::internal, fmt::format("tokenizer: pre-tokenizer regex failed at byte {} of a {}-byte piece: {}",
                                                     search_from, text.size(), pcre2_message(rc)));
      const PCRE2_SIZE* match = pcre2_get_ovector_pointer(data);
      const size_t begin = match[0], end = match[1];
      if (begin == end) {  // an empty match splits nothing; step over one character
        search_from = begin + utf8_char_at(text, begin).length;
        continue;
      }
      if (begin > gap_start) on_piece(text.substr(gap_start, begin - gap_start));
      on_piece(text.substr(begin, end - begin));
      gap_start = search_from = end;
    }
    if (gap_start < text.size()) on_piece(text.substr(gap_start));
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// ---- files ----------------------------------------------------------------------------------

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::parse, fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

struct MergeSpelling {
  std::string left, right;
};

struct AddedToken {
  std::string content;
  Token id = 0;
  bool special = true;
};

}  // namespace

// ---- the tokenizer --------------------------------------------------------------------------

struct Tokenizer::Impl {
  // One pre-tokenization step. Split contributes a regex; ByteLevel contributes its prefix
  // space and (with use_regex) the GPT-2 regex. Steps apply in file order to every piece.
  struct Step {
    std::unique_ptr<SplitRegex> regex;  // null: the step does not split
    bool add_prefix_space = false;
  };

  struct Merge {
    int32_t rank;  // position in the merges list; lower merges first
    Token merged;
  };

  std::vector<std::string> token_bytes;   // id → raw bytes
  std::vector<bool> token_defined;        // ids may have gaps
  StringMap<Token> id_of_spelling;        // vocabulary spelling or added-token content → id
  StringMap<Token> id_of_bytes;           // raw bytes → id, for ignore_merges
  std::array<Token, 256> byte_token{};    // the single-byte tokens every piece starts from
  std::unordered_map<uint64_t, Merge> merges;  // key: left id << 32 | right id
  std::vector<AddedToken> added;
  std::vector<Step> steps;
  bool ignore_merges = false;  // a piece that is itself a token skips BPE (Llama-3 style files)
  std::optional<Token> eos;

  mutable std::mutex cache_mutex;
  mutable StringMap<std::vector<Token>> word_cache;  // piece bytes → its BPE tokens

  static uint64_t pair_key(Token left, Token right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

  void define_token(Token id, std::string bytes) {
    if (size_t(id) >= token_bytes.size()) {
      token_bytes.resize(size_t(id) + 1);
      token_defined.resize(size_t(id) + 1);
    }
    id_of_bytes.insert_or_assign(bytes, id);
    token_bytes[id] = std::move(bytes);
    token_defined[id] = true;
  }

  // vocab: {spelling: id}; `where` names the file and field for errors.
  void load_vocab(const json& vocab, const std::string& where) {
    if (!vocab.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: vocabulary is not a JSON object but {}", where, vocab.type_name()));
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    for (const auto& [spelling, value] : vocab.items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokenId)
        throw Error(ErrorCode::parse, fmt::format("{}: token {} has id {}; ids are integers in [0, {})", where,
                                                  json(spelling).dump(), value.dump(), kMaxTokenId));
      const Token id = value.get<Token>();
      if (size_t(id) < token_defined.size() && token_defined[id]) {
        const auto other = std::find_if(id_of_spelling.begin(), id_of_spelling.end(), [&](const auto& e) { return e.second == id; });
        throw Error(ErrorCode::parse, fmt::format("{}: id {} is given to both {} and {}", where, id, json(other->first).dump(),
                                                  json(spelling).dump()));
      }
      id_of_spelling[spelling] = id;
      define_token(id, alphabet.bytes_of(spelling));
    }
    for (int b = 0; b < 256; ++b) {
      auto it = id_of_spelling.find(alphabet.spelling[b]);
      if (it == id_of_spelling.end())
        throw Error(ErrorCode::parse, fmt::format("{}: no token for byte 0x{:02X} (spelled {}); byte-level BPE needs all 256",
                                                  where, b, json(alphabet.spelling[b]).dump()));
      byte_token[b] = it->second;
    }
  }

  // merges in rank order; locate(i) names entry i in its file for errors.
  void load_merges(const std::vector<MergeSpelling>& list, const std::function<std::string(size_t)>& locate) {
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const auto find = [&](const std::string& spelling, const char* role) {
        auto it = id_of_spelling.find(spelling);
        if (it == id_of_spelling.end())
          throw Error(ErrorCode::parse, fmt::format("{}: {} token {} of merge {} is not in the vocabulary", locate(i), role,
                                                    json(spelling).dump(), json(list[i].left + " " + list[i].right).dump()));
        return it->second;
      };
      const Token left = find(list[i].left, "left");
      const Token right = find(list[i].right, "right");
      const Token merged = find(list[i].left + list[i].right, "merged");
      // A repeated pair takes its last rank, as both HF and the original GPT-2 code do.
      merges.insert_or_assign(pair_key(left, right), Merge{int32_t(i), merged});
    }
  }

  void add_token(AddedToken token) {
    // The added token's content is what decode prints, even if the vocabulary spells that id
    // differently; HF resolves the same clash the same way.
    define_token(token.id, token.content);
    id_of_spelling.insert_or_assign(token.content, token.id);
    if (token.content == kEndOfText) eos = token.id;
    added.push_back(std::move(token));
  }

  // ---- encode ----

  // Calls on_text for stretches of ordinary text and on_token for matched added tokens,
  // matching leftmost first and, at one position, longest first.
  template <class OnText, class OnToken>
  void split_added_tokens(std::string_view text, bool allow_special, OnText&& on_text, OnToken&& on_token) const {
    std::vector<const AddedToken*> active;
    std::vector<size_t> next_at;  // next occurrence at or after `pos` of each active token
    for (const AddedToken& t : added)
      if (!t.special || allow_special) {
        active.push_back(&t);
        next_at.push_back(text.find(t.content));
      }
    size_t pos = 0;
    while (true) {
      size_t best = active.size();
      for (size_t i = 0; i < active.size(); ++i) {
        if (next_at[i] == std::string_view::npos) continue;
        if (best == active.size() || next_at[i] < next_at[best] ||
            (next_at[i] == next_at[best] && active[i]->content.size() > active[best]->content.size()))
          best = i;
      }
      if (best == active.size()) break;
      const size_t at = next_at[best];
      if (at > pos) on_text(text.substr(pos, at - pos));
      on_token(active[best]->id);
      pos = at + active[best]->content.size();
      for (size_t i = 0; i < active.size(); ++i)
        if (next_at[i] != std::string_view::npos && next_at[i] < pos) next_at[i] = text.find(active[i]->content, pos);
    }
    if (pos < text.size()) on_text(text.substr(pos));
  }

  // Applies steps[step..] to a piece, then BPE. A regex step splits only the piece's runs of
  // valid UTF-8: the regexes are defined on characters, and no reference tokenizer sees invalid
  // bytes (Python strings cannot hold them), so each run of them stays one piece — our choice.
  void pre_tokenize(std::string_view piece, size_t step, std::vector<SplitRegex::MatchData>& match_data,
                    std::vector<Token>& out) const {
    if (step == steps.size()) return bpe(piece, out);
    std::string prefixed;
    if (steps[step].add_prefix_space && piece.front() != ' ') {
      prefixed = " ";
      prefixed += piece;
      piece = prefixed;
    }
    if (!steps[step].regex) return pre_tokenize(piece, step + 1, match_data, out);
    const auto next_step = [&](std::string_view sub) { pre_tokenize(sub, step + 1, match_data, out); };
    for_each_utf8_run(piece, [&](std::string_view run, bool valid) {
      if (valid) steps[step].regex->split(run, match_data[step].get(), next_step);
      else next_step(run);
    });
  }

  void bpe(std::string_view piece, std::vector<Token>& out) const {
    if (piece.size() == 1) {
      out.push_back(byte_token[uint8_t(piece[0])]);
      return;
    }
    const bool cacheable = piece.size() <= kMaxCachedWordBytes;
    if (cacheable) {
      std::lock_guard lock(cache_mutex);
      auto it = word_cache.find(piece);
      if (it != word_cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t first = out.size();
    auto whole = ignore_merges ? id_of_bytes.find(piece) : id_of_bytes.end();
    if (whole != id_of_bytes.end()) out.push_back(whole->second);
    else merge_bytes(piece, out);
    if (cacheable) {
      std::lock_guard lock(cache_mutex);
      // Clearing when full bounds memory and lets the cache follow a change of topic.
      if (word_cache.size() >= kWordCacheCapacity) word_cache.clear();
      word_cache.emplace(piece, std::vector<Token>(out.begin() + first, out.end()));
    }
  }

  // BPE over a doubly linked list of symbols with a heap of candidate merges ordered by
  // (rank, position): O(n log n) even for a megabyte-long word. A candidate is stale when
  // either of its symbols has since been merged; it is then skipped.
  void merge_bytes(std::string_view piece, std::vector<Token>& out) const {
    struct Symbol {
      Token id;
      int32_t prev, next;  // -1 at the ends
    };
    struct Candidate {
      int32_t rank, left;  // left: index of the pair's first symbol
      Token left_id, right_id, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    const int32_t n = int32_t(piece.size());
    std::vector<Symbol> symbols(n);
    for (int32_t i = 0; i < n; ++i) symbols[i] = {byte_token[uint8_t(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
    std::vector<Candidate> heap;
    const auto consider = [&](int32_t left) {
      if (left < 0 || symbols[left].next < 0) return;
      const Token a = symbols[left].id, b = symbols[symbols[left].next].id;
      auto it = merges.find(pair_key(a, b));
      if (it == merges.end()) return;
      heap.push_back({it->second.rank, left, a, b, it->second.merged});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = symbols[c.left];
      if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
      Symbol& right = symbols[left.next];
      left.id = c.merged;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.left;
      right.id = -1;  // merged away: every candidate that names it is now stale
      consider(left.prev);
      consider(c.left);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
  }

  void check_id(Token id, const char* what) const {
    if (id < 0 || size_t(id) >= token_bytes.size() || !token_defined[id])
      throw Error(ErrorCode::invalid_argument, fmt::format("{}: token id {} is not in the vocabulary (ids 0..{})", what, id,
                                                           int64_t(token_bytes.size()) - 1));
  }
};

namespace {

std::vector<MergeSpelling> parse_merges_txt(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::vector<MergeSpelling> merges;
  std::string line;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
      throw Error(ErrorCode::parse, fmt::format("{}:{}: a merge is two tokens separated by one space, not {}", path,
                                                line_number, json(line).dump()));
    merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  return merges;
}

// merges.txt line numbers, for errors: entry i is on line i + 1 + (lines skipped before it).
// Recounting here keeps parse_merges_txt simple; it only runs when a merge is bad.
std::string merges_txt_location(const std::string& path, size_t index) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  size_t seen = 0;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    if (seen++ == index) return fmt::format("{}:{}", path, line_number);
  }
  return path;
}

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::not_implemented, fmt::format("{}: {} is not supported", path, what));
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : std::string("(no type)");
}

// HF pre_tokenizer JSON → steps; `field` names the place for errors ("pre_tokenizer.pretokenizers[0]").
void parse_pre_tokenizer(const json& j, const std::string& path, const std::string& field,
                         std::vector<Tokenizer::Impl::Step>& steps, int& byte_level_steps) {
  const std::string type = type_of(j);
  const auto flag = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean())
      throw Error(ErrorCode::parse, fmt::format("{}: {}.{} is not a boolean but {}", path, field, key, j[key].dump()));
    return j[key].get<bool>();
  };
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw Error(ErrorCode::parse, fmt::format("{}: {} is a Sequence without a \"pretokenizers\" array", path, field));
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(j["pretokenizers"][i], path, fmt::format("{}.pretokenizers[{}]", field, i), steps, byte_level_steps);
  } else if (type == "ByteLevel") {
    Tokenizer::Impl::Step step;
    step.add_prefix_space = flag("add_prefix_space", true);  // HF's default when the key is absent
    if (flag("use_regex", true)) step.regex = std::make_unique<SplitRegex>(kGpt2Pattern, false, path + ": " + field);
    steps.push_back(std::move(step));
    ++byte_level_steps;
  } else if (type == "Split") {
    const json& pattern = j.contains("pattern") ? j["pattern"] : json();
    const bool is_regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string();
    const bool is_string = pattern.is_object() && pattern.contains("String") && pattern["String"].is_string();
    if (!is_regex && !is_string)
      throw Error(ErrorCode::parse, fmt::format("{}: {}.pattern is not {{\"Regex\": ...}} or {{\"String\": ...}} but {}", path,
                                                field, pattern.dump()));
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") unsupported(path, fmt::format("{}.behavior \"{}\" (only \"Isolated\")", field, behavior));
    if (flag("invert", false)) unsupported(path, fmt::format("{}.invert true", field));
    Tokenizer::Impl::Step step;
    step.regex = std::make_unique<SplitRegex>(pattern[is_regex ? "Regex" : "String"].get<std::string>(), is_string,
                                              path + ": " + field + ".pattern");
    steps.push_back(std::move(step));
  } else {
    unsupported(path, fmt::format("{}.type \"{}\" (ding supports ByteLevel, Split and Sequence of them)", field, type));
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path json_file = fs::path(dir) / "tokenizer.json";
  if (fs::exists(json_file)) return from_tokenizer_json(json_file.string());
  const fs::path vocab = fs::path(dir) / "vocab.json", merges = fs::path(dir) / "merges.txt";
  if (fs::exists(vocab) && fs::exists(merges)) return from_vocab_merges(vocab.string(), merges.string());
  throw Error(ErrorCode::io, fmt::format("{}: no tokenizer.json, and no vocab.json + merges.txt ({} is missing)", dir,
                                         fs::exists(vocab) ? "merges.txt" : "vocab.json"));
}

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  auto impl = std::make_unique<Impl>();
  impl->load_vocab(read_json(vocab_json), vocab_json);
  impl->load_merges(parse_merges_txt(merges_txt), [&](size_t i) { return merges_txt_location(merges_txt, i); });
  // GPT-2's regex with no prefix space: what GPT2Tokenizer and GPT2TokenizerFast do by default.
  Impl::Step byte_level;
  byte_level.regex = std::make_unique<SplitRegex>(kGpt2Pattern, false, "GPT-2 pattern");
  impl->steps.push_back(std::move(byte_level));
  if (auto it = impl->id_of_spelling.find(kEndOfText); it != impl->id_of_spelling.end())
    impl->add_token({kEndOfText, it->second, true});
  return Tokenizer(std::move(impl));
}

namespace {

std::unique_ptr<Tokenizer::Impl> load_tokenizer_json(const std::string& path) {
  const json file = read_json(path);
  if (!file.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: not a JSON object", path));
  if (!file.contains("model") || !file["model"].is_object())
    throw Error(ErrorCode::parse, fmt::format("{}: no \"model\" object", path));
  const json& model = file["model"];
  const std::string model_type = model.value("type", std::string("BPE"));  // old files omit it
  if (model_type != "BPE") unsupported(path, fmt::format("model.type \"{}\" (ding supports BPE)", model_type));
  if (model.contains("dropout") && !model["dropout"].is_null())
    unsupported(path, fmt::format("model.dropout {} (encoding would not be deterministic)", model["dropout"].dump()));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      unsupported(path, fmt::format("model.{} {}", affix, model[affix].dump()));
  if (file.contains("normalizer") && !file["normalizer"].is_null())
    unsupported(path, fmt::format("normalizer \"{}\"", type_of(file["normalizer"])));

  auto impl = std::make_unique<Tokenizer::Impl>();
  if (!model.contains("vocab")) throw Error(ErrorCode::parse, fmt::format("{}: model has no \"vocab\"", path));
  impl->load_vocab(model["vocab"], path + ": model.vocab");

  const json& merges_json = model.contains("merges") ? model["merges"] : json::array();
  if (!merges_json.is_array()) throw Error(ErrorCode::parse, fmt::format("{}: model.merges is not an array", path));
  std::vector<MergeSpelling> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const json& m = merges_json[i];
    // Two spellings appear in the wild: "a b" (older files) and ["a", "b"] (newer, which also
    // allows tokens that contain a space).
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space != std::string::npos && space > 0 && space + 1 < s.size() && s.find(' ', space + 1) == std::string::npos) {
        merges.push_back({s.substr(0, space), s.substr(space + 1)});
        continue;
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back({m[0].get<std::string>(), m[1].get<std::string>()});
      continue;
    }
    throw Error(ErrorCode::parse, fmt::format("{}: model.merges[{}] is not \"a b\" or [\"a\", \"b\"] but {}", path, i, m.dump()));
  }
  impl->load_merges(merges, [&](size_t i) { return fmt::format("{}: model.merges[{}]", path, i); });
  if (model.contains("ignore_merges") && model["ignore_merges"].is_boolean()) impl->ignore_merges = model["ignore_merges"].get<bool>();

  if (!file.contains("pre_tokenizer") || file["pre_tokenizer"].is_null())
    unsupported(path, "a BPE without a pre_tokenizer (ding supports byte-level BPE only)");
  int byte_level_steps = 0;
  parse_pre_tokenizer(file["pre_tokenizer"], path, "pre_tokenizer", impl->steps, byte_level_steps);
  if (byte_level_steps != 1)
    unsupported(path, fmt::format("a pre_tokenizer with {} ByteLevel steps (ding needs exactly one)", byte_level_steps));

  const json& added = file.contains("added_tokens") && !file["added_tokens"].is_null() ? file["added_tokens"] : json::array();
  if (!added.is_array()) throw Error(ErrorCode::parse, fmt::format("{}: added_tokens is not an array", path));
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= kMaxTokenId || !t.contains("content") || !t["content"].is_string() ||
        t["content"].get<std::string>().empty())
      throw Error(ErrorCode::parse, fmt::format("{}: added_tokens[{}] needs an id in [0, {}) and a non-empty content, not {}",
                                                path, i, kMaxTokenId, t.dump()));
    impl->add_token({t["content"].get<std::string>(), t["id"].get<Token>(), t.value("special", false)});
  }
  return impl;
}

}  // namespace

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  // The checks below name the usual mistakes; this catches a field of an unexpected JSON type
  // that they do not look at (e.g. "special": "yes").
  try {
    return Tokenizer(load_tokenizer_json(path));
  } catch (const json::exception& e) {
    throw Error(ErrorCode::parse, fmt::format("{}: a field has the wrong JSON type: {}", path, e.what()));
  }
}


std::vector<Token> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& m = *impl_;
  if (options.strict_utf8) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid < text.size()) {
      const Utf8Char bad = utf8_char_at(text, valid);
      std::string bytes;
      for (size_t i = valid; i < text.size() && i < valid + size_t(bad.length); ++i)
        bytes += fmt::format("{}{:02X}", i > valid ? " " : "", uint8_t(text[i]));
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("encode: invalid UTF-8 at byte offset {}: {} (bytes {})", valid, bad.problem, bytes));
    }
  }
  std::vector<SplitRegex::MatchData> match_data;
  for (const auto& step : m.steps)
    match_data.push_back(step.regex ? step.regex->new_match_data() : SplitRegex::MatchData(nullptr, &pcre2_match_data_free));

  std::vector<Token> out;
  out.reserve(text.size() / 3);
  const auto encode_text = [&](std::string_view segment) { m.pre_tokenize(segment, 0, match_data, out); };
  m.split_added_tokens(text, options.allow_special, encode_text, [&](Token id) { out.push_back(id); });
  return out;
}

std::string Tokenizer::decode(std::span<const Token> ids) const {
  std::string text;
  for (Token id : ids) {
    impl_->check_id(id, "decode");
    text += impl_->token_bytes[id];
  }
  return text;
}

std::string Tokenizer::decode(Token id) const { return decode(std::span<const Token>(&id, 1)); }

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->token_bytes.size()); }

std::optional<Token> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->id_of_spelling.find(token);
  if (it == impl_->id_of_spelling.end()) return std::nullopt;
  return it->second;
}

Token Tokenizer::eos() const {
  if (!impl_->eos)
    throw Error(ErrorCode::invalid_argument,
                "tokenizer: no end-of-text token (the vocabulary has no <|endoftext|>; the model must name one with set_eos)");
  return *impl_->eos;
}

void Tokenizer::set_eos(Token id) {
  impl_->check_id(id, "set_eos");
  impl_->eos = id;
}

std::string TextStream::push(Token id) {
  pending_ += tokenizer_->decode(id);
  // Emit everything up to the last character that might still be completed by later bytes.
  size_t ready = 0;
  while (ready < pending_.size()) {
    const Utf8Char c = utf8_char_at(pending_, ready);
    if (c.truncated) break;
    ready += c.problem ? 1 : c.length;  // a byte that can never be valid goes out as it is
  }
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string TextStream::flush() { return std::exchange(pending_, std::string()); }

}  // namespace ding
