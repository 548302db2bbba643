#include "corpus.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "folder_edit.h"

namespace ding::testing::hostile {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = DING_TEST_DATA;
const fs::path kGpt2 = kData / "gpt2-fixtures" / "tiny-f32";
const fs::path kLlama = kData / "llama-fixtures" / "llama-gqa-f32";

// config.json as JSON, edited, written back.
void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json c = json::parse(read_all(dir / "config.json"));
  edit(c);
  write_all(dir / "config.json", c.dump());
}

// Sets every f32 element of `tensor` to `value` in the folder's model.safetensors.
void fill_tensor(const fs::path& dir, const std::string& tensor, float value) {
  Safetensors st(dir / "model.safetensors");
  const json h = json::parse(st.header);
  const auto& t = h.at(tensor);
  if (t.at("dtype") != "F32") throw std::runtime_error(tensor + " is not F32");
  for (uint64_t at = t.at("data_offsets")[0]; at < t.at("data_offsets")[1].get<uint64_t>(); at += 4)
    std::memcpy(st.data.data() + at, &value, 4);
  st.write(dir / "model.safetensors");
}

void replace_with_fifo(const fs::path& file) {
  fs::remove(file);
  if (mkfifo(file.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + file.string() + ": " + std::strerror(errno));
}

}  // namespace

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  const std::string gpt2 = kGpt2.string(), llama = kLlama.string();
  const std::string run = "--backend cpu -n 2 -p hi";
  std::vector<Case> all = {
      // Files that are not files.
      {"config-fifo", gpt2, [](const fs::path& d) { replace_with_fifo(d / "config.json"); }, run, "a FIFO"},
      {"weights-fifo", gpt2, [](const fs::path& d) { replace_with_fifo(d / "model.safetensors"); }, run, "a FIFO"},
      {"vocab-fifo", gpt2, [](const fs::path& d) { replace_with_fifo(d / "vocab.json"); }, run, "a FIFO"},
      {"config-directory", gpt2,
       [](const fs::path& d) {
         fs::remove(d / "config.json");
         fs::create_directory(d / "config.json");
       },
       run, "a directory"},
      {"config-missing", gpt2, [](const fs::path& d) { fs::remove(d / "config.json"); }, run, "cannot open"},
      // JSON: unbounded nesting, trailing bytes.
      {"config-nested", gpt2,
       [](const fs::path& d) {
         std::string text = read_all(d / "config.json");
         text.insert(1, "\"n_inner\": " + nested_array(100000) + ", ");
         write_all(d / "config.json", text);
       },
       run, "nested deeper than 64"},
      {"config-trailing-nul", gpt2,
       [](const fs::path& d) { write_all(d / "config.json", read_all(d / "config.json") + std::string("\0junk", 5)); }, run,
       "not valid JSON"},
      {"vocab-nested", gpt2, [](const fs::path& d) { write_all(d / "vocab.json", "{\"a\": " + nested_array(100000) + "}"); },
       run, "nested deeper than 64"},
      // Config values out of range, unknown types, fewer layers than the file.
      {"config-epsilon-1e39", gpt2, [](const fs::path& d) { edit_config(d, [](json& c) { c["layer_norm_epsilon"] = 1e39; }); },
       run, "layer_norm_epsilon"},
      {"config-epsilon-1e-50", gpt2,
       [](const fs::path& d) { edit_config(d, [](json& c) { c["layer_norm_epsilon"] = 1e-50; }); }, run, "layer_norm_epsilon"},
      {"config-unknown-model-type", gpt2, [](const fs::path& d) { edit_config(d, [](json& c) { c["model_type"] = "mamba9"; }); },
       run, "mamba9"},
      {"config-1e8-layers", gpt2, [](const fs::path& d) { edit_config(d, [](json& c) { c["n_layer"] = 100000000; }); }, run,
       "more layers than ding loads"},
      {"config-fewer-layers", gpt2,
       [](const fs::path& d) { edit_config(d, [](json& c) { c["n_layer"] = c["n_layer"].get<int>() - 1; }); }, run,
       "belongs to layer"},
      // Safetensors: truncated, duplicate names, overlaps hidden by an empty tensor, sizes past 2^64.
      {"weights-truncated", gpt2,
       [](const fs::path& d) { fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2); }, run,
       "model.safetensors"},
      {"weights-duplicate-name", gpt2,
       [](const fs::path& d) {
         Safetensors st(d / "model.safetensors");
         const json h = json::parse(st.header);
         const std::string first = h.begin().key() == "__metadata__" ? std::next(h.begin()).key() : h.begin().key();
         st.header.insert(st.header.rfind('}'), ",\"" + first + "\":" + h.at(first).dump());
         st.write(d / "model.safetensors");
       },
       run, "appears twice"},
      {"weights-size-wraps", gpt2,
       [](const fs::path& d) {
         Safetensors st(d / "model.safetensors");
         st.header.insert(st.header.rfind('}'),
                          R"(,"wrap":{"dtype":"F32","shape":[1099511627776,8388608],"data_offsets":[0,0]})");
         st.write(d / "model.safetensors");
       },
       run, "overflows"},
      // Non-finite weights, values a narrower dtype cannot hold, activations that overflow.
      {"weights-nan", gpt2, [](const fs::path& d) { fill_tensor(d, "transformer.h.0.mlp.c_fc.bias", NAN); }, run, "NaN"},
      {"weights-beyond-f16", gpt2, [](const fs::path& d) { fill_tensor(d, "transformer.h.0.mlp.c_fc.bias", 1e6f); },
       run + " --dtype f16", "beyond f16"},
      {"activations-overflow-f16", gpt2, [](const fs::path& d) { fill_tensor(d, "transformer.h.0.mlp.c_fc.bias", 60000.0f); },
       run + " --dtype f16", "NaN or infinite"},
      // Tokenizer files.
      {"merges-empty", gpt2, [](const fs::path& d) { write_all(d / "merges.txt", "#version: 0.2\n"); }, run, "no merges"},
      {"merges-binary", gpt2, [](const fs::path& d) { write_all(d / "merges.txt", "#version: 0.2\n\xff\xfe \xfd\xfc\n"); },
       run, "merges.txt"},
      // The command line and the prompt.
      {"seed-negative", gpt2, nullptr, run + " --seed -1", "--seed"},
      {"seed-2-to-64", gpt2, nullptr, run + " --seed 18446744073709551616", "--seed"},
      {"seed-float", gpt2, nullptr, run + " --seed 1e23", "--seed"},
      {"tokens-empty", gpt2, nullptr, "--backend cpu -n 2 --tokens ''", "--tokens"},
      {"prompt-file-directory", gpt2, nullptr, "--backend cpu -n 2 -f /", "a directory"},
      {"prompt-invalid-utf8", gpt2, nullptr, "--backend cpu -n 2 -p \"$(printf 'caf\\303(')\"", "UTF-8"},
      {"output-unwritable", gpt2, nullptr, run + " > /dev/full", "writing the output failed"},
      {"context-past-memory", llama, nullptr, "--backend cpu -n 2 --tokens 1,2 -c 2000000000", "GiB free"},
      {"unknown-flag", gpt2, nullptr, run + " --frobnicate", "--frobnicate"},
  };
  return all;
}

fs::path build(const Case& c, const fs::path& root) {
  const fs::path dir = root / c.name;
  fs::remove_all(dir);
  fs::create_directories(root);
  fs::copy(c.source, dir);
  if (c.corrupt) c.corrupt(dir);
  return dir;
}

}  // namespace ding::testing::hostile
