// ding-bench model: the seed benchmark — prefill a prompt, then decode token by token — on a
// named shape (GPT-2 or Llama, random weights) or on a model folder, against the decode roofline.
#pragma once
#include <string>

namespace ding::bench {

struct ModelBenchOptions {
  std::string shape = "gpt2-xl";  // a name from model_shape_names() (random weights)
  std::string model_dir;          // a model folder instead of a named shape
  int64_t positions = 0;          // named shapes: the context the model has; 0 = its config's
  std::string backend = "auto";
  std::string dtype = "bf16";
  std::string quantize;  // empty, int8 or fp8: LoadOptions::quantize
  int64_t prompt = 256;
  int64_t new_tokens = 256;
  int64_t batch = 1;
  int64_t prefill_chunk = 0;  // prompt tokens per prefill step; 0 = the whole prompt at once
  bool profile = false;  // print per-op time of the prefill and the decode steps (synchronises around each op)
  bool graphs = true;    // replay recorded decode steps where the backend can (CUDA graphs)
};

// "gpt2, gpt2-medium, ...": the shapes --shape takes.
std::string model_shape_names();

int run_model(const ModelBenchOptions& options);

}  // namespace ding::bench
