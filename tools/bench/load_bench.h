// ding-bench load: times upload_weights on a folder's safetensors (from a warm page cache) and
// reports the process's resident memory after it; --write-gpt2 first writes a folder of random
// weights in GPT-2's shapes and names to time on.
#pragma once
#include <string>

namespace ding::bench {

struct LoadBenchOptions {
  std::string model_dir;
  std::string backend = "cpu";
  std::string dtype = "f32";     // the compute dtype
  int repeat = 5;
  double chunk_mib = 32;
  std::string write_gpt2;        // a named shape (gpt2, gpt2-xl, …): write random weights into model_dir first
  std::string stored = "f16";    // the dtype --write-gpt2 stores
  bool no_weight_check = false;  // UploadOptions::check_values off
};

int run_load(const LoadBenchOptions& options);

}  // namespace ding::bench
