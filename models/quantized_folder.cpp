#include "quantized_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "ding/error.h"
#include "ding/models/config.h"
#include "ding/models/families/family.h"
#include "ding/models/input_files.h"
#include "ding/models/layers/block.h"
#include "ding/models/model.h"
#include "ding/models/safetensors.h"
#include "weight_convert.h"
#include "weight_quantize.h"

namespace ding {

namespace {

namespace fs = std::filesystem;

// How a stored tensor is written: as it is, or quantized by output row (its rows, or its columns
// when the family reads it transposed).
struct Disposition {
  bool quantized = false;
  bool transposed = false;
};

// The stored tensors that feed only the weights LoadOptions::quantize stores narrow. A tensor
// that also feeds another weight (or is read in both orientations) stays as it is, and so does
// every tensor of a weight that has one such part: the loader then quantizes that weight itself.
std::map<const StoredTensor*, Disposition> dispositions(std::vector<WeightPlan>& plans, ModelWeights& weights) {
  std::set<const Tensor*> narrow;
  for (LayerWeights& layer : weights.layers)
    for (Tensor* t : projection_weights(layer)) narrow.insert(t);
  std::vector<bool> plan_ok(plans.size());
  std::map<const StoredTensor*, std::vector<size_t>> users;
  for (size_t i = 0; i < plans.size(); ++i) {
    const WeightPlan& p = plans[i];
    plan_ok[i] = narrow.count(p.target) && p.init == WeightInit::stored && p.stored_offset == 0.0f && p.shape.size() == 2;
    for (const WeightPart& part : p.parts) users[part.tensor].push_back(i);
  }
  auto quantizable = [&](const StoredTensor* t) {
    const bool float_matrix = t->shape.size() == 2 && (t->dtype == DType::f32 || t->dtype == DType::f16 || t->dtype == DType::bf16);
    if (!float_matrix) return false;
    std::set<bool> orientations;
    for (size_t i : users[t]) {
      if (!plan_ok[i]) return false;
      for (const WeightPart& part : plans[i].parts)
        if (part.tensor == t) orientations.insert(part.transpose);
    }
    return orientations.size() == 1;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (!plan_ok[i]) continue;
      for (const WeightPart& part : plans[i].parts)
        if (!quantizable(part.tensor)) {
          plan_ok[i] = false;
          changed = true;
          break;
        }
    }
  }
  std::map<const StoredTensor*, Disposition> out;
  for (auto& [t, plan_indices] : users) {
    Disposition d;
    d.quantized = quantizable(t);
    for (const WeightPart& part : plans[plan_indices[0]].parts)
      if (part.tensor == t) d.transposed = part.transpose;
    out[t] = d;
  }
  return out;
}

// q and scales of a stored float matrix by output row (rows, or columns when transposed), through
// quantize_row on the values widened to f32.
void quantize_tensor(const StoredTensor& t, bool transposed, DType to, char* q, float* scales) {
  const int64_t R = t.shape[0], C = t.shape[1];
  const int64_t outputs = transposed ? C : R, length = transposed ? R : C;
  const size_t element = dtype_size(t.dtype);
  std::atomic<bool> unreadable{false};
  std::atomic<int64_t> non_finite{-1};
#pragma omp parallel
  {
    std::vector<char> gathered(size_t(length) * element);
    std::vector<float> wide(static_cast<size_t>(length));
    std::vector<int8_t> row(static_cast<size_t>(length));
#pragma omp for schedule(dynamic, 16)
    for (int64_t o = 0; o < outputs; ++o) {
      const char* base = static_cast<const char*>(t.data);
      const bool read = transposed ? mapped_read(t.data, t.bytes, [&] {
        for (int64_t k = 0; k < length; ++k) std::memcpy(gathered.data() + k * element, base + (k * C + o) * element, element);
      })
                                   : mapped_read(base + o * C * element, size_t(C) * element,
                                                 [&] { std::memcpy(gathered.data(), base + o * C * element, size_t(C) * element); });
      if (!read) {
        unreadable = true;
        continue;
      }
      if (!weight_convert(wide.data(), DType::f32, gathered.data(), t.dtype, length)) {
        int64_t expected = -1;
        non_finite.compare_exchange_strong(expected, o);
        continue;
      }
      scales[o] = quantize_row(wide.data(), length, to, row.data());
      if (transposed)
        for (int64_t k = 0; k < length; ++k) q[k * C + o] = char(row[size_t(k)]);
      else
        std::memcpy(q + o * C, row.data(), size_t(C));
    }
  }
  if (unreadable) throw_mapped_read_failed(t);
  if (non_finite >= 0)
    throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' {} holds NaN or ±Inf in output row {}; 8-bit values cannot",
                                              t.file, t.name, t.shape_str(), non_finite.load()));
}

