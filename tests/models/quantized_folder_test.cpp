// 8-bit model folders: ding-quantize's (write_quantized_folder) load to the logits of quantizing the
// original at load, on every fixture and available backend; corrupt or missing scales and unknown
// layout versions are errors naming what is wrong; block-wise fp8 checkpoints (quantization_config
// quant_method "fp8", "T_scale_inv" per block, in every layout transformers reads) load to their
// dequantized values, and their damaged scales and unknown fields are errors naming what is wrong.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "ding/ding.h"
#include "ding/models/model.h"
#include "ding/models/quantized_folder.h"
#include "ding/models/safetensors.h"
#include "ding/models/session.h"
#include "expect_error.h"
#include "hostile/folder_edit.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = fs::path(DING_TEST_DATA);

std::vector<fs::path> all_fixtures() {
  std::vector<fs::path> folders;
  for (const char* set : {"gpt2-fixtures", "llama-fixtures", "moe-fixtures", "hybrid-fixtures"})
    if (fs::exists(kData / set))
      for (const auto& e : fs::directory_iterator(kData / set))
        if (e.is_directory()) folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  return folders;
}

// A temporary folder named after the running test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("ding_qfolder_") + info->name() + "_" + tag;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    path = fs::temp_directory_path() / name;
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<float> prompt_logits(const Model& model) {
  std::vector<Token> prompt;
  for (int i = 0; i < 9; ++i) prompt.push_back(Token((i * 37 + 5) % model.config().vocab_size));
  Session session(model, {});
  std::vector<float> logits;
  session.prefill(0, prompt, &logits);
  return logits;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return err / ref;
}

struct FolderParam {
  fs::path folder;
  std::string backend;
};

class QuantizedFolder : public ::testing::TestWithParam<FolderParam> {};

// Quantized by output row from the same values, the folder and the at-load path hold the same
// bytes, so the logits are equal exactly (f32 compute holds every fixture's stored values).
TEST_P(QuantizedFolder, LoadsToTheLogitsOfQuantizingTheOriginalAtLoad) {
  const FolderParam& p = GetParam();
  if (!registry::is_available(p.backend)) GTEST_SKIP() << "backend " << p.backend << " has no device here";
  for (DType format : {DType::i8, DType::f8e4m3}) {
    TempDir out(std::string(dtype_name(format)));
    const QuantizedFolderStats stats = write_quantized_folder(p.folder.string(), out.path.string(), format);
    EXPECT_GT(stats.tensors_quantized, 0);
    EXPECT_LT(stats.bytes_after, stats.bytes_before);
    Device& device = Device::open(p.backend);
    const Model at_load = Model::load(p.folder.string(), device, {.dtype = DType::f32, .quantize = format});
    const Model stored = Model::load(out.path.string(), device, {.dtype = DType::f32});
    ASSERT_EQ(stored.quantized(), std::optional(format)) << "the folder's own format is the default";
    EXPECT_EQ(stored.weight_bytes(), at_load.weight_bytes());
    // The routed experts are stored narrow (read from the files as they are), the routers wide.
    const WeightFiles files = WeightFiles::open_folder(out.path.string());
    for (const auto& [name, tensor] : files.tensors()) {
      const bool routed_expert = name.find("experts.") != std::string::npos && name.find("shared") == std::string::npos &&
                                 name.ends_with(".weight");
      if (routed_expert) EXPECT_EQ(tensor->dtype, format) << name;
      if (name.ends_with("mlp.gate.weight")) EXPECT_NE(tensor->dtype, format) << name;
    }
    const std::vector<float> want = prompt_logits(at_load), got = prompt_logits(stored);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want) << dtype_name(format) << ": logits NMSE " << nmse(got, want);
    EXPECT_TRUE(fs::exists(out.path / "config.json"));
    if (fs::exists(p.folder / "tokenizer.json")) EXPECT_TRUE(fs::exists(out.path / "tokenizer.json"));
  }
}

