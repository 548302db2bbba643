// The registry of families, and WeightMap, the shared way families name their weights.
#include "ding/models/families/family.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "ding/error.h"

namespace ding {

// Each family file defines its accessor; this list is the only place that names them all.
const Family& gpt2_family();
const Family& llama_family();
const Family& mixtral_family();
const Family& olmoe_family();
const Family& deepseek_v2_family();
const Family& qwen3_next_family();

namespace {

std::array<const Family*, 6> families() {
  return {&gpt2_family(), &llama_family(), &mixtral_family(), &olmoe_family(), &deepseek_v2_family(), &qwen3_next_family()};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

}  // namespace

std::vector<std::string_view> supported_model_types() {
  std::vector<std::string_view> types;
  for (const Family* f : families())
    for (std::string_view t : f->model_types()) types.push_back(t);
  return types;
}

const Family& find_family(std::string_view model_type, const std::string& origin) {
  for (const Family* f : families())
    for (std::string_view t : f->model_types())
      if (t == model_type) return *f;
  throw Error(ErrorCode::parse, fmt::format("{}: unknown model_type \"{}\" (supported: {})", origin, model_type,
                                            fmt::join(supported_model_types(), ", ")));
}

ops::ActivationFn parse_activation(const ConfigFields& f, const char* key, const char* fallback) {
  const std::string name = f.string_or(key, fallback);
  const std::optional<ops::ActivationFn> fn = ops::activation_fn(name);
  if (!fn)
    f.fail(fmt::format("{} \"{}\" is not supported (ding has silu, swish, gelu, gelu_new, gelu_pytorch_tanh, "
                       "gelu_fast, quick_gelu, relu)", key, name));
  return *fn;
}

const StoredTensor* WeightMap::stored(const std::string& name, std::vector<int64_t> shape) const {
  if (!files_) return nullptr;
  const StoredTensor& t = files_->get(prefix_ + name);
  // 8-bit tensors pass here; their scales are the quantization_config's (attach_scales, upload_weights).
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16 && t.dtype != DType::i8 &&
      t.dtype != DType::f8e4m3)
    throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' has dtype {}, expected f32, f16 or bf16 (or i8 / f8e4m3 "
                                              "with scales)",
                                              t.file, t.name, dtype_name(t.dtype)));
  if (t.shape != shape)
    throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' has shape {} but config.json implies {}", t.file, t.name,
                                              shape_text(t.shape), shape_text(shape)));
  return &t;
}

void WeightMap::matrix(Tensor* target, const std::string& name, int64_t rows, int64_t cols, bool transposed) {
  WeightPlan p{.name = prefix_ + name, .shape = {rows, cols}, .init = files_ ? WeightInit::stored : WeightInit::normal, .target = target};
  if (files_) p.parts.push_back({stored(name, transposed ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols}), transposed});
  plans_.push_back(std::move(p));
}

void WeightMap::stacked(Tensor* target, const std::string& fused_name, std::span<const std::string> names,
                        std::span<const int64_t> rows, int64_t cols) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  WeightPlan p{.name = prefix_ + fused_name, .shape = {total, cols}, .init = files_ ? WeightInit::stored : WeightInit::normal, .target = target};
  if (files_)
    for (size_t i = 0; i < names.size(); ++i) p.parts.push_back({stored(names[i], {rows[i], cols}), false});
  plans_.push_back(std::move(p));
}

void WeightMap::lm_head(Tensor* target, int64_t rows, int64_t cols) {
  const std::string prefix = std::exchange(prefix_, "");
  matrix(target, "lm_head.weight", rows, cols);
  prefix_ = prefix;
}

void WeightMap::vector(Tensor* target, const std::string& name, int64_t n, WeightInit generated, float stored_offset) {
  WeightPlan p{.name = prefix_ + name, .shape = {n}, .init = files_ ? WeightInit::stored : generated, .target = target,
               .stored_offset = stored_offset};
  if (files_) p.parts.push_back({stored(name, {n}), false});
  plans_.push_back(std::move(p));
}

void WeightMap::tensor(Tensor* target, const std::string& name, std::vector<int64_t> shape) {
  WeightPlan p{.name = prefix_ + name, .shape = shape, .init = files_ ? WeightInit::stored : WeightInit::normal, .target = target};
  if (files_) p.parts.push_back({stored(name, std::move(shape)), false});
  plans_.push_back(std::move(p));
}

void WeightMap::gathered(Tensor* target, const std::string& label, std::span<const RowBlock> blocks, int64_t cols) {
  int64_t total = 0;
  for (const RowBlock& b : blocks) total += b.end - b.begin;
  WeightPlan p{.name = prefix_ + label, .shape = {total, cols}, .init = files_ ? WeightInit::stored : WeightInit::normal, .target = target};
  if (files_)
    for (const RowBlock& b : blocks)
      p.parts.push_back({.tensor = stored(b.name, {b.tensor_rows, cols}), .row_begin = b.begin, .row_end = b.end});
  plans_.push_back(std::move(p));
}

void WeightMap::stacked_vector(Tensor* target, const std::string& fused_name, std::span<const std::string> names,
                               std::span<const int64_t> sizes, WeightInit generated) {
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  WeightPlan p{.name = prefix_ + fused_name, .shape = {total}, .init = files_ ? WeightInit::stored : generated, .target = target};
  if (files_)
    for (size_t i = 0; i < names.size(); ++i) p.parts.push_back({stored(names[i], {sizes[i]}), false});
  plans_.push_back(std::move(p));
}

}  // namespace ding
