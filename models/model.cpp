// Model loading: map the safetensors, check every expected tensor against the config, convert
// to the compute dtype (transposing GPT-2's Conv1D [in, out] weights to [out, in]) and upload.
#include "model.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "ding/error.h"
#include "ding/models/safetensors.h"

namespace ding {

namespace {

// One weight as the loader needs it: where it comes from, the shape the config implies, and
// whether the file stores it transposed.
struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;  // as stored in the file
  bool transpose = false;      // stored [K, N] (Conv1D); ding wants [N, K]
  Tensor* target;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

// GPT-2's tensor names. Checkpoints saved from GPT2LMHeadModel prefix them with "transformer.";
// those saved from GPT2Model do not.
std::vector<WeightSpec> gpt2_weight_specs_for(const ModelConfig& c, const std::string& p, ModelWeights& w) {
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size, P = c.n_positions;
  std::vector<WeightSpec> specs;
  w.blocks.resize(size_t(c.n_layer));
  specs.push_back({p + "wte.weight", {V, C}, false, &w.token_embedding});
  specs.push_back({p + "wpe.weight", {P, C}, false, &w.position_embedding});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    BlockWeights& b = w.blocks[size_t(l)];
    const std::string h = fmt::format("{}h.{}.", p, l);
    specs.push_back({h + "ln_1.weight", {C}, false, &b.attn_norm_w});
    specs.push_back({h + "ln_1.bias", {C}, false, &b.attn_norm_b});
    specs.push_back({h + "attn.c_attn.weight", {C, 3 * C}, true, &b.qkv_w});
    specs.push_back({h + "attn.c_attn.bias", {3 * C}, false, &b.qkv_b});
    specs.push_back({h + "attn.c_proj.weight", {C, C}, true, &b.out_w});
    specs.push_back({h + "attn.c_proj.bias", {C}, false, &b.out_b});
    specs.push_back({h + "ln_2.weight", {C}, false, &b.ffn_norm_w});
    specs.push_back({h + "ln_2.bias", {C}, false, &b.ffn_norm_b});
    specs.push_back({h + "mlp.c_fc.weight", {C, F}, true, &b.up_w});
    specs.push_back({h + "mlp.c_fc.bias", {F}, false, &b.up_b});
    specs.push_back({h + "mlp.c_proj.weight", {F, C}, true, &b.down_w});
    specs.push_back({h + "mlp.c_proj.bias", {C}, false, &b.down_b});
  }
  specs.push_back({p + "ln_f.weight", {C}, false, &w.final_norm_w});
  specs.push_back({p + "ln_f.bias", {C}, false, &w.final_norm_b});
  // An untied head is "lm_head.weight"; tied checkpoints usually omit it (or repeat wte).
  if (!c.tied_embeddings) specs.push_back({"lm_head.weight", {V, C}, false, &w.lm_head});
  return specs;
}

std::vector<WeightSpec> gpt2_weight_specs(const ModelConfig& c, const WeightFiles& files, ModelWeights& w) {
  return gpt2_weight_specs_for(c, files.has("transformer.wte.weight") ? "transformer." : "", w);
}

}  // namespace

