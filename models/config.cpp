#include "config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ding/error.h"
#include "ding/models/config_fields.h"
#include "ding/models/families/family.h"
#include "ding/models/input_files.h"

namespace ding {

using json = nlohmann::json;

void ConfigFields::fail(const std::string& what) const { throw Error(ErrorCode::parse, fmt::format("{}: {}", origin_, what)); }

ConfigFields ConfigFields::object(const char* key) const {
  if (!has(key) || !j_.at(key).is_object()) fail(fmt::format("field \"{}\" must be an object, got {}", key, has(key) ? json_excerpt(j_.at(key)) : "nothing"));
  return ConfigFields(j_.at(key), fmt::format("{} (field \"{}\")", origin_, key));
}

int64_t ConfigFields::positive_int(const char* key) const {
  if (!has(key)) fail(fmt::format("missing field \"{}\"", key));
  const json& v = j_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 31))
    fail(fmt::format("field \"{}\" must be a positive integer, got {}", key, json_excerpt(v)));
  return v.get<int64_t>();
}

int64_t ConfigFields::layer_count(const char* key) const {
  const int64_t n = positive_int(key);
  if (n > kMaxLayers) fail(fmt::format("field \"{}\" is {}: more layers than ding loads (at most {})", key, n, kMaxLayers));
  return n;
}

int64_t ConfigFields::positive_int_or(const char* key, int64_t fallback) const { return has(key) ? positive_int(key) : fallback; }

int64_t ConfigFields::non_negative_int_or(const char* key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const json& v = j_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t(1) << 31))
    fail(fmt::format("field \"{}\" must be a non-negative integer, got {}", key, json_excerpt(v)));
  return v.get<int64_t>();
}

double ConfigFields::positive_number(const char* key) const {
  if (!has(key)) fail(fmt::format("missing field \"{}\"", key));
  const json& v = j_.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
    fail(fmt::format("field \"{}\" must be a positive number, got {}", key, json_excerpt(v)));
  return v.get<double>();
}

double ConfigFields::positive_number_or(const char* key, double fallback) const { return has(key) ? positive_number(key) : fallback; }

std::optional<double> ConfigFields::optional_number(const char* key) const {
  if (!has(key)) return std::nullopt;
  const json& v = j_.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) fail(fmt::format("field \"{}\" must be a number, got {}", key, json_excerpt(v)));
  return v.get<double>();
}

float ConfigFields::positive_float_or(const char* key, float fallback) const {
  if (!has(key)) return fallback;
  const double v = positive_number(key);
  const float f = float(v);
  if (!(f >= std::numeric_limits<float>::min()) || !std::isfinite(f))
    fail(fmt::format("field \"{}\" = {} is outside the range of a float (normal, finite)", key, json_excerpt(j_.at(key))));
  return f;
}

bool ConfigFields::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_boolean()) fail(fmt::format("field \"{}\" must be true or false, got {}", key, json_excerpt(j_.at(key))));
  return j_.at(key).get<bool>();
}

std::string ConfigFields::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_string()) fail(fmt::format("field \"{}\" must be a string, got {}", key, json_excerpt(j_.at(key))));
  return j_.at(key).get<std::string>();
}

int32_t ConfigFields::token_value(const char* key, const json& v) const {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    fail(fmt::format("field \"{}\" must hold token ids, got {}", key, json_excerpt(v)));
  return int32_t(v.get<int64_t>());
}

std::vector<int32_t> ConfigFields::token_list(const char* key) const {
  std::vector<int32_t> ids;
  if (!has(key)) return ids;
  const json& v = j_.at(key);
  if (!v.is_array()) return {token_value(key, v)};
  if (v.size() > 1024) fail(fmt::format("field \"{}\" lists {} ids; more than 1024 is not a stop list", key, v.size()));
  for (const json& id : v) ids.push_back(token_value(key, id));
  return ids;
}

std::vector<std::string> ConfigFields::string_list(const char* key) const {
  std::vector<std::string> items;
  if (!has(key)) return items;
  const json& v = j_.at(key);
  if (!v.is_array()) fail(fmt::format("field \"{}\" must be a list of strings", key));
  for (const json& s : v) {
    if (!s.is_string()) fail(fmt::format("field \"{}\" must be a list of strings, found {}", key, json_excerpt(s)));
    items.push_back(s.get<std::string>());
  }
  return items;
}

