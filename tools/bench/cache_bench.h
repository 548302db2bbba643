// ding-bench cache: what each attention kind keeps per token and what it costs decode. Four models
// of equal width, depth and heads (DeepSeek-V2-Lite's: width 2048, 27 layers, 16 heads of 128, the
// same dense SwiGLU feed-forward and vocabulary) differ only in their attention: MHA (16 KV heads),
// GQA (4), MQA (1) and MLA (a 512-element latent and a 64-dim rope key per token). For each: cache
// bytes per token, and decode tok/s at batch 1 after prefilling each context length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ding::bench {

struct CacheBenchOptions {
  std::string backend = "auto";
  std::string dtype = "bf16";
  std::vector<int64_t> contexts = {4096, 32768};
  int64_t layers = 27;  // fewer for a quick look (or a CPU)
  int64_t width = 2048;
  int64_t steps = 32;   // decode steps timed per context
};

int run_cache(const CacheBenchOptions& options);

}  // namespace ding::bench
