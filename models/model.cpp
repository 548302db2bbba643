// Model loading: the family named by config.json maps the checkpoint's tensors to the weights it
// needs; upload_weights converts them to the compute dtype and uploads them into one buffer.
#include "model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>

#include "ding/error.h"
#include "ding/ops/kernels.h"
#include "ding/models/families/family.h"
#include "ding/models/safetensors.h"
#include "ding/models/weight_quantize.h"
#include "ding/models/weight_upload.h"

namespace ding {

namespace {

namespace fs = std::filesystem;

DType compute_dtype(const LoadOptions& options, const ModelConfig& config, const Device& device, const char* who) {
  const DType dtype = options.dtype ? *options.dtype
                      : device.caps().host_accessible ? DType::f32
                                                      : config.stored_dtype.value_or(DType::f32);
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: compute dtype must be f32, f16 or bf16, got {}", who, dtype_name(dtype)));
  return dtype;
}

// Any tokenizer file present: a folder with half a tokenizer (vocab.json without merges.txt) is
// an error that Tokenizer::from_folder names, not a folder without one.
bool has_tokenizer_files(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json") || fs::exists(dir / "merges.txt");
}

// What a model needs besides its stored weights: the rotary frequencies, computed from the config,
// on the device in f32 whatever the compute dtype.
void upload_constants(const ModelConfig& c, Device& device, Buffer& constants, ModelWeights& w) {
  std::vector<float> values;
  int64_t inv_freq_count = 0;
  if (c.positions == PositionKind::rope) {
    const int64_t R = c.rotary_dim == 0 ? c.d_head : c.rotary_dim;
    values = ops::rope_inv_frequencies(c.rope_theta, R, c.rope_scaling);
    inv_freq_count = int64_t(values.size());
  }
  if (values.empty()) return;
  constants = device.alloc(values.size() * sizeof(float));
  device.copy_to_device(device.default_stream(), constants.data(), values.data(), values.size() * sizeof(float));
  device.default_stream().synchronize();
  float* const base = static_cast<float*>(constants.data());
  w.rope_inv_freq = Tensor::view(base, &device, DType::f32, {inv_freq_count});
  for (LayerWeights& layer : w.layers) layer.attention.rope_inv_freq = layer.latent.rope_inv_freq = w.rope_inv_freq;
}

}  // namespace

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

namespace {

// A checkpoint with more layers than its config.json would run cut short without a word (the
// families read layers 0 … n_layer − 1 only). Decoder layers are numbered path components after
// "layers" (Llama, Mistral, Qwen2) or "h" (GPT-2), so a tensor of layer n_layer or beyond is an
// error naming it.
void refuse_layers_past_the_config(const WeightFiles& files, const ModelConfig& c, const std::string& dir) {
  for (const auto& [name, tensor] : files.tensors()) {
    for (const char* container : {".layers.", ".h."}) {
      const size_t at = ("." + name).find(container);
      if (at == std::string::npos) continue;
      const size_t digits = at + std::strlen(container) - 1;  // in `name` (the "." added before it)
      int64_t layer = 0;
      const auto [end, error] = std::from_chars(name.data() + digits, name.data() + name.size(), layer);
      if (error == std::errc() && end < name.data() + name.size() && *end == '.' && layer >= c.n_layer)
        throw Error(ErrorCode::parse,
                    fmt::format("{}: tensor '{}' belongs to layer {}, but config.json has {} layers (num_hidden_layers / "
                                "n_layer)",
                                dir, name, layer, c.n_layer));
    }
  }
}

// LoadOptions::quantize, checked before any weight is read.
std::optional<DType> quantize_option(const LoadOptions& options, const char* who) {
  if (options.quantize && *options.quantize != DType::i8 && *options.quantize != DType::f8e4m3)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: weights quantize to i8 or f8e4m3, not {}", who, dtype_name(*options.quantize)));
  if (options.quantize_lm_head && !options.quantize)
    throw Error(ErrorCode::invalid_argument, fmt::format("{}: quantize_lm_head needs quantize (i8 or f8e4m3)", who));
  return options.quantize;
}

// The 8-bit format of the matmul weights: LoadOptions::quantize, else the checkpoint's own. A ding
// folder's weights load in its format only (its GPT-2 weights are stored transposed, which widening
// does not take); a block-wise fp8 checkpoint's are widened with their scales, then quantized.
std::optional<DType> narrow_format(std::optional<DType> requested, const ModelConfig& c, const std::string& dir) {
  if (!c.quantization) return requested;
  const QuantizedCheckpoint& q = *c.quantization;
  if (q.method == QuantizedCheckpoint::Method::ding && requested && *requested != q.weights)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: the folder holds {} weights (ding-quantize); it loads as {}, not {}: quantize the original "
                            "folder for another format",
                            dir, dtype_name(q.weights), dtype_name(q.weights), dtype_name(*requested)));
  return requested ? requested : std::optional<DType>(q.weights);
}