std::vector<FolderParam> folder_params() {
  std::vector<FolderParam> params;
  for (const std::string& backend : registry::compiled_backends()) {
    if (backend == "ref") continue;
    for (const fs::path& folder : all_fixtures()) params.push_back({folder, backend});
  }
  return params;
}

std::string folder_name(const ::testing::TestParamInfo<FolderParam>& info) {
  std::string name = info.param.backend + "_" + info.param.folder.filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedFolder, ::testing::ValuesIn(folder_params()), folder_name);

// A safetensors file's header, parsed, edited and written back with the data as it was.
void edit_safetensors_header(const fs::path& path, const std::function<void(nlohmann::json&)>& edit) {
  hostile::Safetensors file(path);
  nlohmann::json header = nlohmann::json::parse(file.header);
  edit(header);
  file.header = header.dump();
  file.write(path);
}

// A quantized copy of the Llama GQA fixture, edited by each test.
class BadQuantizedFolder : public ::testing::Test {
 protected:
  TempDir dir{"int8"};
  const std::string q_proj = "model.layers.0.self_attn.q_proj.weight";
  void SetUp() override {
    write_quantized_folder((kData / "llama-fixtures" / "llama-gqa-f32").string(), dir.path.string(), DType::i8);
  }
  void load(const LoadOptions& options = {}) const { Model::load(dir.path.string(), Device::open("cpu"), options); }
  void edit_header(const std::function<void(nlohmann::json&)>& edit) const {
    edit_safetensors_header(dir.path / "model.safetensors", edit);
  }
};

TEST_F(BadQuantizedFolder, MissingScalesAreNamed) {
  edit_header([&](nlohmann::json& h) { h.erase(q_proj + "_scale"); });
  expect_error([&] { load(); }, ErrorCode::parse, {q_proj, "no scales", q_proj + "_scale"});
}

TEST_F(BadQuantizedFolder, ScalesOfTheWrongCountAreNamed) {
  edit_header([&](nlohmann::json& h) {  // the same bytes as twice as many bf16 values
    auto& s = h[q_proj + "_scale"];
    s["dtype"] = "BF16";
    s["shape"] = {2 * s["shape"][0].get<int64_t>()};
  });
  expect_error([&] { load(); }, ErrorCode::parse, {q_proj + "_scale", "values", "blocks of 1 ×"});
}

TEST_F(BadQuantizedFolder, ScalesOfAnIntegerDtypeAreRefused) {
  edit_header([&](nlohmann::json& h) { h[q_proj + "_scale"]["dtype"] = "I32"; });
  expect_error([&] { load(); }, ErrorCode::parse, {q_proj + "_scale", "must be f32, bf16 or f16"});
}

TEST_F(BadQuantizedFolder, NonFiniteOrNegativeScalesAreNamed) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -0.5f}) {
    hostile::Safetensors file(dir.path / "model.safetensors");
    const nlohmann::json header = nlohmann::json::parse(file.header);
    const size_t at = header[q_proj + "_scale"]["data_offsets"][0].get<size_t>() + 4 * 3;
    std::memcpy(file.data.data() + at, &bad, 4);
    file.write(dir.path / "model.safetensors");
    expect_error([&] { load(); }, ErrorCode::parse, {q_proj + "_scale", "at index 3", "finite and ≥ 0"});
  }
}

TEST_F(BadQuantizedFolder, UnknownLayoutVersionIsRefused) {
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(dir.path / "config.json"));
  cfg["quantization_config"]["format_version"] = kDingQuantizedFormat + 1;
  hostile::write_all(dir.path / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse,
               {"quantization_config", fmt::format("format_version {}", kDingQuantizedFormat + 1), "ding-quantize"});
}

TEST_F(BadQuantizedFolder, UnknownQuantizationMethodIsNamed) {
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(dir.path / "config.json"));
  cfg["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  hostile::write_all(dir.path / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {"quant_method 'awq'", "not one ding loads"});
}

