// Pre-tokenizers: Split (with each HF SplitDelimiterBehavior), Metaspace and ByteLevel, applied
// in file order to every piece. Digits is parsed into a Split on \p{N}.
#include <type_traits>

#include "tokenizer_parts.h"

namespace ding::tok {

namespace {

// Regroups the alternating non-match / match ranges of a text as HF's NormalizedString::split
// does for each behavior, streaming: at most one range is held back. emit(begin, end).
template <class Emit>
class RangeGrouper {
 public:
  RangeGrouper(SplitBehavior behavior, Emit& emit) : behavior_(behavior), emit_(emit) {}

  void push(size_t begin, size_t end, bool match) {
    switch (behavior_) {
      case SplitBehavior::isolated:
        emit_(begin, end);
        break;
      case SplitBehavior::removed:
        if (!match) emit_(begin, end);
        break;
      case SplitBehavior::merged_with_previous:  // a match joins a non-match just before it
        if (match && held_ && !held_match_) held_end_ = end;
        else hold(begin, end);
        held_match_ = match;
        break;
      case SplitBehavior::merged_with_next:  // a match joins a non-match just after it
        if (held_ && held_match_ && !match) {
          emit_(held_begin_, end);
          held_ = false;
        } else if (match) {
          hold(begin, end);
          held_match_ = true;
        } else {
          emit_(begin, end);
        }
        break;
      case SplitBehavior::contiguous:  // neighbours of the same kind join
        if (held_ && held_match_ == match) held_end_ = end;
        else hold(begin, end);
        held_match_ = match;
        break;
    }
  }

  void finish() {
    if (held_) emit_(held_begin_, held_end_);
    held_ = false;
  }

 private:
  void hold(size_t begin, size_t end) {
    finish();
    held_ = true;
    held_begin_ = begin;
    held_end_ = end;
  }

  SplitBehavior behavior_;
  Emit& emit_;
  bool held_ = false, held_match_ = false;
  size_t held_begin_ = 0, held_end_ = 0;
};

// Splits text at the matches find(from, begin, end) reports. Ill-formed UTF-8 is no text a
// pattern is defined on (no HF input can hold it): each run of it is a piece of its own.
template <class Find, class OnPiece>
void split_text(std::string_view text, SplitBehavior behavior, bool invert, Find&& find, OnPiece&& on_piece) {
  size_t run_offset = 0;
  for_each_utf8_run(text, [&](std::string_view run, bool valid) {
    const size_t offset = run_offset;
    run_offset += run.size();
    if (!valid) return on_piece(run, offset);
    auto emit = [&](size_t begin, size_t end) { on_piece(run.substr(begin, end - begin), offset + begin); };
    RangeGrouper<decltype(emit)> grouper(behavior, emit);
    size_t pos = 0, begin = 0, end = 0;
    while (pos < run.size() && find(run, pos, begin, end)) {
      if (begin > pos) grouper.push(pos, begin, invert);
      grouper.push(begin, end, !invert);
      pos = end;
    }
    if (pos < run.size()) grouper.push(pos, run.size(), invert);
    grouper.finish();
  });
}

void run_steps(const std::vector<PreTokenizerStep>& steps, size_t index, std::string_view piece, bool at_text_start,
               MatchScratch& scratch, const std::function<void(std::string_view)>& on_piece) {
  if (index == steps.size()) return on_piece(piece);
  // A sub-piece still begins the text when it begins this piece.
  const auto next = [&](std::string_view sub, size_t offset) {
    run_steps(steps, index + 1, sub, at_text_start && offset == 0, scratch, on_piece);
  };
  const auto find_regex = [&](const Regex& regex) {
    return [&](std::string_view text, size_t from, size_t& begin, size_t& end) {
      return regex.find(text, from, begin, end, scratch);
    };
  };
  std::visit(
      [&](const auto& step) {
        using Step = std::decay_t<decltype(step)>;
        if constexpr (std::is_same_v<Step, SplitStep>) {
          split_text(piece, step.behavior, step.invert, find_regex(*step.pattern), next);
        } else if constexpr (std::is_same_v<Step, ByteLevelStep>) {
          std::string prefixed;
          std::string_view text = piece;
          if (step.add_prefix_space && piece.front() != ' ') {
            prefixed = " ";
            prefixed += piece;
            text = prefixed;
          }
          if (step.gpt2_split) split_text(text, SplitBehavior::isolated, false, find_regex(*step.gpt2_split), next);
          else next(text, 0);
        } else {  // Metaspace
          std::string text;
          text.reserve(piece.size() + 8);
          for (char c : piece) {
            if (c == ' ') text += step.replacement;
            else text += c;
          }
          const bool prepend = !text.starts_with(step.replacement) &&
                               (step.prepend_scheme == PrependScheme::always ||
                                (step.prepend_scheme == PrependScheme::first && at_text_start));
          if (prepend) text.insert(0, step.replacement);
          if (!step.split) return next(text, 0);
          const std::string_view marker = step.replacement;
          split_text(text, SplitBehavior::merged_with_next, false,
                     [&](std::string_view t, size_t from, size_t& begin, size_t& end) {
                       begin = t.find(marker, from);
                       end = begin + marker.size();
                       return begin != std::string_view::npos;
                     },
                     next);
        }
      },
      steps[index]);
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view segment, bool at_text_start,
                  MatchScratch& scratch, const std::function<void(std::string_view)>& on_piece) {
  if (!segment.empty()) run_steps(steps, 0, segment, at_text_start, scratch, on_piece);
}

}  // namespace ding::tok
