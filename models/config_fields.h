// ConfigFields: typed access to a config.json object whose errors name the file, the field and
// what was found. The families read their fields through it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ding {

// Far beyond any published decoder (Llama 3.1 405B has 126 layers), and small enough that the
// per-layer specs and weight views a config implies take a few MB.
inline constexpr int64_t kMaxLayers = 4096;

class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& j, const std::string& origin) : j_(j), origin_(origin) {}

  [[noreturn]] void fail(const std::string& what) const;
  const std::string& origin() const { return origin_; }
  // Present and not null.
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool is_null(const char* key) const { return j_.contains(key) && j_.at(key).is_null(); }
  const nlohmann::json& at(const char* key) const { return j_.at(key); }
  // A nested object, e.g. rope_scaling; its messages name "outer.key".
  ConfigFields object(const char* key) const;

  int64_t positive_int(const char* key) const;
  // A layer count: a positive integer of at most kMaxLayers, since per-layer structures are
  // allocated from it before any weight is read.
  int64_t layer_count(const char* key) const;
  int64_t positive_int_or(const char* key, int64_t fallback) const;
  int64_t non_negative_int_or(const char* key, int64_t fallback) const;
  double positive_number(const char* key) const;
  double positive_number_or(const char* key, double fallback) const;
  std::optional<double> optional_number(const char* key) const;
  // A positive number that stays positive and finite as a float (an epsilon of 1e-50 or 1e39 is an error).
  float positive_float_or(const char* key, float fallback) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  // A token id or a list of them (eos_token_id may be either); absent: empty.
  std::vector<int32_t> token_list(const char* key) const;
  // A list of strings (layer_types); absent: empty.
  std::vector<std::string> string_list(const char* key) const;

 private:
  int32_t token_value(const char* key, const nlohmann::json& v) const;
  const nlohmann::json& j_;
  std::string origin_;
};

}  // namespace ding