TEST_F(BadQuantizedFolder, AnotherFormatThanTheFoldersIsRefused) {
  expect_error([&] { load({.quantize = DType::f8e4m3}); }, ErrorCode::invalid_argument,
               {"holds i8 weights", "not f8e4m3", "quantize the original folder"});
}

TEST_F(BadQuantizedFolder, EightBitTensorsWithoutAQuantizationConfigAreRefused) {
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(dir.path / "config.json"));
  cfg.erase("quantization_config");
  hostile::write_all(dir.path / "config.json", cfg.dump());
  expect_error([&] { load(); }, ErrorCode::parse, {q_proj, "8-bit weights need their scales"});
}

TEST_F(BadQuantizedFolder, WriterRefusesAQuantizedInputAnOccupiedOutputAndOtherFormats) {
  TempDir again("again");
  expect_error([&] { write_quantized_folder(dir.path.string(), again.path.string(), DType::i8); },
               ErrorCode::invalid_argument, {"already quantized"});
  expect_error([&] { write_quantized_folder((kData / "llama-fixtures" / "llama-gqa-f32").string(), dir.path.string(), DType::i8); },
               ErrorCode::invalid_argument, {"exists and is not an empty folder"});
  expect_error([&] { write_quantized_folder((kData / "llama-fixtures" / "llama-gqa-f32").string(), again.path.string(), DType::bf16); },
               ErrorCode::invalid_argument, {"int8 or fp8", "bf16"});
  EXPECT_FALSE(fs::exists(again.path)) << "a refused write leaves nothing behind";
}

TEST_F(BadQuantizedFolder, WriterNamesANonFiniteWeightAndLeavesNothing) {
  TempDir copy("copy"), out("out");
  fs::copy(kData / "llama-fixtures" / "llama-gqa-f32", copy.path);
  hostile::Safetensors file(copy.path / "model.safetensors");
  const nlohmann::json header = nlohmann::json::parse(file.header);
  const std::string name = "model.layers.1.mlp.up_proj.weight";
  const int64_t K = header[name]["shape"][1].get<int64_t>();
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(file.data.data() + header[name]["data_offsets"][0].get<size_t>() + 4 * size_t(5 * K + 2), &inf, 4);
  file.write(copy.path / "model.safetensors");
  expect_error([&] { write_quantized_folder(copy.path.string(), out.path.string(), DType::i8); }, ErrorCode::parse,
               {name, "NaN or ±Inf in output row 5"});
  EXPECT_FALSE(fs::exists(out.path)) << "a failed write removes the folder it created";
}

// write_safetensors' files read back through SafetensorsFile: every name, dtype, shape and byte.
TEST(WriteSafetensors, FilesReadBackAsWritten) {
  TempDir dir("st");
  fs::create_directories(dir.path);
  const fs::path path = dir.path / "t.safetensors";
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::vector<std::vector<char>> contents;
  std::vector<TensorToWrite> tensors;
  const std::pair<DType, std::vector<int64_t>> specs[] = {
      {DType::f32, {3, 5}}, {DType::i8, {7}}, {DType::bf16, {2, 3, 4}}, {DType::f8e4m3, {1, 9}}, {DType::i32, {0, 4}}};
  for (const auto& [dtype, shape] : specs) {
    size_t bytes = dtype_size(dtype);
    for (int64_t e : shape) bytes *= size_t(e);
    std::vector<char> values(bytes);
    for (char& c : values) c = char(rng());
    contents.push_back(values);
    tensors.push_back({fmt::format("t{}", tensors.size()), dtype, shape,
                       [values](char* out) { std::memcpy(out, values.data(), values.size()); }});
  }
  write_safetensors(path.string(), tensors, {{"format", "pt"}});
  const auto file = SafetensorsFile::open(path.string());
  ASSERT_EQ(file->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StoredTensor& t = file->tensors().at(tensors[i].name);
    EXPECT_EQ(t.dtype, tensors[i].dtype) << t.name;
    EXPECT_EQ(t.shape, tensors[i].shape) << t.name;
    ASSERT_EQ(t.bytes, contents[i].size()) << t.name;
    if (t.bytes > 0) EXPECT_EQ(std::memcmp(t.data, contents[i].data(), t.bytes), 0) << t.name;
  }
  const DType unnamed = static_cast<DType>(200);  // no dtype of ding's lacks a safetensors name
  expect_error([&] { write_safetensors((dir.path / "u.safetensors").string(), {{"x", unnamed, {1}, [](char*) {}}}, {}); },
               ErrorCode::invalid_argument, {"'x'", "safetensors cannot name"});
  expect_error([&] { write_safetensors((dir.path / "no" / "such" / "dir.safetensors").string(), tensors, {}); },
               ErrorCode::io, {"cannot create"});
}

