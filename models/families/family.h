// A model family: the model_types it owns, how it reads their config.json, where its
// checkpoints keep each weight, and its decoder block built from the layers in models/layers/.
// The shared code (config, model, session) knows no family by name; it asks find_family().
//
// Adding a family: one file here with a Family subclass and its registration in family.cpp.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ding/models/config.h"
#include "ding/models/config_fields.h"
#include "ding/models/layers/block.h"
#include "ding/models/model.h"
#include "ding/models/safetensors.h"
#include "ding/models/weight_upload.h"

namespace ding {

class Family {
 public:
  virtual ~Family() = default;
  virtual std::span<const std::string_view> model_types() const = 0;
  // Reads the family's fields into `c` (model_type is set); throws through f.fail().
  virtual void parse_config(const ConfigFields& f, ModelConfig& c) const = 0;
  // Every weight the model needs, as plans for upload_weights: stored parts found in `files`, or,
  // when `files` is null, generated values of the same shapes (random weights for benchmarks).
  virtual std::vector<WeightPlan> weight_plans(const ModelConfig& c, const WeightFiles* files, ModelWeights& w) const = 0;
  // One decoder block over the step's rows: x ← block(x).
  virtual void block(const Step& step, const LayerWeights& w, LayerCache& cache) const = 0;
  // The ops `block` dispatches for a model of config `c` (its layers' *_ops lists).
  virtual std::vector<std::string_view> block_ops(const ModelConfig& c) const = 0;
};

// Throws Error(parse) naming `origin` and the supported model_types when none owns `model_type`.
const Family& find_family(std::string_view model_type, const std::string& origin);
// Every supported model_type, for messages and --help.
std::vector<std::string_view> supported_model_types();

// The function transformers' ACT2FN gives config key `key` (`fallback` where it is absent);
// names ding does not run fail naming the key.
ops::ActivationFn parse_activation(const ConfigFields& f, const char* key, const char* fallback);

// Builds WeightPlans: checks each stored tensor's dtype and shape against what the config implies
// (errors name the tensor, its file and both shapes) and concatenates fused parts. With no files,
// it plans generated weights: normal for matrices, ones for norm weights, zeros for biases.
class WeightMap {
 public:
  WeightMap(const WeightFiles* files, std::string prefix) : files_(files), prefix_(std::move(prefix)) {}
  bool has(const std::string& name) const { return files_ && files_->has(prefix_ + name); }
  // A matrix or embedding [rows, cols] (transposed: stored [cols, rows]).
  void matrix(Tensor* target, const std::string& name, int64_t rows, int64_t cols, bool transposed = false);
  // Row blocks stacked into one [Σ rows, cols] weight, in the order given (q, k, v; gate, up).
  void stacked(Tensor* target, const std::string& fused_name, std::span<const std::string> names,
               std::span<const int64_t> rows, int64_t cols);
  // A vector [n]: init ones when generated (norm weights) or zeros (biases). stored_offset is
  // added to the stored values (WeightPlan::stored_offset: zero-centred norms load as 1 + w).
  void vector(Tensor* target, const std::string& name, int64_t n, WeightInit generated, float stored_offset = 0.0f);
  // A tensor of any rank as stored (a convolution's [C, 1, K]); generated normal.
  void tensor(Tensor* target, const std::string& name, std::vector<int64_t> shape);
  // Rows [begin, end) of a stored [tensor_rows, cols] matrix.
  struct RowBlock {
    std::string name;
    int64_t tensor_rows, begin, end;
  };
  // Row blocks of stored matrices, in the order given, as one [Σ (end − begin), cols] weight:
  // rows regrouped at load (Qwen3-Next's per-key-head projections into q, k, v, …).
  void gathered(Tensor* target, const std::string& label, std::span<const RowBlock> blocks, int64_t cols);
  // An untied LM head [V, C]: "lm_head.weight", outside the decoder's prefix in every family's
  // *ForCausalLM checkpoints (tied ones omit it or repeat the embedding).
  void lm_head(Tensor* target, int64_t rows, int64_t cols);
  // Vectors stacked into one [Σ sizes], in the order given; generated as `generated` (biases:
  // zeros, norm weights: ones).
  void stacked_vector(Tensor* target, const std::string& fused_name, std::span<const std::string> names,
                      std::span<const int64_t> sizes, WeightInit generated = WeightInit::zeros);
  std::vector<WeightPlan> take() { return std::move(plans_); }

 private:
  const StoredTensor* stored(const std::string& name, std::vector<int64_t> shape) const;
  const WeightFiles* files_;
  std::string prefix_;
  std::vector<WeightPlan> plans_;
};

}  // namespace ding
