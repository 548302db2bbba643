// Sampler: turns a row of logits into the next token. The randomness is a seeded generator on
// the host feeding uniforms to ops::sample, so a seed reproduces a run exactly on any backend.
// The repetition penalty (Keskar et al. 2019, as transformers applies it) divides positive
// logits of already-seen tokens by the penalty and multiplies negative ones.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "ding/device.h"
#include "ding/models/tokenizer.h"

namespace ding {

struct SamplerOptions {
  float temperature = 1.0f;         // 0 = greedy
  int64_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; > 0
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Throws Error(invalid_argument) naming a parameter out of its range.
  explicit Sampler(const SamplerOptions& options = {});

  // logits: f32 [n, V] on a device (the rows of a Session step); history[i] is the context of
  // row i for the repetition penalty (may be empty). Returns one token per row.
  std::vector<Token> sample(Stream& stream, const Tensor& logits, std::span<const std::span<const Token>> history = {});
  Token sample_one(Stream& stream, const Tensor& logits_row, std::span<const Token> history = {});

  const SamplerOptions& options() const { return options_; }

 private:
  void apply_repetition_penalty(Stream& stream, const Tensor& logits, std::span<const std::span<const Token>> history);
  void ensure_buffers(Device& device, int64_t rows);

  SamplerOptions options_;
  std::mt19937_64 rng_;
  Device* device_ = nullptr;
  int64_t rows_ = 0;
  Buffer uniforms_, tokens_;  // f32 [rows], i32 [rows]
  std::vector<float> host_row_;
};

}  // namespace ding