// The weights LoadOptions::quantize stores narrow: the layers' matmul weights, and the LM head
// when asked (LoadOptions::quantize_lm_head).
std::vector<Tensor*> narrow_targets(ModelWeights& weights, bool lm_head) {
  std::vector<Tensor*> targets;
  for (LayerWeights& layer : weights.layers)
    for (Tensor* t : projection_weights(layer)) targets.push_back(t);
  if (lm_head) targets.push_back(&weights.lm_head);
  return targets;
}

// A block-wise fp8 checkpoint loaded in its own format keeps the projections it stores wide
// (modules_to_not_convert) in the compute dtype, as transformers does: their authors left them
// unquantized for accuracy. Asked for a format (LoadOptions::quantize), every projection takes it.
void keep_stored_wide(std::vector<Tensor*>& narrow, std::span<const WeightPlan> plans) {
  auto eight_bit = [](const WeightPart& part) {
    return part.tensor->dtype == DType::i8 || part.tensor->dtype == DType::f8e4m3;
  };
  std::erase_if(narrow, [&](const Tensor* t) {
    return std::none_of(plans.begin(), plans.end(), [&](const WeightPlan& p) {
      return p.target == t && std::any_of(p.parts.begin(), p.parts.end(), eight_bit);
    });
  });
}

// A tied model whose LM head is quantized reads it from a copy of the embedding's plan (the
// embedding lookup keeps the compute dtype); returns whether the head is now a weight of its own.
bool untie_lm_head(const LoadOptions& options, const ModelConfig& c, std::vector<WeightPlan>& plans, ModelWeights& w) {
  if (!(options.quantize_lm_head && c.tied_embeddings)) return false;
  for (const WeightPlan& p : plans)
    if (p.target == &w.token_embedding) {
      WeightPlan head = p;
      head.name += " (as the LM head)";
      head.target = &w.lm_head;
      plans.push_back(std::move(head));
      return true;
    }
  return false;
}

}  // namespace

void require_kernels(const ops::Kernels& kernels, std::string_view backend, const ModelConfig& c,
                     const std::string& origin) {
  const std::vector<std::string_view> needed = model_ops(c);
  const std::vector<std::string> missing = ops::missing_kernels(kernels, needed);
  if (!missing.empty())
    throw Error(ErrorCode::not_implemented,
                fmt::format("{}: backend {} has no kernel for {} (a {} model needs {})", origin, backend,
                            fmt::join(missing, ", "), c.model_type, fmt::join(needed, ", ")));
}

std::vector<std::string_view> model_ops(const ModelConfig& c) {
  // The token (and GPT-2's position) embeddings, the LM head, greedy and sampled picks, and the
  // check that stops generation on non-finite logits (session.cpp, sampler.cpp).
  const std::vector<std::string_view> around = {"embedding", "matmul", "argmax", "sample", "count_nonfinite"};
  return ops_of({find_family(c.model_type, "model_ops").block_ops(c), around});
}

