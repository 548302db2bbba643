#include "config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ding/error.h"

namespace ding {

namespace {

using json = nlohmann::json;

// Field access with errors that name the file, the field and what was found.
class Fields {
 public:
  Fields(const json& j, const std::string& origin) : j_(j), origin_(origin) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::parse, fmt::format("{}: {}", origin_, what));
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t positive_int(const char* key) const {
    if (!has(key)) fail(fmt::format("missing field \"{}\"", key));
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t(1) << 31))
      fail(fmt::format("field \"{}\" must be a positive integer, got {}", key, v.dump()));
    return v.get<int64_t>();
  }
  int64_t positive_int_or(const char* key, int64_t fallback) const { return has(key) ? positive_int(key) : fallback; }
  double positive_number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number() || !(v.get<double>() > 0)) fail(fmt::format("field \"{}\" must be a positive number, got {}", key, v.dump()));
    return v.get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(fmt::format("field \"{}\" must be true or false, got {}", key, j_.at(key).dump()));
    return j_.at(key).get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(fmt::format("field \"{}\" must be a string, got {}", key, j_.at(key).dump()));
    return j_.at(key).get<std::string>();
  }
  int32_t token_or(const char* key) const {
    if (!has(key)) return -1;
    const json& v = j_.at(key);
    if (v.is_array() && !v.empty()) return token_value(key, v[0]);  // some configs list several
    return token_value(key, v);
  }

 private:
  int32_t token_value(const char* key, const json& v) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(fmt::format("field \"{}\" must be a token id, got {}", key, v.dump()));
    return int32_t(v.get<int64_t>());
  }
  const json& j_;
  const std::string& origin_;
};

ModelConfig parse_gpt2(const Fields& f) {
  ModelConfig c;
  c.model_type = "gpt2";
  c.n_layer = f.positive_int("n_layer");
  c.n_head = f.positive_int("n_head");
  c.n_kv_head = c.n_head;
  c.d_model = f.positive_int("n_embd");
  if (c.d_model % c.n_head != 0)
    f.fail(fmt::format("n_embd = {} is not divisible by n_head = {}", c.d_model, c.n_head));
  c.d_head = c.d_model / c.n_head;
  c.d_ff = f.positive_int_or("n_inner", 4 * c.d_model);
  c.n_positions = f.positive_int_or("n_positions", f.positive_int_or("n_ctx", 1024));
  c.vocab_size = f.positive_int("vocab_size");
  c.norm = NormKind::layer_norm;
  c.norm_eps = float(f.positive_number_or("layer_norm_epsilon", 1e-5));
  c.positions = PositionKind::learned;
  c.ffn = FfnKind::mlp;
  const std::string act = f.string_or("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    f.fail(fmt::format("activation_function \"{}\" is not supported (ding has the tanh GELU: gelu_new, "
                       "gelu_pytorch_tanh)", act));
  c.activation = ops::Activation::gelu_tanh;
  c.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  if (!f.boolean_or("scale_attn_weights", true)) f.fail("scale_attn_weights = false is not supported");
  if (f.boolean_or("scale_attn_by_inverse_layer_idx", false)) f.fail("scale_attn_by_inverse_layer_idx = true is not supported");
  if (f.boolean_or("add_cross_attention", false)) f.fail("add_cross_attention = true (an encoder-decoder) is not supported");
  c.bos_token = f.token_or("bos_token_id");
  c.eos_token = f.token_or("eos_token_id");
  for (int32_t t : {c.bos_token, c.eos_token})
    if (t >= c.vocab_size) f.fail(fmt::format("token id {} is outside the vocabulary of {}", t, c.vocab_size));
  return c;
}

}  // namespace

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::parse, fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: not a JSON object", origin));
  const Fields f(j, origin);
  const std::string type = f.string_or("model_type", "");
  if (type.empty()) f.fail("missing field \"model_type\"");
  if (type == "gpt2") return parse_gpt2(f);
  f.fail(fmt::format("unknown model_type \"{}\" (supported: gpt2)", type));
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, fmt::format("{}: cannot open", path));
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path);
}

int64_t ModelConfig::parameter_count() const {
  const int64_t C = d_model, kv = n_kv_head * d_head;
  const int64_t attention = C * (C + 2 * kv) + C * C + (C + 2 * kv) + C;  // qkv + out projections, biases
  const int64_t feed_forward = (ffn == FfnKind::swiglu ? 3 : 2) * C * d_ff + d_ff + C;
  const int64_t norms = 2 * 2 * C;
  int64_t total = n_layer * (attention + feed_forward + norms) + vocab_size * C + 2 * C;
  if (positions == PositionKind::learned) total += n_positions * C;
  if (!tied_embeddings) total += vocab_size * C;
  return total;
}

}  // namespace ding
