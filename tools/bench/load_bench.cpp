#include "load_bench.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "../gpu_tuning.h"
#include "ding/ding.h"
#include "ding/models/safetensors.h"
#include "ding/models/weight_upload.h"

namespace ding::bench {
namespace {

DType parse_float_dtype(const std::string& s, const char* flag) {
  if (s == "f32") return DType::f32;
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  throw Error(ErrorCode::invalid_argument, fmt::format("{} '{}' is not f32, f16 or bf16", flag, s));
}

// The GPT-2 family's tensors as GPT2Model saves them (Radford et al. 2019: 50257 tokens, 1024
// positions, an MLP 4× the width); the Conv1D weights are stored [in, out].
struct Gpt2Shape {
  const char* name;
  int64_t layers, width;
};
constexpr Gpt2Shape kGpt2Shapes[] = {{"gpt2", 12, 768}, {"gpt2-medium", 24, 1024}, {"gpt2-large", 36, 1280}, {"gpt2-xl", 48, 1600}};

std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_tensors(const Gpt2Shape& s) {
  const int64_t C = s.width, F = 4 * C;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{"wte.weight", {50257, C}}, {"wpe.weight", {1024, C}}};
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    for (const auto& [name, shape] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
             {"ln_1.weight", {C}}, {"ln_1.bias", {C}}, {"attn.c_attn.weight", {C, 3 * C}}, {"attn.c_attn.bias", {3 * C}},
             {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}}, {"ln_2.weight", {C}}, {"ln_2.bias", {C}},
             {"mlp.c_fc.weight", {C, F}}, {"mlp.c_fc.bias", {F}}, {"mlp.c_proj.weight", {F, C}}, {"mlp.c_proj.bias", {C}}})
      t.push_back({h + name, shape});
  }
  t.push_back({"ln_f.weight", {C}});
  t.push_back({"ln_f.bias", {C}});
  return t;
}

// Random N(0, 0.02²) values (the scale of GPT-2's initialisation) in the stored dtype.
void write_gpt2(const std::string& dir, const std::string& shape_name, DType stored) {
  const Gpt2Shape* shape = nullptr;
  for (const Gpt2Shape& s : kGpt2Shapes)
    if (shape_name == s.name) shape = &s;
  if (shape == nullptr) throw Error(ErrorCode::invalid_argument, fmt::format("--write-gpt2 '{}': not a GPT-2 shape", shape_name));
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const auto tensors = gpt2_tensors(*shape);
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, dims] : tensors) {
    size_t n = dtype_size(stored);
    for (int64_t d : dims) n *= size_t(d);
    header[name] = {{"dtype", stored == DType::f32 ? "F32" : stored == DType::f16 ? "F16" : "BF16"},
                    {"shape", dims},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  const std::string text = header.dump();
  const uint64_t length = text.size();
  std::ofstream out(fs::path(dir) / "model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint8_t> block(size_t(1) << 20);
  for (size_t left = offset; left > 0;) {
    const size_t bytes = std::min(left, block.size());
    for (size_t i = 0; i < bytes / dtype_size(stored); ++i) store_element(block.data(), stored, int64_t(i), normal(rng));
    out.write(reinterpret_cast<const char*>(block.data()), std::streamsize(bytes));
    left -= bytes;
  }
  fmt::print("wrote {} ({} tensors, {:.1f} MB of {} weights)\n", (fs::path(dir) / "model.safetensors").string(),
             tensors.size(), double(offset) / 1e6, dtype_name(stored));
}

// "VmRSS", "RssAnon", "RssFile", "VmHWM" from /proc/self/status, in bytes (0 where absent).
size_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return size_t(std::strtoull(line.c_str() + field.size() + 1, nullptr, 10)) << 10;
  return 0;
}

// This process's CPU time, all threads: under a loaded machine it shows what the load costs
// apart from waiting for a core.
struct CpuTime {
  double user, system;
};
CpuTime cpu_time() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {double(u.ru_utime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec), double(u.ru_stime.tv_sec) + 1e-6 * double(u.ru_stime.tv_usec)};
}