namespace {

json parse_object(const std::string& text, const std::string& origin) {
  json j = parse_json(text, origin);
  if (!j.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: not a JSON object", origin));
  return j;
}

std::optional<DType> stored_dtype_of(const ConfigFields& f) {
  const std::string name = f.string_or("dtype", f.string_or("torch_dtype", ""));
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  return std::nullopt;  // absent, or a dtype ding does not compute in (the weights' own dtypes are checked at load)
}

// quantization_config: a method ding loads, or an error naming the one it found.
std::optional<QuantizedCheckpoint> quantization_of(const ConfigFields& f) {
  if (!f.has("quantization_config")) return std::nullopt;
  const ConfigFields q = f.object("quantization_config");
  const std::string method = q.string_or("quant_method", "");
  QuantizedCheckpoint c;
  if (method == "ding") {
    const int64_t version = q.positive_int("format_version");
    if (version != kDingQuantizedFormat)
      q.fail(fmt::format("format_version {} is not one this ding reads ({}); quantize the original folder again with this "
                         "ding-quantize",
                         version, kDingQuantizedFormat));
    const std::string weights = q.string_or("weights", "");
    if (weights == "int8") c.weights = DType::i8;
    else if (weights == "float8_e4m3fn") c.weights = DType::f8e4m3;
    else q.fail(fmt::format("\"weights\" is '{}', expected int8 or float8_e4m3fn", weights));
    return c;
  }
  if (method == "fp8") {
    // As transformers' FineGrainedFP8Config reads it. ding multiplies the widened weights by
    // activations in the compute dtype, so the activation scheme (fp8 activations scaled per token
    // group, or by a stored activation_scale) changes nothing it computes; an unknown one is still
    // an error, as it is there.
    c.method = QuantizedCheckpoint::Method::fp8_blocks;
    c.weights = DType::f8e4m3;
    const std::string format = q.string_or("fmt", "e4m3");
    if (format != "e4m3") q.fail(fmt::format("fmt '{}': ding loads e4m3 weights only", format));
    std::string scheme = q.string_or("activation_scheme", "dynamic");
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (scheme != "dynamic" && scheme != "static")
      q.fail(fmt::format("activation_scheme '{}' is not dynamic or static", scheme));
    // ue8m0: each scale is a power of two, still stored as a float; the values mean the same.
    const std::string scale_format = q.string_or("scale_fmt", "float");
    if (scale_format != "float" && scale_format != "ue8m0")
      q.fail(fmt::format("scale_fmt '{}' is not float or ue8m0", scale_format));
    // Absent: transformers' default of 128 × 128 blocks. null: one scale per tensor.
    c.block_rows = c.block_cols = 128;
    if (q.is_null("weight_block_size")) {
      c.block_rows = c.block_cols = 0;
    } else if (q.has("weight_block_size")) {
      const json& b = q.at("weight_block_size");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
          b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
        q.fail(fmt::format("weight_block_size must be two positive integers or null, got {}", b.dump()));
      c.block_rows = b[0].get<int64_t>();
      c.block_cols = b[1].get<int64_t>();
    }
    return c;
  }
  q.fail(fmt::format("quant_method '{}' is not one ding loads (ding: ding-quantize's folders; fp8: block-wise e4m3); "
                     "load its unquantized original",
                     method));
}

// Sizes from a config.json are each at most 2^31, so their products can pass 2^63: every step
// is checked, and nullopt stands for a count that does not fit.
std::optional<int64_t> checked_parameter_count(const ModelConfig& c) {
  bool overflow = false;
  const auto mul = [&](int64_t a, int64_t b) {
    int64_t r = 0;
    overflow |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  const auto add = [&](std::initializer_list<int64_t> terms) {
    int64_t r = 0;
    for (int64_t t : terms) overflow |= __builtin_add_overflow(r, t, &r);
    return r;
  };
  const int64_t C = c.d_model, q = mul(c.n_head, c.d_head), kv = mul(c.n_kv_head, c.d_head);
  const int64_t qkv = add({c.attention_gate ? mul(2, q) : q, mul(2, kv)});
  const int64_t qk_norms = c.qk_norm == QkNorm::whole_projection ? add({q, kv})
                           : c.qk_norm == QkNorm::per_head      ? mul(2, c.d_head)
                                                                : 0;
  const int64_t attention = add({mul(C, qkv), mul(q, C), c.qkv_bias ? qkv : 0, c.out_bias ? C : 0, qk_norms});
  const int64_t ffn_weights = mul(mul(c.ffn == FfnKind::gated ? 3 : 2, C), c.d_ff);
  const int64_t ffn_biases = c.ffn_bias ? add({mul(c.ffn == FfnKind::gated ? 2 : 1, c.d_ff), C}) : 0;
  const int64_t norm_params = mul(c.norm == NormKind::layer_norm ? 2 : 1, C);
  // Multi-head latent attention: the query (through its bottleneck and norm, or one matrix), the
  // latent and rope-key projection with the latent's norm, the up-projection, the output.
  const MlaSpec& m = c.mla;
  const int64_t q_heads = mul(c.n_head, m.nope_dim + m.rope_dim);
  const int64_t latent_query = m.q_lora_rank > 0 ? add({mul(C, m.q_lora_rank), m.q_lora_rank, mul(m.q_lora_rank, q_heads)})
                                                 : mul(C, q_heads);
  const int64_t latent = add({latent_query, mul(C, m.kv_lora_rank + m.rope_dim), m.kv_lora_rank,
                              mul(m.kv_lora_rank, mul(c.n_head, m.nope_dim + m.value_dim)), mul(mul(c.n_head, m.value_dim), C)});
  // Gated DeltaNet: the q/k/v/z/b/a projection, the convolution, A_log and dt_bias, the gated
  // norm, the output.
  const LinearAttentionSpec& la = c.linear;
  const int64_t channels = add({mul(2, mul(la.key_heads, la.key_dim)), mul(la.value_heads, la.value_dim)});
  const int64_t values = mul(la.value_heads, la.value_dim);
  const int64_t linear = add({mul(C, add({channels, values, mul(2, la.value_heads)})), mul(channels, la.conv_kernel),
                              mul(2, la.value_heads), la.value_dim, mul(values, C)});
  const int64_t dense_ffn = add({ffn_weights, ffn_biases});
  // A mixture-of-experts feed-forward: the router, E experts and the shared ones, each a SwiGLU FFN.
  const int64_t moe_ffn = add({mul(c.moe.experts, C), mul(mul(c.moe.experts, 3 * C), c.moe.d_ff), mul(3 * C, c.moe.shared_d_ff),
                               c.moe.shared_gate ? C : 0});
  int64_t layers = 0;
  for (const LayerSpec& l : c.layers) {
    const int64_t mixer = l.mixer == MixerKind::latent_attention   ? latent
                          : l.mixer == MixerKind::linear_attention ? linear
                                                                   : attention;
    layers = add({layers, mixer, l.moe ? moe_ffn : dense_ffn, mul(2, norm_params)});
  }
  const int64_t embeddings = mul(c.vocab_size, C);
  const int64_t total = add({layers, embeddings, norm_params, c.positions == PositionKind::learned ? mul(c.n_positions, C) : 0,
                             c.tied_embeddings ? 0 : embeddings});
  if (overflow) return std::nullopt;
  return total;
}

}  // namespace

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& origin) {
  const json j = parse_object(text, origin);
  const ConfigFields f(j, origin);
  const std::string type = f.string_or("model_type", "");
  if (type.empty()) f.fail("missing field \"model_type\"");
  const Family& family = find_family(type, origin);
  ModelConfig c;
  c.model_type = type;
  family.parse_config(f, c);
  c.stored_dtype = stored_dtype_of(f);
  c.quantization = quantization_of(f);
  if (int64_t(c.layers.size()) != c.n_layer)
    f.fail(fmt::format("{} layer types for {} layers", c.layers.size(), c.n_layer));
  // Each size is bounded on its own; together they must still count in 64 bits, as every size
  // derived from them (weights, caches, activations) is computed in int64_t.
  if (!checked_parameter_count(c))
    f.fail(fmt::format("the sizes (model width {}, {} heads of {}, FFN width {}, {} layers, vocabulary {}) make more than "
                       "2^63 parameters",
                       c.d_model, c.n_head, c.d_head, c.d_ff, c.n_layer, c.vocab_size));
  return c;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) { return from_json_text(read_text_file(path), path); }

std::vector<int32_t> ModelConfig::reachable_eos() const {
  std::vector<int32_t> ids;
  for (int32_t id : eos_tokens)
    if (id < vocab_size) ids.push_back(id);
  return ids;
}

int64_t ModelConfig::parameter_count() const {
  const std::optional<int64_t> n = checked_parameter_count(*this);
  if (!n)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ModelConfig::parameter_count: the {} model's sizes make more than 2^63 parameters", model_type));
  return *n;
}

GenerationDefaults GenerationDefaults::from_json_file(const std::string& path) {
  GenerationDefaults g;
  if (!std::filesystem::exists(path)) return g;
  const json j = parse_object(read_text_file(path), path);
  const ConfigFields f(j, path);
  if (f.has("do_sample")) g.do_sample = f.boolean_or("do_sample", true);
  auto number = [&](const char* key, std::optional<float>& out) {
    if (const std::optional<double> v = f.optional_number(key)) {
      if (*v < 0) f.fail(fmt::format("field \"{}\" must be ≥ 0, got {}", key, *v));
      out = float(*v);
    }
  };
  number("temperature", g.temperature);
  number("top_p", g.top_p);
  number("min_p", g.min_p);
  number("repetition_penalty", g.repetition_penalty);
  if (f.has("top_k")) g.top_k = int(f.non_negative_int_or("top_k", 0));
  g.eos_tokens = f.token_list("eos_token_id");
  return g;
}

}  // namespace ding
