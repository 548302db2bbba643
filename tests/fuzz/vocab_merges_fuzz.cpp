// libFuzzer target: GPT-2's vocab.json and merges.txt, given as one input split at its first NUL
// byte (JSON text holds none): the vocabulary before it, the merges after. A pair that loads must
// encode and decode a fixed text; anything refused must be a ding::Error.
#include <cstdint>
#include <string_view>

#include "ding/error.h"
#include "fuzz_files.h"
#include "tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  using namespace std::string_view_literals;
  const std::string_view input = fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  const auto vocab = fuzz::scratch() / "vocab.json", merges = fuzz::scratch() / "merges.txt";
  fuzz::write_file(vocab, input.substr(0, nul));
  fuzz::write_file(merges, nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));
  try {
    const Tokenizer t = Tokenizer::from_vocab_merges(vocab.string(), merges.string());
    constexpr std::string_view text = "Hello  world!\n\t123 — naïve 日本語 \xff\xfe<|endoftext|> the end"sv;
    fuzz::check_tokenizer(t, text, {}, {.stream_matches_decode = true});
  } catch (const Error&) {
  }
  return 0;
}
