// The BPE model: a piece becomes symbols (its bytes, or its characters with byte_fallback and
// unk for those outside the vocabulary), then merges apply lowest rank first and, within a
// rank, left to right — HF's BPE::merge_word and Word::merge_all.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ding/error.h"
#include "tokenizer_parts.h"

namespace ding::tok {

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // ▁

// Pieces longer than this are rare and would crowd the cache; they are re-merged each time.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kWordCacheCapacity = size_t(1) << 16;

// Quoted for a message; bytes that are not UTF-8 (a binary merges.txt) become U+FFFD instead of
// throwing the JSON library's own exception, which would name no file.
std::string json_quoted(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Bpe::Bpe(const std::unordered_map<std::string, Token>& vocabulary, const std::vector<Merge>& merges, Options options,
         const std::string& where, const std::function<std::string(size_t)>& where_merge)
    : options_(options) {
  vocab_.reserve(vocabulary.size());
  for (const auto& [spelling, id] : vocabulary) vocab_.emplace(spelling, id);
  const auto id_of = [&](std::string_view spelling) -> std::optional<Token> {
    auto it = vocab_.find(spelling);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  };

  if (options_.byte_level) {
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) {
      const auto id = id_of(alphabet.spelling[b]);
      if (!id)
        throw Error(ErrorCode::parse, fmt::format("{}: no token for byte 0x{:02X} (spelled {}); byte-level BPE needs all 256",
                                                  where, b, json_quoted(alphabet.spelling[b])));
      byte_token_[b] = *id;
    }
    if (options_.ignore_merges)
      for (const auto& [spelling, id] : vocab_)
        if (auto bytes = alphabet.bytes_of(spelling)) id_of_bytes_.emplace(std::move(*bytes), id);
  }
  fallback_token_.fill(-1);
  if (options_.byte_fallback)
    for (int b = 0; b < 256; ++b) fallback_token_[b] = id_of(fmt::format("<0x{:02X}>", b)).value_or(-1);

  merges_.reserve(merges.size());
  bool merge_across_metaspace = false;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto find = [&](const std::string& spelling, const char* role) {
      const auto id = id_of(spelling);
      if (!id)
        throw Error(ErrorCode::parse, fmt::format("{}: {} token {} of merge {} is not in the vocabulary", where_merge(i), role,
                                                  json_quoted(spelling), json_quoted(merges[i].left + " " + merges[i].right)));
      return *id;
    };
    const Token left = find(merges[i].left, "left");
    const Token right = find(merges[i].right, "right");
    const Token merged = find(merges[i].left + merges[i].right, "merged");
    // A repeated pair takes its last rank, as both HF and the original GPT-2 code do.
    merges_.insert_or_assign(pair_key(left, right), PairRank{int32_t(i), merged});
    if (merges[i].right.starts_with(kMetaspace) && !merges[i].left.ends_with(kMetaspace)) merge_across_metaspace = true;
  }
  cut_at_metaspace_ = !options_.byte_level && !merge_across_metaspace && id_of(kMetaspace).has_value();
}

void Bpe::encode(std::string_view piece, std::vector<Token>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {  // HF looks the whole piece up before any merging
    const StringMap& whole = options_.byte_level ? id_of_bytes_ : vocab_;
    if (auto it = whole.find(piece); it != whole.end()) return out.push_back(it->second);
  }
  if (!cut_at_metaspace_) return encode_word(piece, out);
  // Cut before each ▁ that follows another character: no merge can join across such a cut
  // (checked at load), and ▁ is in the vocabulary, so no unknown characters fuse across it.
  size_t word_start = 0;
  for (size_t pos = piece.find(kMetaspace, 1); pos != std::string_view::npos; pos = piece.find(kMetaspace, pos + 1)) {
    if (pos >= kMetaspace.size() && piece.substr(pos - kMetaspace.size(), kMetaspace.size()) == kMetaspace) continue;
    encode_word(piece.substr(word_start, pos - word_start), out);
    word_start = pos;
  }
  encode_word(piece.substr(word_start), out);
}

void Bpe::encode_word(std::string_view word, std::vector<Token>& out) const {
  if (options_.byte_level && word.size() == 1) return out.push_back(byte_token_[uint8_t(word[0])]);
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) return out.insert(out.end(), it->second.begin(), it->second.end()), void();
  }
  std::vector<Token> symbols;
  initial_symbols(word, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    // Clearing when full bounds memory and lets the cache follow a change of topic.
    if (cache_.size() >= kWordCacheCapacity) cache_.clear();
    cache_.emplace(word, std::move(symbols));
  }
}

void Bpe::initial_symbols(std::string_view word, std::vector<Token>& symbols) const {
  symbols.reserve(word.size());
  if (options_.byte_level) {
    for (char c : word) symbols.push_back(byte_token_[uint8_t(c)]);
    return;
  }
  // An unknown character waits: a following unknown one fuses into it (fuse_unk); it is
  // written when a known character or the end comes, as HF does (byte_fallback tokens pass it).
  bool unk_waiting = false;
  for (size_t pos = 0; pos < word.size();) {
    const Utf8Char c = utf8_char_at(word, pos);
    const std::string_view ch = word.substr(pos, c.problem ? 1 : c.length);  // an ill-formed byte is a character of its own
    pos += ch.size();
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (unk_waiting) symbols.push_back(*options_.unk);
      unk_waiting = false;
      symbols.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char b) { return fallback_token_[uint8_t(b)] >= 0; })) {
      for (char b : ch) symbols.push_back(fallback_token_[uint8_t(b)]);
      continue;
    }
    if (!options_.unk) continue;  // HF drops a character it has no token for
    if (unk_waiting && !options_.fuse_unk) symbols.push_back(*options_.unk);
    unk_waiting = true;
  }
  if (unk_waiting) symbols.push_back(*options_.unk);
}

// BPE over a doubly linked list of symbols with a heap of candidate merges ordered by
// (rank, position): O(n log n) even for a megabyte-long word. A candidate is stale when
// either of its symbols has since been merged; it is then skipped.
void Bpe::merge(std::vector<Token>& ids) const {
  struct Symbol {
    Token id;
    int32_t prev, next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank, left;  // left: index of the pair's first symbol
    Token left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  const int32_t n = int32_t(ids.size());
  if (n < 2) return;
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap;
  const auto consider = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Token a = symbols[left].id, b = symbols[symbols[left].next].id;
    auto it = merges_.find(pair_key(a, b));
    if (it == merges_.end()) return;
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
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace ding::tok
