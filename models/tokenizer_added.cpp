// Added tokens cut out of text before anything else sees it, with the semantics of HF's
// AddedVocabulary::find_matches: leftmost match, longest at one position, matches never
// overlapping; a match that is rejected (a special token when specials are not allowed, a
// single_word token inside a word) still consumes its text.
#include <algorithm>

#include "tokenizer_parts.h"

namespace ding::tok {

namespace {

// Start of the well-formed character that ends at `end`; npos at the start of the text or
// after an ill-formed byte.
size_t char_start_before(std::string_view text, size_t end) {
  size_t begin = end;
  while (begin > 0 && end - begin < 4) {
    --begin;
    if ((uint8_t(text[begin]) & 0xC0) != 0x80) break;
  }
  if (begin == end) return std::string_view::npos;
  const Utf8Char c = utf8_char_at(text, begin);
  if (c.problem || begin + c.length != end) return std::string_view::npos;
  return begin;
}

std::optional<char32_t> char_before(std::string_view text, size_t end) {
  const size_t begin = char_start_before(text, end);
  if (begin == std::string_view::npos) return std::nullopt;
  return code_point_at(text, begin);
}

std::optional<char32_t> char_after(std::string_view text, size_t begin) {
  if (begin >= text.size() || utf8_char_at(text, begin).problem) return std::nullopt;
  return code_point_at(text, begin);
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, std::string pattern) {
  if (pattern.empty()) return;  // HF ignores empty tokens
  entries_.push_back({std::move(pattern), &token});
  for (auto& list : by_first_) list.clear();
  for (uint32_t i = 0; i < entries_.size(); ++i) by_first_[uint8_t(entries_[i].pattern[0])].push_back(i);
  // Longest first, so the first pattern that matches at a position is the longest there;
  // stable, so of two equal patterns the first added wins.
  for (auto& list : by_first_)
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return entries_[a].pattern.size() > entries_[b].pattern.size(); });
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special,
                              const std::function<void(std::string_view, size_t)>& on_text,
                              const std::function<void(Token)>& on_token) const {
  size_t start_offset = 0;  // end of the last token taken: text before a match starts here
  size_t search = 0;
  while (search < text.size()) {
    const Entry* found = nullptr;
    size_t at = search;
    for (; at < text.size() && !found; ++at)
      for (uint32_t i : by_first_[uint8_t(text[at])])
        if (text.compare(at, entries_[i].pattern.size(), entries_[i].pattern) == 0) {
          found = &entries_[i];
          break;
        }
    if (!found) break;
    size_t start = --at, stop = at + found->pattern.size();
    search = stop;
    const AddedToken& t = *found->token;
    if (t.special && !allow_special) continue;
    if (t.single_word) {
      const auto before = char_before(text, start), after = char_after(text, stop);
      if ((before && is_word_char(*before)) || (after && is_word_char(*after))) continue;
    }
    if (t.lstrip) {
      size_t space_start = start;
      for (size_t b; (b = char_start_before(text, space_start)) != std::string_view::npos &&
                     is_white_space(code_point_at(text, b));)
        space_start = b;
      start = std::max(space_start, start_offset);
    }
    if (t.rstrip)
      while (auto c = char_after(text, stop)) {
        if (!is_white_space(*c)) break;
        stop += utf8_char_at(text, stop).length;
      }
    if (start_offset < start) on_text(text.substr(start_offset, start - start_offset), start_offset);
    on_token(t.id);
    start_offset = stop;
  }
  if (start_offset < text.size()) on_text(text.substr(start_offset), start_offset);
}

}  // namespace ding::tok
