// libFuzzer target: encode and decode round trips through the committed tokenizers (GPT-2's
// vocab.json + merges.txt, and the tokenizer.json files of Llama 3, Llama 2, Mistral, Qwen2 and
// an SPM vocabulary with unk). The first byte picks the tokenizer and the encode options, the rest
// is the text (any bytes: invalid UTF-8 is kept, not refused). Every tokenizer: ids in range and a
// TextStream that passes decode's bytes on; the byte-level files without a normalizer (GPT-2,
// Llama 3): decode(encode(text)) == text. The text's bytes, read as ids, must decode as well
// (ids past the vocabulary decode to nothing).
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "ding/error.h"
#include "fuzz_files.h"
#include "tokenizer_checks.h"

namespace {

struct Loaded {
  ding::Tokenizer tokenizer;
  bool round_trip;
};

std::vector<Loaded> load_all() {
  using ding::Tokenizer;
  const auto data = ding::fuzz::kData, tok = data / "tokenizers";
  std::vector<Loaded> all;
  all.push_back({Tokenizer::from_vocab_merges((data / "gpt2" / "vocab.json").string(), (data / "gpt2" / "merges.txt").string()), true});
  all.push_back({Tokenizer::from_folder((tok / "llama3-bpe").string()), true});
  for (const char* name : {"llama2-spm", "mistral-spm", "qwen2-bpe", "spm-unk"})
    all.push_back({Tokenizer::from_folder((tok / name).string()), false});
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  static const std::vector<Loaded> tokenizers = load_all();
  if (size == 0) return 0;
  const Loaded& t = tokenizers[data[0] % tokenizers.size()];
  const int bits = data[0] / int(tokenizers.size());
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  fuzz::check_tokenizer(t.tokenizer, text, {.add_special_tokens = false, .allow_special = (bits & 1) != 0},
                        {.stream_matches_decode = true, .round_trip = t.round_trip});
  fuzz::check_tokenizer(t.tokenizer, text, {.add_special_tokens = (bits & 2) != 0, .allow_special = true},
                        {.stream_matches_decode = true});

  std::vector<Token> ids(text.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, text.data() + 2 * i, 2);
    ids[i] = Token(v % uint32_t(t.tokenizer.vocab_size() + 16));
  }
  const std::string decoded = t.tokenizer.decode(ids);
  TextStream stream(t.tokenizer);
  std::string streamed;
  for (Token id : ids) streamed += stream.push(id);
  if (streamed + stream.flush() != decoded) __builtin_trap();
  return 0;
}