// How write_fp8_block_checkpoint lays a checkpoint out.
struct Fp8Layout {
  int64_t block_rows = 16, block_cols = 16;  // weight_block_size; 0 × 0: null, one scale per tensor, stored []
  DType scales = DType::f32;                 // of "T_scale_inv"
  bool power_of_two = false;                 // scales rounded up to powers of two (scale_fmt ue8m0)
  std::set<std::string> keep_wide;           // modules_to_not_convert: their weights stay as stored
};

// A block-wise fp8 checkpoint as DeepSeek and Qwen publish them, made from a fixture: every 2-D
// projection ("_proj.weight") in E4M3 with scale_inv per block, and beside it the same model with
// those weights dequantized to f32 (q · scale): the values the checkpoint stands for.
void write_fp8_block_checkpoint(const fs::path& from, const fs::path& fp8, const fs::path& dequantized,
                                const Fp8Layout& layout = {}) {
  const WeightFiles files = WeightFiles::open_folder(from.string());
  std::vector<TensorToWrite> narrow, wide;
  nlohmann::json not_converted = nlohmann::json::array({"lm_head"});
  for (const auto& [name, t] : files.tensors()) {
    std::vector<float> values(size_t(t->numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(load_element(t->data, t->dtype, int64_t(i)));
    const std::string module = name.substr(0, name.rfind('.'));
    const bool kept = layout.keep_wide.count(module) > 0;
    if (kept) not_converted.push_back(module);
    if (t->shape.size() != 2 || name.find("_proj.weight") == std::string::npos || kept) {
      auto copy = [values](char* bytes) { std::memcpy(bytes, values.data(), values.size() * sizeof(float)); };
      narrow.push_back({name, DType::f32, t->shape, copy});
      wide.push_back({name, DType::f32, t->shape, copy});
      continue;
    }
    const int64_t R = t->shape[0], C = t->shape[1];
    const int64_t block_rows = layout.block_rows ? layout.block_rows : R, block_cols = layout.block_cols ? layout.block_cols : C;
    const int64_t br = (R + block_rows - 1) / block_rows, bc = (C + block_cols - 1) / block_cols;
    std::vector<float> scale_inv(size_t(br * bc), 0.0f), dequant(values.size());
    std::vector<uint8_t> q(values.size());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        float& s = scale_inv[size_t(r / block_rows * bc + c / block_cols)];
        s = std::max(s, std::fabs(values[size_t(r * C + c)]) / 448.0f);
      }
    std::vector<char> scale_bytes(scale_inv.size() * dtype_size(layout.scales));
    for (size_t i = 0; i < scale_inv.size(); ++i) {
      if (layout.power_of_two && scale_inv[i] > 0) scale_inv[i] = std::exp2(std::ceil(std::log2(scale_inv[i])));
      store_element(scale_bytes.data(), layout.scales, int64_t(i), scale_inv[i]);
      scale_inv[i] = float(load_element(scale_bytes.data(), layout.scales, int64_t(i)));  // as stored
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const float s = scale_inv[size_t(r / block_rows * bc + c / block_cols)];
        const f8e4m3 v = f32_to_f8e4m3(s > 0 ? values[size_t(r * C + c)] / s : 0.0f);
        q[size_t(r * C + c)] = v.bits;
        dequant[size_t(r * C + c)] = f8e4m3_to_f32(v) * s;
      }
    narrow.push_back({name, DType::f8e4m3, t->shape, [q](char* bytes) { std::memcpy(bytes, q.data(), q.size()); }});
    const std::vector<int64_t> scale_shape = layout.block_rows ? std::vector<int64_t>{br, bc} : std::vector<int64_t>{};
    narrow.push_back({module + ".weight_scale_inv", layout.scales, scale_shape, [scale_bytes](char* bytes) {
                        std::memcpy(bytes, scale_bytes.data(), scale_bytes.size());
                      }});
    wide.push_back({name, DType::f32, t->shape,
                    [dequant](char* bytes) { std::memcpy(bytes, dequant.data(), dequant.size() * sizeof(float)); }});
  }
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(from / "config.json"));
  for (const fs::path& dir : {fp8, dequantized}) {
    fs::create_directories(dir);
    write_safetensors((dir / "model.safetensors").string(), dir == fp8 ? narrow : wide, {});
  }
  hostile::write_all(dequantized / "config.json", cfg.dump());
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                {"modules_to_not_convert", not_converted}};
  cfg["quantization_config"]["weight_block_size"] =
      layout.block_rows ? nlohmann::json::array({layout.block_rows, layout.block_cols}) : nlohmann::json();
  if (layout.power_of_two) cfg["quantization_config"]["scale_fmt"] = "ue8m0";
  hostile::write_all(fp8 / "config.json", cfg.dump());
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json cfg = nlohmann::json::parse(hostile::read_all(dir / "config.json"));
  edit(cfg);
  hostile::write_all(dir / "config.json", cfg.dump());
}