Model Model::load(const std::string& dir, Device& device, const LoadOptions& options) {
  if (!fs::is_directory(dir)) throw Error(ErrorCode::io, fmt::format("model folder {}: not a directory", dir));
  Model m;
  m.folder_ = dir;
  m.device_ = &device;
  m.config_ = ModelConfig::from_json_file((fs::path(dir) / "config.json").string());
  m.family_ = &find_family(m.config_.model_type, dir);
  require_kernels(device.kernels(), device.name(), m.config_, dir);
  m.dtype_ = compute_dtype(options, m.config_, device, "Model::load");
  m.quantized_ = narrow_format(quantize_option(options, "Model::load"), m.config_, dir);
  m.generation_ = GenerationDefaults::from_json_file((fs::path(dir) / "generation_config.json").string());
  if (!m.generation_.eos_tokens.empty()) m.config_.eos_tokens = m.generation_.eos_tokens;  // generate() uses these
  // A tokenizer larger or smaller than the embedding table is common (padded vocabularies); an id
  // the table lacks is refused where it enters the model (Session).
  if (has_tokenizer_files(dir)) m.tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_folder(dir));

  const WeightFiles files = WeightFiles::open_folder(dir);
  refuse_layers_past_the_config(files, m.config_, dir);
  std::vector<WeightPlan> plans = m.family_->weight_plans(m.config_, &files, m.weights_);
  const bool own_head = m.quantized_ && untie_lm_head(options, m.config_, plans, m.weights_);
  if (m.config_.quantization) attach_scales(plans, files, *m.config_.quantization, dir);
  // A ding folder's matmul weights come from the files as they are (quantize_weights); the others
  // are uploaded in the compute dtype first.
  std::vector<Tensor*> narrow = narrow_targets(m.weights_, options.quantize_lm_head);
  if (!options.quantize && m.config_.quantization &&
      m.config_.quantization->method == QuantizedCheckpoint::Method::fp8_blocks)
    keep_stored_wide(narrow, plans);
  const auto uploaded_end = std::stable_partition(plans.begin(), plans.end(), [&](const WeightPlan& p) {
    return !(m.quantized_ && stored_narrow(p, *m.quantized_) && std::find(narrow.begin(), narrow.end(), p.target) != narrow.end());
  });
  // Where every weight to store narrow comes from the files so (a ding folder, no LM head to
  // quantize apart), they go into the arena's reserve: one allocation, and the wide weights are not
  // copied into a second arena as quantize_weights does, which would need both at once.
  const std::span<WeightPlan> wide(plans.begin(), uploaded_end), stored(uploaded_end, plans.end());
  const bool only_stored = m.quantized_ && std::none_of(wide.begin(), wide.end(), [&](const WeightPlan& p) {
    return std::find(narrow.begin(), narrow.end(), p.target) != narrow.end();
  });
  const UploadStats uploaded = upload_weights(device, wide, m.arena_,
                                              {.dtype = m.dtype_,
                                               .progress = options.progress,
                                               .check_values = options.check_weights,
                                               .reserve_bytes = only_stored ? stored_narrow_bytes(stored) : 0});
  if (only_stored)
    place_stored_narrow(device, stored, static_cast<char*>(m.arena_.data()) + uploaded.reserved_at, *m.quantized_);
  else if (m.quantized_)
    quantize_weights(device, plans, narrow, m.arena_, *m.quantized_);
  if (m.config_.tied_embeddings && !own_head) m.weights_.lm_head = m.weights_.token_embedding;
  upload_constants(m.config_, device, m.constants_, m.weights_);
  return m;
}

Model Model::random(const ModelConfig& config, Device& device, const LoadOptions& options, uint64_t seed) {
  Model m;
  m.folder_ = "(random weights)";
  m.device_ = &device;
  m.config_ = config;
  m.family_ = &find_family(config.model_type, "Model::random");
  require_kernels(device.kernels(), device.name(), config, "Model::random");
  m.dtype_ = compute_dtype(options, config, device, "Model::random");
  m.quantized_ = quantize_option(options, "Model::random");
  std::vector<WeightPlan> plans = m.family_->weight_plans(config, nullptr, m.weights_);
  const bool own_head = m.quantized_ && untie_lm_head(options, config, plans, m.weights_);
  upload_weights(device, plans, m.arena_, {.dtype = m.dtype_, .seed = seed, .progress = options.progress});
  if (m.quantized_)
    quantize_weights(device, plans, narrow_targets(m.weights_, options.quantize_lm_head), m.arena_, *m.quantized_);
  if (m.config_.tied_embeddings && !own_head) m.weights_.lm_head = m.weights_.token_embedding;
  upload_constants(m.config_, device, m.constants_, m.weights_);
  return m;
}

const Tokenizer& Model::tokenizer() const {
  if (!tokenizer_)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: the model has no tokenizer (tokenizer.json, or vocab.json + merges.txt); "
                            "run it on token ids", folder_));
  return *tokenizer_;
}

}  // namespace ding
