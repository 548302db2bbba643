// libFuzzer target: model.safetensors.index.json beside the committed five-shard fixture's
// shards. Whatever the weight_map names (other files, the folder itself, paths that leave it,
// tensors in the wrong shard) must be a ding::Error or a consistent set of tensors.
#include <cstdint>
#include <filesystem>

#include "ding/error.h"
#include "ding/models/safetensors.h"
#include "fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ding;
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path d = fuzz::scratch() / "sharded";
    fs::create_directories(d);
    for (const auto& entry : fs::directory_iterator(fuzz::kData / "gpt2-fixtures" / "untied-sharded-bf16"))
      if (entry.path().extension() == ".safetensors" || entry.path().filename() == "config.json")
        fs::copy_file(entry.path(), d / entry.path().filename(), fs::copy_options::overwrite_existing);
    return d;
  }();
  fuzz::write_file(dir / "model.safetensors.index.json", fuzz::as_text(data, size));
  try {
    const WeightFiles files = WeightFiles::open_folder(dir.string());
    size_t bytes = 0;
    for (const auto& [name, t] : files.tensors()) {
      if (&files.get(name) != t || t->bytes != size_t(t->numel()) * dtype_size(t->dtype)) __builtin_trap();
      bytes += t->bytes;
    }
    if (bytes != files.total_bytes()) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
