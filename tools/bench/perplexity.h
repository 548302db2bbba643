// ding-bench perplexity: a model folder's perplexity on a slice of a text file, in windows of a
// fixed length each evaluated from an empty cache (the mean of the windows' mean cross-entropies,
// as tools/train/train_default.py computes its validation loss), for comparing compute dtypes and
// 8-bit weights on the same tokens.
#pragma once
#include <string>

namespace ding::bench {

struct PerplexityOptions {
  std::string model_dir;   // default: the shipped model
  std::string file;        // the text
  double tail = 0.05;      // the last fraction of the file's tokens (the shipped model's validation slice)
  int64_t window = 256;    // tokens per window (train_default.py's --seq)
  std::string backend = "auto";
  std::string dtype = "f32";
  std::string quantize;    // int8, fp8 or empty
  bool quantize_lm_head = false;
};

int run_perplexity(const PerplexityOptions& options);

}  // namespace ding::bench
