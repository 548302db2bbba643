// ModelConfig: the decoder-family hyperparameters, read from a Hugging Face config.json.
// One struct covers the family; variants are fields (norm kind, FFN kind, positions), never
// separate model classes. Only gpt2 is parsed so far; other model_types raise a clear error.
#pragma once
#include <cstdint>
#include <string>

#include "ding/ops/matmul.h"

namespace ding {

using ops::NormKind;  // the block's norm: layer_norm or rms_norm (never none)
enum class PositionKind : uint8_t { learned, rope };
enum class FfnKind : uint8_t { mlp, swiglu };  // mlp: act(x·W1 + b1)·W2 + b2

struct ModelConfig {
  std::string model_type;       // "gpt2"
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;        // = n_head for MHA
  int64_t d_model = 0;          // C
  int64_t d_head = 0;           // D = C / n_head
  int64_t d_ff = 0;             // the FFN's hidden width
  int64_t n_positions = 0;      // the longest context the model was built for
  int64_t vocab_size = 0;       // V
  NormKind norm = NormKind::layer_norm;
  float norm_eps = 1e-5f;
  PositionKind positions = PositionKind::learned;
  FfnKind ffn = FfnKind::mlp;
  ops::Activation activation = ops::Activation::gelu_tanh;
  bool tied_embeddings = true;  // the LM head reuses the token embedding
  int32_t bos_token = -1;       // -1: none
  int32_t eos_token = -1;

  // Parses `path` (a config.json); throws Error(io | parse) naming the file and the field.
  static ModelConfig from_json_file(const std::string& path);
  static ModelConfig from_json_text(const std::string& text, const std::string& origin);

  // Parameters of the whole model (embeddings counted once when tied).
  int64_t parameter_count() const;
};

}  // namespace ding