TEST(BlockFp8Checkpoint, LoadsWithinTheFp8BoundOfItsDequantizedValues) {
  TempDir fp8("fp8"), dequantized("wide");
  write_fp8_block_checkpoint(kData / "llama-fixtures" / "llama-gqa-f32", fp8.path, dequantized.path);
  Device& cpu = Device::open("cpu");
  const std::vector<float> want = prompt_logits(Model::load(dequantized.path.string(), cpu, {.dtype = DType::f32}));
  // By default its projections stay E4M3, with one scale per row instead of per block (the
  // kernels' layout): values requantized from their dequantized f32, within the fp8 bound.
  const Model as_fp8 = Model::load(fp8.path.string(), cpu, {.dtype = DType::f32});
  EXPECT_EQ(as_fp8.quantized(), std::optional(DType::f8e4m3));
  EXPECT_EQ(as_fp8.weights().layers[0].attention.qkv_w.dtype, DType::f8e4m3);
  const double fp8_err = nmse(prompt_logits(as_fp8), want);
  EXPECT_LE(fp8_err, 2e-2) << "fp8 row scales against the block-scaled values";
  // Quantized to int8 per row instead: every block scale applied while widening (the layers'
  // norms and embeddings are stored f32 and unaffected), then int8's error alone.
  const double int8_err = nmse(prompt_logits(Model::load(fp8.path.string(), cpu, {.dtype = DType::f32, .quantize = DType::i8})), want);
  EXPECT_LE(int8_err, 1e-3) << "int8 row scales against the block-scaled values";
  std::printf("[ fp8 blocks] requantized per row: fp8 NMSE %.3g, int8 NMSE %.3g\n", fp8_err, int8_err);
}

// Layouts as published and as transformers reads them. The checkpoint widens to exactly its
// dequantized values (q · scale in f32), so it loads to the same bytes, and logits, as its
// dequantized twin quantized at load: any scale applied to the wrong block would show.
struct Fp8LayoutParam {
  std::string name;
  Fp8Layout layout;
  bool block_size_absent = false;  // weight_block_size left out: transformers' 128 × 128
  std::string activation_scheme = "dynamic";
};