// One plan per stored tensor, in file order; 2-D GPT-2 Conv1D weights (c_attn, c_proj, c_fc)
// transposed to [out, in] as a model would load them.
std::vector<WeightPlan> plans_for(const WeightFiles& files, std::vector<Tensor>& targets) {
  std::vector<const StoredTensor*> stored;
  for (const auto& [name, t] : files.tensors()) stored.push_back(t);
  std::sort(stored.begin(), stored.end(), [](const StoredTensor* a, const StoredTensor* b) {
    return a->file != b->file ? a->file < b->file : a->data < b->data;
  });
  targets.assign(stored.size(), Tensor{});
  std::vector<WeightPlan> plans;
  for (size_t i = 0; i < stored.size(); ++i) {
    const StoredTensor& t = *stored[i];
    const bool conv1d = t.shape.size() == 2 && (t.name.find(".c_attn.") != std::string::npos ||
                                                t.name.find(".c_proj.") != std::string::npos ||
                                                t.name.find(".c_fc.") != std::string::npos);
    WeightPlan p{.name = t.name, .shape = t.shape, .parts = {{&t, conv1d}}, .target = &targets[i]};
    if (conv1d) std::swap(p.shape[0], p.shape[1]);
    plans.push_back(std::move(p));
  }
  return plans;
}

}  // namespace

int run_load(const LoadBenchOptions& o) {
  if (o.model_dir.empty()) throw Error(ErrorCode::invalid_argument, "ding-bench load: -m DIR is required");
  if (!o.write_gpt2.empty()) write_gpt2(o.model_dir, o.write_gpt2, parse_float_dtype(o.stored, "--stored"));
  Device& device = Device::open(o.backend);
  ding::tools::apply_gpu_tuning_from_environment(device);
  const DType dtype = parse_float_dtype(o.dtype, "--dtype");
  UploadOptions options{.dtype = dtype, .chunk_bytes = size_t(o.chunk_mib * double(1 << 20)), .check_values = !o.no_weight_check};
  fmt::print("load {} onto {} ({}) as {}, chunks of {} MiB{}\n", o.model_dir, device.caps().backend, device.caps().name,
             dtype_name(dtype), o.chunk_mib, o.no_weight_check ? ", values not checked" : "");

  std::vector<double> seconds;
  UploadStats stats;
  for (int r = 0; r < o.repeat; ++r) {
    // Opening (mapping, parsing the header) is part of a load.
    const auto start = std::chrono::steady_clock::now();
    const CpuTime cpu_start = cpu_time();
    const WeightFiles files = WeightFiles::open_folder(o.model_dir);
    std::vector<Tensor> targets;
    std::vector<WeightPlan> plans = plans_for(files, targets);
    Buffer arena;
    stats = upload_weights(device, plans, arena, options);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const CpuTime cpu_end = cpu_time();
    fmt::print("  run {}: {:.3f} s (upload {:.3f} s; CPU user {:.3f} s, system {:.3f} s)   RSS {:.0f} MB (anonymous {:.0f}, "
               "file {:.0f})\n",
               r + 1, seconds.back(), stats.seconds, cpu_end.user - cpu_start.user, cpu_end.system - cpu_start.system,
               double(status_bytes("VmRSS")) / 1e6, double(status_bytes("RssAnon")) / 1e6,
               double(status_bytes("RssFile")) / 1e6);
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double best = sorted.front(), median = sorted[sorted.size() / 2];
  fmt::print("{:.1f} MB stored → {:.1f} MB {}: best {:.3f} s, median {:.3f} s of {} ({:.2f} GB/s read, {:.2f} GB/s written at "
             "best); peak RSS {:.0f} MB\n",
             double(stats.bytes_read) / 1e6, double(stats.bytes_written) / 1e6, dtype_name(dtype), best, median, o.repeat,
             double(stats.bytes_read) / best / 1e9, double(stats.bytes_written) / best / 1e9,
             double(status_bytes("VmHWM")) / 1e6);
  return 0;
}

}  // namespace ding::bench