// Lays the weights out in one device allocation; `fill(spec, staging)` writes each weight's
// values (already in the compute dtype and orientation) into a host staging vector.
namespace {

void upload_weights(const std::vector<WeightSpec>& specs, Buffer& arena, Device& device, DType dtype,
                    const std::function<void(const WeightSpec&, const Tensor&, std::vector<uint8_t>&)>& fill,
                    const std::function<void(size_t)>& progress) {
  size_t total = 0;
  for (const WeightSpec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += (size_t(n) * dtype_size(dtype) + 255) / 256 * 256;
  }
  arena = device.alloc(total);
  Stream& stream = device.default_stream();
  size_t offset = 0;
  std::vector<uint8_t> staging;
  for (const WeightSpec& s : specs) {
    std::vector<int64_t> shape = s.shape;
    if (s.transpose) std::swap(shape[0], shape[1]);
    Tensor dst = Tensor::view(static_cast<char*>(arena.data()) + offset, &device, dtype, shape.data(), int(shape.size()));
    staging.resize(dst.nbytes());
    fill(s, dst, staging);
    device.copy_to_device(stream, dst.data, staging.data(), staging.size());
    stream.synchronize();
    *s.target = dst;
    offset += (staging.size() + 255) / 256 * 256;
    if (progress) progress(staging.size());
  }
}

}  // namespace

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& dir, Device& device, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error(ErrorCode::io, fmt::format("model folder {}: not a directory", dir));
  if (options.dtype != DType::f32 && options.dtype != DType::f16 && options.dtype != DType::bf16)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Model::load: compute dtype must be f32, f16 or bf16, got {}", dtype_name(options.dtype)));
  Model m;
  m.folder_ = dir;
  m.device_ = &device;
  m.dtype_ = options.dtype;
  m.config_ = ModelConfig::from_json_file((fs::path(dir) / "config.json").string());
  m.tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_folder(dir));
  if (m.tokenizer_->vocab_size() > m.config_.vocab_size)
    throw Error(ErrorCode::parse, fmt::format("{}: the tokenizer has {} tokens but config.json vocab_size is {}", dir,
                                              m.tokenizer_->vocab_size(), m.config_.vocab_size));
  if (m.config_.eos_token >= 0) m.tokenizer_->set_eos(m.config_.eos_token);

  const WeightFiles files = WeightFiles::open_folder(dir);
  const std::vector<WeightSpec> specs = gpt2_weight_specs(m.config_, files, m.weights_);

  // Check every tensor before allocating anything.
  for (const WeightSpec& s : specs) {
    const StoredTensor& t = files.get(s.name);
    if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
      throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' has dtype {}, expected f32, f16 or bf16", t.file, s.name,
                                                dtype_name(t.dtype)));
    if (t.shape != s.shape)
      throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' has shape {} but config.json implies {}", t.file, s.name,
                                                shape_text(t.shape), shape_text(s.shape)));
  }
  size_t done = 0;
  const size_t total = files.total_bytes();
  upload_weights(
      specs, m.arena_, device, m.dtype_,
      [&](const WeightSpec& s, const Tensor&, std::vector<uint8_t>& staging) {
        const StoredTensor& t = files.get(s.name);
        if (s.transpose) {
          const int64_t rows = s.shape[0], cols = s.shape[1];  // stored [rows = K, cols = N]
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) store_element(staging.data(), m.dtype_, c * rows + r, load_element(t.data, t.dtype, r * cols + c));
        } else if (t.dtype == m.dtype_) {
          std::memcpy(staging.data(), t.data, t.bytes);
        } else {
          for (int64_t i = 0; i < t.numel(); ++i) store_element(staging.data(), m.dtype_, i, load_element(t.data, t.dtype, i));
        }
        done += t.bytes;
      },
      [&](size_t) {
        if (options.progress) options.progress(done, total);
      });
  if (m.config_.tied_embeddings) m.weights_.lm_head = m.weights_.token_embedding;
  return m;
}

Model Model::random(const ModelConfig& config, Device& device, const LoadOptions& options, uint64_t seed) {
  if (options.dtype != DType::f32 && options.dtype != DType::f16 && options.dtype != DType::bf16)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Model::random: compute dtype must be f32, f16 or bf16, got {}", dtype_name(options.dtype)));
  Model m;
  m.folder_ = "(random weights)";
  m.device_ = &device;
  m.dtype_ = options.dtype;
  m.config_ = config;
  // The spec list needs names only to find stored tensors; random weights need just the shapes.
  std::vector<WeightSpec> specs = gpt2_weight_specs_for(config, "", m.weights_);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  upload_weights(
      specs, m.arena_, device, m.dtype_,
      [&](const WeightSpec& s, const Tensor& dst, std::vector<uint8_t>& staging) {
        const bool is_norm_weight = s.name.find("ln_") != std::string::npos && s.name.ends_with(".weight");
        const bool is_bias = s.name.ends_with(".bias");
        for (int64_t i = 0; i < dst.numel(); ++i)
          store_element(staging.data(), m.dtype_, i, is_norm_weight ? 1.0f : is_bias ? 0.0f : normal(rng));
      },
      [&](size_t bytes) {
        if (options.progress) options.progress(bytes, 0);
      });
  if (m.config_.tied_embeddings) m.weights_.lm_head = m.weights_.token_embedding;
  return m;
}

const Tokenizer& Model::tokenizer() const {
  if (!tokenizer_) throw Error(ErrorCode::invalid_argument, "Model: this model has no tokenizer (it was made with random weights)");
  return *tokenizer_;
}

}  // namespace ding
