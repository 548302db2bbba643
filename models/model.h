// Model: a decoder loaded from a Hugging Face folder (config.json, *.safetensors,
// tokenizer.json or vocab.json + merges.txt) onto a device, weights converted to one compute
// dtype and uploaded once into a single buffer.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ding/device.h"
#include "ding/models/config.h"
#include "ding/models/tokenizer.h"

namespace ding {

struct LoadOptions {
  DType dtype = DType::f32;  // compute dtype of weights and activations: f32, f16 or bf16
  // Called as weights are converted and uploaded, with bytes done and bytes in all.
  std::function<void(size_t done, size_t total)> progress;
};

// Weights of one decoder block, in the orientation ops::matmul takes: W [N, K] (out × in).
struct BlockWeights {
  Tensor attn_norm_w, attn_norm_b;  // [C]
  Tensor qkv_w;                     // [(H + 2·Hkv)·D, C]: rows of q, then k, then v
  Tensor qkv_b;                     // [(H + 2·Hkv)·D]
  Tensor out_w;                     // [C, H·D]
  Tensor out_b;                     // [C]
  Tensor ffn_norm_w, ffn_norm_b;    // [C]
  Tensor up_w;                      // [F, C]
  Tensor up_b;                      // [F]
  Tensor down_w;                    // [C, F]
  Tensor down_b;                    // [C]
};

struct ModelWeights {
  Tensor token_embedding;     // [V, C]
  Tensor position_embedding;  // [P, C] (learned positions only)
  std::vector<BlockWeights> blocks;
  Tensor final_norm_w, final_norm_b;  // [C]
  Tensor lm_head;                     // [V, C]; the token embedding itself when tied
};

class Model {
 public:
  // Throws ding::Error naming the file and field for a missing or malformed config, weights
  // or tokenizer, an unknown model_type, and any tensor whose name, dtype or shape does not
  // match the config.
  static Model load(const std::string& dir, Device& device, const LoadOptions& options = {});

  // A model of the given shape with random weights (normal, σ = 0.02, GPT-2's initialisation;
  // norms at weight 1, bias 0) and no tokenizer: for benchmarks of named shapes.
  static Model random(const ModelConfig& config, Device& device, const LoadOptions& options = {}, uint64_t seed = 0);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const { return config_; }
  // Throws Error(invalid_argument) for a model made by random(), which has none.
  const Tokenizer& tokenizer() const;
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const ModelWeights& weights() const { return weights_; }
  Device& device() const { return *device_; }
  DType dtype() const { return dtype_; }
  size_t weight_bytes() const { return arena_.size(); }
  const std::string& folder() const { return folder_; }

 private:
  Model() = default;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelWeights weights_;
  Device* device_ = nullptr;
  DType dtype_ = DType::f32;
  Buffer arena_;  // every weight, one allocation
  std::string folder_;
};

}  // namespace ding
