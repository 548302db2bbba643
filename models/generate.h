// generate: prompt in, tokens out, streamed. Prefill the prompt into sequence 0 of a Session,
// then sample and decode one token at a time until end of text, the token budget, or a stop string.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ding/models/sampler.h"
#include "ding/models/session.h"

namespace ding {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  bool stop_at_eos = true;
  std::vector<std::string> stop_strings;  // stop once the generated text contains one of these
};

enum class StopReason { eos, max_tokens, context_full, stop_string, callback };

struct GenerateResult {
  std::vector<Token> tokens;  // the generated tokens (the stop token included when it was EOS)
  StopReason reason = StopReason::max_tokens;
  int64_t prompt_tokens = 0;
  int64_t max_new_tokens = 0;  // after clamping to the context left after the prompt
  bool clamped = false;        // max_new_tokens was cut to fit the context
  double prefill_seconds = 0;
  double decode_seconds = 0;   // from the first sampled token to the last
};

const char* stop_reason_name(StopReason reason);

// Runs on sequence 0 of `session`, which is reset first. Throws Error(invalid_argument) when the
// prompt is empty or longer than the session's context. `on_token` returns false to stop.
GenerateResult generate(Session& session, Sampler& sampler, std::span<const Token> prompt, const GenerateOptions& options,
                        const std::function<bool(Token)>& on_token = {});

}  // namespace ding