class BlockFp8Layouts : public ::testing::TestWithParam<Fp8LayoutParam> {};

TEST_P(BlockFp8Layouts, LoadToTheBytesOfTheirDequantizedValues) {
  const Fp8LayoutParam& p = GetParam();
  TempDir fp8("fp8"), dequantized("wide");
  const fs::path fixture = kData / "llama-fixtures" / "llama-gqa-f32";  // q, o [64, 64]; k, v [32, 64]; up [96, 64]; down [64, 96]
  write_fp8_block_checkpoint(fixture, fp8.path, dequantized.path, p.layout);
  edit_config(fp8.path, [&](nlohmann::json& cfg) {
    if (p.block_size_absent) cfg["quantization_config"].erase("weight_block_size");
    cfg["quantization_config"]["activation_scheme"] = p.activation_scheme;
  });
  Device& cpu = Device::open("cpu");
  for (DType format : {DType::f8e4m3, DType::i8}) {
    const LoadOptions options{.dtype = DType::f32, .quantize = format};
    const Model want = Model::load(dequantized.path.string(), cpu, options);
    const Model got = Model::load(fp8.path.string(), cpu, format == DType::f8e4m3 ? LoadOptions{.dtype = DType::f32} : options);
    EXPECT_EQ(got.quantized(), std::optional(format));
    EXPECT_EQ(got.weights().layers[1].ffn.down_w.dtype, format);
    EXPECT_EQ(got.weight_bytes(), want.weight_bytes());
    EXPECT_EQ(prompt_logits(got), prompt_logits(want)) << dtype_name(format);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Published, BlockFp8Layouts,
    ::testing::Values(
        // Partial last blocks in both dims (64 = 40 + 24, 96 = 4 · 24, 32 < 40) and non-square blocks.
        Fp8LayoutParam{"blocks_24x40_f32", {.block_rows = 24, .block_cols = 40}},
        Fp8LayoutParam{"blocks_40x24_bf16_ue8m0", {.block_rows = 40, .block_cols = 24, .scales = DType::bf16, .power_of_two = true}},
        Fp8LayoutParam{"blocks_24x40_f16_ue8m0", {.block_rows = 24, .block_cols = 40, .scales = DType::f16, .power_of_two = true}},
        // [64, 128]: whole rows of blocks; every matrix here is narrower than 128.
        Fp8LayoutParam{"blocks_64x128_f32", {.block_rows = 64, .block_cols = 128}},
        // Absent, transformers' default of 128 × 128: one block for each of these matrices.
        Fp8LayoutParam{"block_size_absent_128", {.block_rows = 128, .block_cols = 128}, true},
        // null: one scale per tensor, stored as a 0-d tensor (FP8Linear's torch.tensor(1.0)).
        Fp8LayoutParam{"per_tensor_null", {.block_rows = 0, .block_cols = 0}},
        // A stored activation scale is unused: ding's activations stay in the compute dtype.
        Fp8LayoutParam{"activation_static", {}, false, "static"},
        Fp8LayoutParam{"activation_upper_case", {}, false, "DYNAMIC"}),
    [](const ::testing::TestParamInfo<Fp8LayoutParam>& info) { return info.param.name; });

// modules_to_not_convert: transformers leaves those layers nn.Linear, so their weights are stored
// wide; ding keeps them in the compute dtype too, unless asked for a format for every projection.
TEST(BlockFp8Checkpoint, ModulesNotConvertedKeepTheComputeDtype) {
  TempDir fp8("fp8"), dequantized("wide");
  Fp8Layout layout;
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) layout.keep_wide.insert(fmt::format("model.layers.1.self_attn.{}", proj));
  layout.keep_wide.insert("model.layers.0.mlp.down_proj");
  write_fp8_block_checkpoint(kData / "llama-fixtures" / "llama-gqa-f32", fp8.path, dequantized.path, layout);
  Device& cpu = Device::open("cpu");
  const Model model = Model::load(fp8.path.string(), cpu, {.dtype = DType::f32});
  EXPECT_EQ(model.quantized(), std::optional(DType::f8e4m3));
  const auto& layers = model.weights().layers;
  EXPECT_EQ(layers[0].attention.qkv_w.dtype, DType::f8e4m3);
  EXPECT_EQ(layers[1].attention.qkv_w.dtype, DType::f32);
  EXPECT_EQ(layers[0].ffn.down_w.dtype, DType::f32);
  EXPECT_EQ(layers[1].ffn.down_w.dtype, DType::f8e4m3);
  EXPECT_EQ(model.weights().lm_head.dtype, DType::f32);
  // The wide weights hold their stored values, exactly.
  const WeightFiles files = WeightFiles::open_folder(fp8.path.string());
  const StoredTensor& down = files.get("model.layers.0.mlp.down_proj.weight");
  std::vector<float> got(size_t(down.numel()));
  cpu.copy_to_host(cpu.default_stream(), got.data(), layers[0].ffn.down_w.data, got.size() * sizeof(float));
  cpu.default_stream().synchronize();
  EXPECT_EQ(std::memcmp(got.data(), down.data, down.bytes), 0);
  const std::vector<float> want = prompt_logits(Model::load(dequantized.path.string(), cpu, {.dtype = DType::f32}));
  EXPECT_LE(nmse(prompt_logits(model), want), 2e-2);
  const Model all_i8 = Model::load(fp8.path.string(), cpu, {.dtype = DType::f32, .quantize = DType::i8});
  EXPECT_EQ(all_i8.weights().layers[1].attention.qkv_w.dtype, DType::i8);
  EXPECT_EQ(all_i8.weights().layers[0].ffn.down_w.dtype, DType::i8);
}

