#include "generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "ding/error.h"

namespace ding {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::eos: return "eos";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_full: return "context_full";
    case StopReason::stop_string: return "stop_string";
    case StopReason::callback: return "callback";
  }
  return "?";
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

GenerateResult generate(Session& session, Sampler& sampler, std::span<const Token> prompt, const GenerateOptions& options,
                        const std::function<bool(Token)>& on_token) {
  const int64_t context = session.max_tokens(), n_prompt = int64_t(prompt.size());
  if (n_prompt == 0) throw Error(ErrorCode::invalid_argument, "generate: the prompt is empty");
  if (n_prompt > context)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("generate: the prompt has {} tokens but the context holds {}", n_prompt, context));
  if (options.max_new_tokens < 0)
    throw Error(ErrorCode::invalid_argument, fmt::format("generate: max_new_tokens must be ≥ 0, got {}", options.max_new_tokens));
  GenerateResult result;
  result.prompt_tokens = n_prompt;
  // The last sampled token is never fed back, so the context bounds prompt + new − 1 positions.
  const int64_t room = context - n_prompt + 1;
  result.max_new_tokens = std::min(options.max_new_tokens, room);
  result.clamped = result.max_new_tokens < options.max_new_tokens;
  if (result.max_new_tokens == 0) return result;

  // Any of the model's end ids stops it (Llama-3 instruct models end turns with one of two).
  std::vector<Token> eos;
  if (options.stop_at_eos) eos = session.model().config().reachable_eos();
  std::vector<Token> history(prompt.begin(), prompt.end());
  std::string text;  // generated text, for stop strings
  size_t longest_stop = 0;
  for (const std::string& s : options.stop_strings) longest_stop = std::max(longest_stop, s.size());
  // Only stop strings need text; a TextStream decodes each token after the ones before it.
  std::optional<TextStream> stream;
  if (longest_stop > 0) stream.emplace(session.model().tokenizer());

  session.reset(0);
  const double t0 = now_seconds();
  Tensor logits = session.prefill(0, prompt);
  const double t1 = now_seconds();
  result.prefill_seconds = t1 - t0;
  result.reason = StopReason::max_tokens;
  while (true) {
    const Token next = sampler.sample_one(session.stream(), logits, history);
    result.tokens.push_back(next);
    history.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      result.reason = StopReason::eos;
      break;
    }
    if (on_token && !on_token(next)) {
      result.reason = StopReason::callback;
      break;
    }
    if (longest_stop > 0) {
      const size_t before = text.size();
      text += stream->push(next);  // in context: a SentencePiece word keeps its leading space
      bool stop = false;
      for (const std::string& s : options.stop_strings)  // only matches that end in the new bytes
        if (!s.empty() && text.find(s, before >= s.size() ? before - s.size() + 1 : 0) != std::string::npos) stop = true;
      if (stop) {
        result.reason = StopReason::stop_string;
        break;
      }
    }
    if (int64_t(result.tokens.size()) >= result.max_new_tokens) {
      result.reason = result.clamped ? StopReason::context_full : StopReason::max_tokens;
      break;
    }
    const Token step[1] = {next};
    logits = session.decode(step);
  }
  result.decode_seconds = now_seconds() - t1;
  return result;
}

}  // namespace ding
