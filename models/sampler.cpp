#include "sampler.h"

#include <fmt/format.h>

#include <cmath>

#include "ding/error.h"
#include "ding/ops/ops.h"

namespace ding {

Sampler::Sampler(const SamplerOptions& o) : options_(o), rng_(o.seed) {
  auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "Sampler: " + what); };
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) bad(fmt::format("temperature must be ≥ 0, got {}", o.temperature));
  if (o.top_k < 0) bad(fmt::format("top_k must be ≥ 0 (0 = off), got {}", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1)) bad(fmt::format("top_p must be in (0, 1], got {}", o.top_p));
  if (!(o.min_p >= 0 && o.min_p < 1)) bad(fmt::format("min_p must be in [0, 1), got {}", o.min_p));
  if (!(o.repetition_penalty > 0) || !std::isfinite(o.repetition_penalty))
    bad(fmt::format("repetition_penalty must be > 0 (1 = off), got {}", o.repetition_penalty));
}

void Sampler::ensure_buffers(Device& device, int64_t rows) {
  if (device_ == &device && rows_ >= rows) return;  // grows once, then reused every step
  device_ = &device;
  rows_ = rows;
  uniforms_ = device.alloc(size_t(rows) * sizeof(float));
  tokens_ = device.alloc(2 * size_t(rows) * sizeof(int32_t));  // the tokens, then each row's non-finite count
}

void Sampler::apply_repetition_penalty(Stream& stream, const Tensor& logits,
                                       std::span<const std::span<const Token>> history) {
  // One row round trip through the host: a memcpy on host backends, two 4·V-byte copies on GPUs.
  const int64_t V = logits.dim(1);
  const float penalty = options_.repetition_penalty;
  Device& device = *logits.device;
  host_row_.resize(size_t(V));
  std::vector<bool> seen(static_cast<size_t>(V));
  for (size_t r = 0; r < history.size() && int64_t(r) < logits.dim(0); ++r) {
    float* row = static_cast<float*>(logits.data) + int64_t(r) * V;
    device.copy_to_host(stream, host_row_.data(), row, size_t(V) * sizeof(float));
    stream.synchronize();
    std::fill(seen.begin(), seen.end(), false);
    for (Token t : history[r]) {
      if (t < 0 || t >= V || seen[size_t(t)]) continue;
      seen[size_t(t)] = true;
      float& value = host_row_[size_t(t)];
      value = value > 0 ? value / penalty : value * penalty;
    }
    device.copy_to_device(stream, row, host_row_.data(), size_t(V) * sizeof(float));
  }
}

std::vector<Token> Sampler::sample(Stream& stream, const Tensor& logits, std::span<const std::span<const Token>> history) {
  if (logits.rank != 2 || logits.dtype != DType::f32)
    throw Error(ErrorCode::invalid_argument, fmt::format("Sampler: logits must be f32 [n, V], got {}", logits.shape_str()));
  const int64_t n = logits.dim(0);
  Device& device = *logits.device;
  ensure_buffers(device, n);
  if (options_.repetition_penalty != 1.0f && !history.empty()) apply_repetition_penalty(stream, logits, history);
  const Tensor uniforms = Tensor::view(uniforms_.data(), &device, DType::f32, {n});
  const Tensor tokens = Tensor::view(tokens_.data(), &device, DType::i32, {n});
  if (options_.temperature == 0.0f) {
    ops::argmax(stream, tokens, logits);
  } else {
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> u(static_cast<size_t>(n));
    for (float& x : u) x = std::min(uniform(rng_), std::nextafter(1.0f, 0.0f));
    device.copy_to_device(stream, uniforms.data, u.data(), u.size() * sizeof(float));
    ops::sample(stream, tokens, logits, uniforms,
                {.temperature = options_.temperature, .top_k = options_.top_k, .top_p = options_.top_p, .min_p = options_.min_p});
  }
  // Counted beside the sampling and read back with the tokens: no extra round trip per step.
  const Tensor nonfinite = Tensor::view(static_cast<int32_t*>(tokens_.data()) + n, &device, DType::i32, {n});
  ops::count_nonfinite(stream, nonfinite, logits);
  std::vector<Token> read(2 * static_cast<size_t>(n));
  device.copy_to_host(stream, read.data(), tokens.data, read.size() * sizeof(Token));
  stream.synchronize();
  for (int64_t r = 0; r < n; ++r)
    if (const int32_t bad = read[size_t(n + r)]; bad > 0)
      throw Error(ErrorCode::non_finite,
                  fmt::format("the logits of row {} hold {} NaN or infinite value{} of {}: no token is sampled from them",
                              r, bad, bad == 1 ? "" : "s", logits.dim(1)));
  read.resize(size_t(n));
  return read;
}

Token Sampler::sample_one(Stream& stream, const Tensor& logits_row, std::span<const Token> history) {
  const std::span<const Token> rows[1] = {history};
  return sample(stream, logits_row, std::span<const std::span<const Token>>(rows, history.empty() ? 0 : 1))[0];
}

}  // namespace ding
