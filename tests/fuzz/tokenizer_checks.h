// What every loaded tokenizer must do with any text, for the tokenizer fuzz targets: encode gives
// ids inside the vocabulary, those ids decode, a TextStream fed them one by one passes every byte
// on, and, where the caller knows the file promises it, decode gives back the text exactly.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "ding/models/tokenizer.h"

namespace ding::fuzz {

struct TokenizerChecks {
  bool stream_matches_decode = false;  // TextStream's text == decode(ids) (every decoder but Strip with stop > 0)
  bool round_trip = false;             // decode(encode(text)) == text (byte-level files without a normalizer)
};

inline void check_tokenizer(const Tokenizer& t, std::string_view text, const EncodeOptions& options, TokenizerChecks checks) {
  const std::vector<Token> ids = t.encode(text, options);
  for (Token id : ids)
    if (id < 0 || id >= t.vocab_size()) __builtin_trap();
  const std::string decoded = t.decode(ids);
  TextStream stream(t);
  std::string streamed;
  for (Token id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (checks.stream_matches_decode && streamed != decoded) __builtin_trap();
  if (checks.round_trip && decoded != text) __builtin_trap();
  for (Token id : ids) (void)t.decode(id);
  (void)t.decode(ids, {.skip_special = true});
  (void)t.longest_token_bytes();
  (void)t.token_id(text.substr(0, 16));
}

}  // namespace ding::fuzz