// A block-wise fp8 copy of the Llama GQA fixture in 16 × 32 blocks (q_proj [64, 64]: scales [4, 2]),
// edited by each test.
class BadBlockFp8Checkpoint : public ::testing::Test {
 protected:
  TempDir fp8{"fp8"}, dequantized{"wide"};
  const std::string q_proj = "model.layers.0.self_attn.q_proj.weight";
  const std::string q_scales = "model.layers.0.self_attn.q_proj.weight_scale_inv";
  void SetUp() override {
    write_fp8_block_checkpoint(kData / "llama-fixtures" / "llama-gqa-f32", fp8.path, dequantized.path,
                               {.block_rows = 16, .block_cols = 32});
  }
  void load() const { Model::load(fp8.path.string(), Device::open("cpu"), {.dtype = DType::f32}); }
  void edit_header(const std::function<void(nlohmann::json&)>& edit) const {
    edit_safetensors_header(fp8.path / "model.safetensors", edit);
  }
  void set_scale(int64_t index, float value) const {
    hostile::Safetensors file(fp8.path / "model.safetensors");
    const nlohmann::json header = nlohmann::json::parse(file.header);
    std::memcpy(file.data.data() + header[q_scales]["data_offsets"][0].get<size_t>() + 4 * size_t(index), &value, 4);
    file.write(fp8.path / "model.safetensors");
  }
  std::string file() const { return (fp8.path / "model.safetensors").string(); }
};

TEST_F(BadBlockFp8Checkpoint, MissingScalesNameTheTensorAndFile) {
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  edit_header([&](nlohmann::json& h) { h.erase("model.layers.1.mlp.down_proj.weight_scale_inv"); });
  expect_error([&] { load(); }, ErrorCode::parse, {file(), name, "no scales", name + "_scale_inv", "fp8"});
}

TEST_F(BadBlockFp8Checkpoint, ScalesStoredTransposedAreRefused) {
  edit_header([&](nlohmann::json& h) { h[q_scales]["shape"] = {2, 4}; });  // the same 8 values
  expect_error([&] { load(); }, ErrorCode::parse, {file(), q_scales, "[2, 4]", "blocks of 16 × 32", "expected [4, 2]"});
}

