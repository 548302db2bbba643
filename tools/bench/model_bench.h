// ding-bench model: the seed benchmark — prefill a prompt, then decode token by token — on a
// named shape (GPT-2 or Llama, random weights) or on a model folder, against the decode roofline.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ding/dtype.h"

namespace ding::bench {

struct ModelBenchOptions {
  std::string shape = "gpt2-xl";  // a name from model_shape_names() (random weights)
  std::string model_dir;          // a model folder instead of a named shape
  int64_t positions = 0;          // named shapes: the context the model has; 0 = its config's
  std::string backend = "auto";
  std::string dtype = "bf16";
  std::string quantize;  // empty, int8 or fp8: LoadOptions::quantize
  bool quantize_lm_head = false;  // LoadOptions::quantize_lm_head
  int64_t prompt = 256;
  int64_t new_tokens = 256;
  int64_t batch = 1;
  int64_t prefill_chunk = 0;  // prompt tokens per prefill step; 0 = the whole prompt at once
  bool profile = false;  // print per-op time of the prefill and the decode steps (synchronises around each op)
  bool profile_by_bytes = false;  // the profile's calls of one op apart by the bytes they move (Profiler::Grouping)
  bool graphs = true;    // replay recorded decode steps where the backend can (CUDA graphs)
  bool paired = false;   // with quantize: also decode the unquantized model, a step of each in turn
  std::vector<std::string> skip_ops;  // ops not run at all (Stream::skipped_ops): timing only
};

// --dtype (f32, bf16, f16) and --quantize (int8, fp8; empty: none) as the subcommands take them:
// Error(invalid_argument) naming the value otherwise.
DType parse_dtype(const std::string& s);
std::optional<DType> parse_quantize(const std::string& s);

// "gpt2, gpt2-medium, ...": the shapes --shape takes.
std::string model_shape_names();

int run_model(const ModelBenchOptions& options);

}  // namespace ding::bench
