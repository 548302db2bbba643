// libFuzzer target: tokenizer.json. A file that loads must encode and decode a fixed text mixing
// scripts, digits, spaces, invalid UTF-8 and the GPT-2 / Llama special-token spellings; anything
// refused, at load or while encoding, must be a ding::Error.
#include <cstdint>
#include <string_view>

#include "ding/error.h"
#include "fuzz_files.h"
#include "tokenizer_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  using namespace std::string_view_literals;
  const auto path = fuzz::scratch() / "tokenizer.json";
  fuzz::write_file(path, fuzz::as_text(data, size));
  try {
    const Tokenizer t = Tokenizer::from_tokenizer_json(path.string());
    constexpr std::string_view text =
        "Hello  world!\n\t123 4567 — naïve café 日本語 ü\xcc\x88 \xff\xfe<|endoftext|><s> </s>  <0x41> \xe2\x96\x81x"sv;
    fuzz::check_tokenizer(t, text, {}, {});
    fuzz::check_tokenizer(t, text, {.add_special_tokens = false, .allow_special = false}, {});
  } catch (const Error&) {
  }
  return 0;
}