// config.json with the quantization_config that says how to read the folder.
std::string annotated_config(const std::string& path, DType to) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(read_text_file(path));
  config["quantization_config"] = {
      {"quant_method", "ding"},
      {"format_version", kDingQuantizedFormat},
      {"weights", to == DType::i8 ? "int8" : "float8_e4m3fn"},
      {"scales", "float32 per output row, tensor T's in T_scale"},
      {"quantized", "the tensors feeding the projections of attention, latent and linear attention and of dense and "
                    "shared-expert MLPs; the others as the original folder stores them"},
  };
  return config.dump(2) + "\n";
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw Error(ErrorCode::io, fmt::format("{}: cannot be written", path.string()));
}

}  // namespace

QuantizedFolderStats write_quantized_folder(const std::string& in, const std::string& out, DType to) {
  if (to != DType::i8 && to != DType::f8e4m3)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding-quantize: weights quantize to int8 or fp8 (f8e4m3), not {}", dtype_name(to)));
  if (!fs::is_directory(in)) throw Error(ErrorCode::io, fmt::format("model folder {}: not a directory", in));
  std::error_code ec;
  if (fs::exists(out) && fs::equivalent(in, out, ec))
    throw Error(ErrorCode::invalid_argument, fmt::format("ding-quantize: the output folder {} is the input folder", out));
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out)))
    throw Error(ErrorCode::invalid_argument, fmt::format("ding-quantize: {} exists and is not an empty folder", out));

  const std::string config_path = (fs::path(in) / "config.json").string();
  const ModelConfig config = ModelConfig::from_json_file(config_path);
  if (config.quantization)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: the model is already quantized (quantization_config); quantize the original folder", config_path));
  const WeightFiles files = WeightFiles::open_folder(in);
  ModelWeights scratch;
  std::vector<WeightPlan> plans = find_family(config.model_type, in).weight_plans(config, &files, scratch);
  const std::map<const StoredTensor*, Disposition> how = dispositions(plans, scratch);

  QuantizedFolderStats stats;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, stored] : files.tensors()) {
    const StoredTensor* const t = stored;  // a variable the lambdas below can capture (not a binding)
    stats.bytes_before += t->bytes;
    const auto it = how.find(t);
    if (it == how.end() || !it->second.quantized) {
      ++stats.tensors_copied;
      stats.bytes_after += t->bytes;
      tensors.push_back({name, t->dtype, t->shape, [t](char* bytes) {
                           if (!mapped_read(t->data, t->bytes, [&] { std::memcpy(bytes, t->data, t->bytes); }))
                             throw_mapped_read_failed(*t);
                         }});
      continue;
    }
    if (files.has(name + "_scale"))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: tensor '{}_scale' exists already; the quantized folder would need that name", t->file, name));
    ++stats.tensors_quantized;
    const bool transposed = it->second.transposed;
    const int64_t outputs = transposed ? t->shape[1] : t->shape[0];
    stats.bytes_after += size_t(t->numel()) + size_t(outputs) * sizeof(float);
    // The values and the scales come from one pass over the tensor: the scales are kept for the
    // entry that follows it.
    auto scales = std::make_shared<std::vector<float>>();
    tensors.push_back({name, to, t->shape, [t, transposed, to, outputs, scales](char* bytes) {
                         scales->resize(size_t(outputs));
                         quantize_tensor(*t, transposed, to, bytes, scales->data());
                       }});
    tensors.push_back({name + "_scale", DType::f32, {outputs}, [scales](char* bytes) {
                         std::memcpy(bytes, scales->data(), scales->size() * sizeof(float));
                       }});
  }

  const bool created = !fs::exists(out);
  try {
    fs::create_directories(out);
    write_safetensors((fs::path(out) / "model.safetensors").string(), tensors,
                      {{"format", "pt"}, {"ding_quantized", std::to_string(kDingQuantizedFormat)}});
    write_text(fs::path(out) / "config.json", annotated_config(config_path, to));
    for (const fs::directory_entry& e : fs::directory_iterator(in)) {
      const std::string file = e.path().filename().string();
      const bool weights = e.path().extension() == ".safetensors" || file == "model.safetensors.index.json";
      if (e.is_regular_file() && !weights && file != "config.json") fs::copy_file(e.path(), fs::path(out) / file);
    }
  } catch (const fs::filesystem_error& e) {
    if (created) fs::remove_all(out, ec);
    throw Error(ErrorCode::io, fmt::format("ding-quantize: writing {}: {}", out, e.what()));
  } catch (...) {
    if (created) fs::remove_all(out, ec);
    else for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) fs::remove_all(e.path(), ec);
    throw;
  }
  return stats;
}

}  // namespace ding