TEST_F(BadBlockFp8Checkpoint, ScalesOfAnotherBlockSizeAreRefused) {
  edit_config(fp8.path, [](nlohmann::json& cfg) { cfg["quantization_config"]["weight_block_size"] = {16, 16}; });
  expect_error([&] { load(); }, ErrorCode::parse, {"weight_scale_inv", "values", "in blocks of 16 × 16 needs"});
}

TEST_F(BadBlockFp8Checkpoint, NonFiniteOrNegativeScalesAreNamed) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -0.25f}) {
    set_scale(5, bad);
    expect_error([&] { load(); }, ErrorCode::parse, {file(), q_scales, "at index 5", "finite and ≥ 0"});
  }
}

// transformers multiplies a block's codes by its scale, so a zero scale (index 5 of [4, 2]: rows
// 32…47, columns 32…63, whose codes are not zero) is a block of zeros there, not an error; ding
// loads the folder too.
TEST_F(BadBlockFp8Checkpoint, AZeroScaleIsNotAnError) {
  set_scale(5, 0.0f);
  load();
}

TEST_F(BadBlockFp8Checkpoint, ScalesOfAnIntegerDtypeAreRefused) {
  edit_header([&](nlohmann::json& h) { h[q_scales]["dtype"] = "I32"; });
  expect_error([&] { load(); }, ErrorCode::parse, {q_scales, "must be f32, bf16 or f16"});
}

TEST_F(BadBlockFp8Checkpoint, Fp8TensorsWithoutAQuantizationConfigAreRefused) {
  edit_config(fp8.path, [](nlohmann::json& cfg) { cfg.erase("quantization_config"); });
  expect_error([&] { load(); }, ErrorCode::parse, {file(), q_proj, "8-bit weights need their scales"});
}

TEST_F(BadBlockFp8Checkpoint, FieldsTransformersRefusesAreRefused) {
  const std::pair<nlohmann::json, std::vector<std::string>> cases[] = {
      {{{"activation_scheme", "tensor"}}, {"activation_scheme 'tensor'", "dynamic or static"}},
      {{{"weight_block_size", {128}}}, {"weight_block_size", "two positive integers", "[128]"}},
      {{{"weight_block_size", {0, 128}}}, {"weight_block_size", "two positive integers", "[0,128]"}},
      {{{"scale_fmt", "e8m0"}}, {"scale_fmt 'e8m0'", "float or ue8m0"}},
      {{{"fmt", "e5m2"}}, {"fmt 'e5m2'", "e4m3"}},
  };
  for (const auto& [field_set, parts] : cases) {
    const nlohmann::json& fields = field_set;  // a lambda below takes it; clang before 16 cannot capture a binding
    const std::string before = hostile::read_all(fp8.path / "config.json");
    edit_config(fp8.path, [&](nlohmann::json& cfg) { cfg["quantization_config"].update(fields); });
    try {
      load();
      ADD_FAILURE() << fields.dump() << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::parse) << e.what();
      EXPECT_NE(std::string(e.what()).find("quantization_config"), std::string::npos) << e.what();
      for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << " lacks " << part;
    }
    hostile::write_all(fp8.path / "config.json", before);
  }
}

// Other methods' tensors (packed 4-bit integers, per-channel scales, zero points) are not block-wise
// fp8: each is refused by name before any weight is read.
TEST_F(BadBlockFp8Checkpoint, OtherQuantizationMethodsAreRefusedByName) {
  for (const char* method : {"compressed-tensors", "gptq", "awq", "bitsandbytes", "fbgemm_fp8", "torchao", "mxfp4"}) {
    edit_config(fp8.path, [&](nlohmann::json& cfg) { cfg["quantization_config"]["quant_method"] = method; });
    expect_error([&] { load(); }, ErrorCode::parse, {fmt::format("quant_method '{}'", method), "not one ding loads"});
  }
}

}  // namespace
}  // namespace ding::testing
