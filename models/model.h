// Model: a decoder loaded from a Hugging Face folder (config.json, *.safetensors,
// tokenizer.json or vocab.json + merges.txt) onto a device, weights converted to one compute
// dtype and uploaded once into a single buffer.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ding/device.h"
#include "ding/models/config.h"
#include "ding/models/layers/block.h"
#include "ding/models/tokenizer.h"

namespace ding {

struct LoadOptions {
  // Compute dtype of weights and activations: f32, f16 or bf16. Absent: the checkpoint's own
  // (config.json torch_dtype / dtype) on a GPU, f32 on a host device (cpu, ref), whose kernels
  // are fastest and exact in f32.
  std::optional<DType> dtype;
  // Called as weights are converted and uploaded, with bytes done and bytes in all.
  std::function<void(size_t done, size_t total)> progress;
  // False: the stored weights are not checked for NaN, ±Inf and values beyond the compute dtype
  // (UploadOptions::check_values), for a folder that is trusted. A non-finite weight then shows
  // only as non-finite logits, which the Sampler refuses.
  bool check_weights = true;
  // i8 or f8e4m3: the weights that only ops::matmul and ops::moe_matmul read (projection_weights:
  // the layers' projections and experts) are stored as 8-bit values with one f32 scale per row,
  // quantized from the compute dtype after upload (weight_quantize.h); the activations stay in
  // `dtype`. The embeddings, the LM head, routers and norms keep the compute dtype. Anything else:
  // Error(invalid_argument) before any weight is read. Absent: the checkpoint's own format, if it
  // has one (a ding folder's; a block-wise fp8 checkpoint's f8e4m3, for the projections it stores
  // in 8 bits, while those it stores wide keep the compute dtype).
  std::optional<DType> quantize;
  // With quantize: the LM head in 8 bits too (a tied model gets its own 8-bit copy of the embedding
  // as the head; the lookup keeps the compute dtype). Off by default: docs/DESIGN.md says why.
  bool quantize_lm_head = false;
};

struct ModelWeights {
  Tensor token_embedding;     // [V, C]
  Tensor position_embedding;  // [P, C] (learned positions only)
  std::vector<LayerWeights> layers;
  Tensor final_norm_w, final_norm_b;  // [C]; final_norm_b layer_norm only
  Tensor lm_head;                     // [V, C]; the token embedding itself when tied
  Tensor rope_inv_freq;               // f32 [R/2] (rope positions only)
};

class Family;
namespace ops {
struct Kernels;
}

// The ops (names from ops/op_list.h) a model of config `c` dispatches: its family's blocks, and
// what runs around them (the embeddings, the LM head, the sampler and its non-finite check).
std::vector<std::string_view> model_ops(const ModelConfig& c);
// Error(not_implemented) naming `origin`, the backend and every op of model_ops(c) that `kernels`
// lacks; what Model::load and Model::random check first.
void require_kernels(const ops::Kernels& kernels, std::string_view backend, const ModelConfig& c,
                     const std::string& origin);

class Model {
 public:
  // Throws ding::Error naming the file and field for a missing or malformed config, weights
  // or tokenizer, an unknown model_type, and any tensor whose name, dtype or shape does not
  // match the config. A folder without tokenizer files loads (has_tokenizer() is false).
  static Model load(const std::string& dir, Device& device, const LoadOptions& options = {});

  // Both throw Error(not_implemented) before reading any weight when the device's backend lacks a
  // kernel the model needs, naming every missing op (model_ops).

  // A model of the given shape with random weights (normal, σ = 0.02, GPT-2's initialisation;
  // norms at weight 1, biases 0) and no tokenizer: for benchmarks of named shapes.
  static Model random(const ModelConfig& config, Device& device, const LoadOptions& options = {}, uint64_t seed = 0);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const { return config_; }
  // Throws Error(invalid_argument) when the model has none (random weights, or a folder
  // without tokenizer files: such a model runs on token ids).
  const Tokenizer& tokenizer() const;
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const ModelWeights& weights() const { return weights_; }
  const Family& family() const { return *family_; }
  // generation_config.json's defaults (all unset when the folder has none).
  const GenerationDefaults& generation() const { return generation_; }
  Device& device() const { return *device_; }
  DType dtype() const { return dtype_; }
  size_t weight_bytes() const { return arena_.size(); }
  // The 8-bit dtype of the quantized weights (LoadOptions::quantize), if any.
  std::optional<DType> quantized() const { return quantized_; }
  const std::string& folder() const { return folder_; }

 private:
  Model() = default;
  ModelConfig config_;
  GenerationDefaults generation_;
  const Family* family_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelWeights weights_;
  Device* device_ = nullptr;
  DType dtype_ = DType::f32;
  std::optional<DType> quantized_;
  Buffer arena_;      // every weight, one allocation
  Buffer constants_;  // tables computed from the config (rope frequencies)
  std::string folder_;
};

}  // namespace ding
