// upload_weights on every compiled backend: stored f32/f16/bf16 values arrive in the compute
// dtype exactly as dtype.h's scalar conversions round them (straight, transposed, concatenated,
// and with chunks that split weights anywhere); NaN, ±Inf and values beyond the compute dtype are
// errors naming the tensor, its file and the element; parts that do not fit the weight are errors;
// generated weights are N(0, σ²), ones or zeros, reproducible for a seed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ding/ding.h"
#include "ding/models/safetensors.h"
#include "ding/models/weight_convert.h"
#include "ding/models/weight_upload.h"
#include "expect_error.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

uint64_t test_seed() {
  if (const char* s = std::getenv("DING_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

struct Stored {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::string safetensors_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::i8: return "I8";
    case DType::f8e4m3: return "F8_E4M3";
    default: return "BF16";
  }
}

void write_safetensors(const fs::path& path, const std::vector<Stored>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const Stored& t : tensors) {
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);  // little-endian hosts only, as the tests run
  out << text << data;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Random stored values that every compute dtype can hold: typical weights, values spread over
// many binades (f16 subnormals and underflow included), and exact rounding ties of bf16 and of
// f16 (normal and subnormal), so round-to-nearest-even is tested where it decides.
class Values {
 public:
  explicit Values(uint64_t seed) : rng_(seed) {}

  std::vector<uint8_t> bytes(DType dtype, int64_t n) {
    std::vector<uint8_t> out(size_t(n) * dtype_size(dtype));
    for (int64_t i = 0; i < n; ++i)
      do {
        // 16-bit stored values: half of them any bit pattern, so that every bit is exercised.
        if (dtype != DType::f32 && bits_(rng_) % 2) {
          const uint16_t b = uint16_t(bits_(rng_));
          std::memcpy(&out[size_t(i) * 2], &b, 2);
        } else {
          store_element(out.data(), dtype, i, candidate());
        }
      } while (!convertible_everywhere(float(load_element(out.data(), dtype, i))));
    return out;
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  // What every compute dtype holds, by dtype.h's own conversions (the code under test has its
  // own limit check).
  static bool convertible_everywhere(float v) {
    return std::isfinite(f16_to_f32(f32_to_f16(v))) && std::isfinite(bf16_to_f32(f32_to_bf16(v)));
  }
  float candidate() {
    const uint32_t r = uint32_t(bits_(rng_));
    const uint32_t sign = (r & 1u) << 31;
    switch (r >> 1 & 3u) {
      case 0: return normal_(rng_) * 0.02f;
      case 1: return normal_(rng_) * std::pow(10.0f, std::uniform_real_distribution<float>(-9.0f, 4.0f)(rng_));
      case 2: return std::bit_cast<float>(sign | (100u + r % 43u) << 23 | (r & 0x7f0000u) | 0x8000u);  // bf16 tie
      default:
        if (r & 8u) return std::bit_cast<float>(sign | (113u + r % 29u) << 23 | (r & 0x7fe000u) | 0x1000u);  // f16 tie
        return (sign ? -1.0f : 1.0f) * (float(r % 1024u) + 0.5f) * 0x1p-24f;  // f16 subnormal tie
    }
  }
  std::mt19937_64 rng_;
  std::uniform_int_distribution<uint64_t> bits_;
  std::normal_distribution<float> normal_;
};

// What the weight must hold: every element through dtype.h's scalar conversions.
std::vector<uint8_t> expected_weight(const WeightPlan& plan, DType dtype) {
  std::vector<uint8_t> out(size_t(numel(plan.shape)) * dtype_size(dtype));
  const int64_t width = numel(plan.shape) / plan.shape[0];
  int64_t row = 0;
  for (const WeightPart& part : plan.parts) {
    const StoredTensor& t = *part.tensor;
    if (part.transpose) {
      const int64_t K = t.shape[0], N = t.shape[1];
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) store_element(out.data(), dtype, (row + n) * K + k, load_element(t.data, t.dtype, k * N + n));
      row += N;
    } else {
      for (int64_t i = 0; i < t.numel(); ++i) store_element(out.data(), dtype, row * width + i, load_element(t.data, t.dtype, i));
      row += t.shape[0];
    }
  }
  return out;
}

std::vector<uint8_t> read_back(Device& device, const Tensor& t) {
  std::vector<uint8_t> host(t.nbytes());
  download(device.default_stream(), host.data(), t, host.size());
  return host;
}

class WeightUpload : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!registry::is_available(GetParam())) GTEST_SKIP() << "backend " << GetParam() << " has no device on this machine";
    dir_ = fs::temp_directory_path() /
           fmt::format("ding_weight_upload_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Device& device() { return Device::open(GetParam()); }
  // Writes `tensors` as the folder's model.safetensors and opens it.
  const WeightFiles& files(const std::vector<Stored>& tensors) {
    write_safetensors(dir_ / "model.safetensors", tensors);
    files_ = std::make_unique<WeightFiles>(WeightFiles::open_folder(dir_.string()));
    return *files_;
  }
  std::string file() const { return (dir_ / "model.safetensors").string(); }

  fs::path dir_;
  std::unique_ptr<WeightFiles> files_;
};

// Plans over a mixed set of stored tensors: straight (1-D, 2-D, 3-D), transposed (with edges that
// are not multiples of the 8 × 8 and 64 × 64 tiles), and one weight concatenating three parts.
struct MixedModel {
  std::vector<Stored> stored;
  std::vector<Tensor> targets;
  std::vector<WeightPlan> plans;

  MixedModel(Values& values, DType a, DType b) {
    auto add = [&](std::string name, DType d, std::vector<int64_t> shape) {
      stored.push_back({std::move(name), d, shape, values.bytes(d, numel(shape))});
    };
    add("bias", a, {77});
    add("square", b, {40, 24});
    add("cube", a, {3, 5, 7});
    add("conv", b, {150, 75});      // transposed to [75, 150]
    add("conv_small", a, {13, 6});  // transposed to [6, 13]
    add("q", a, {5, 12});
    add("k", b, {12, 7});           // transposed to [7, 12]
    add("v", b, {3, 12});
  }
  void plan(const WeightFiles& f) {
    targets.assign(6, Tensor{});
    auto part = [&](const char* name, bool transpose = false) { return WeightPart{&f.get(name), transpose}; };
    plans = {{"bias", {77}, {part("bias")}},
             {"square", {40, 24}, {part("square")}},
             {"cube", {3, 5, 7}, {part("cube")}},
             {"conv", {75, 150}, {part("conv", true)}},
             {"conv_small", {6, 13}, {part("conv_small", true)}},
             {"qkv", {15, 12}, {part("q"), part("k", true), part("v")}}};
    for (size_t i = 0; i < plans.size(); ++i) plans[i].target = &targets[i];
  }
};

TEST_P(WeightUpload, EveryDtypePairRoundsAsTheScalarConversions) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  Values values(seed);
  for (DType stored : kFloatTypes) {
    MixedModel m(values, stored, stored == DType::bf16 ? DType::f16 : DType::bf16);
    m.plan(files(m.stored));
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("stored {} → {}", dtype_name(stored), dtype_name(dtype)));
      Buffer arena;
      const UploadStats stats = upload_weights(device(), m.plans, arena, {.dtype = dtype});
      size_t written = 0;
      for (const WeightPlan& plan : m.plans) {
        ASSERT_EQ(plan.target->dtype, dtype);
        ASSERT_EQ(std::vector<int64_t>(plan.target->shape.begin(), plan.target->shape.begin() + plan.target->rank), plan.shape);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(plan.target->data) % 256, reinterpret_cast<uintptr_t>(arena.data()) % 256);
        EXPECT_TRUE(read_back(device(), *plan.target) == expected_weight(plan, dtype)) << "weight " << plan.name;
        written += plan.target->nbytes();
      }
      EXPECT_EQ(stats.bytes_written, written);
    }
  }
}

// Chunks of a few bytes to a few kilobytes end inside weights, inside transposed rows' runs and
// between parts; every cut must leave the same bytes.
TEST_P(WeightUpload, ChunksSplittingWeightsAnywhereGiveTheSameBytes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  Values values(seed);
  MixedModel m(values, DType::f16, DType::f32);
  m.plan(files(m.stored));
  for (DType dtype : kFloatTypes)
    for (size_t chunk : {size_t(1), size_t(7), size_t(100), size_t(1000), size_t(4097), size_t(1) << 20}) {
      SCOPED_TRACE(fmt::format("{} in chunks of {} bytes", dtype_name(dtype), chunk));
      Buffer arena;
      std::vector<size_t> progress;
      upload_weights(device(), m.plans, arena,
                     {.dtype = dtype, .progress = [&](size_t done, size_t) { progress.push_back(done); }, .chunk_bytes = chunk});
      for (const WeightPlan& plan : m.plans)
        EXPECT_TRUE(read_back(device(), *plan.target) == expected_weight(plan, dtype)) << "weight " << plan.name;
      ASSERT_FALSE(progress.empty());
      EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));
      EXPECT_LE(progress.back(), arena.size());
      if (chunk == 1) EXPECT_GT(progress.size(), m.plans.size());  // weights were split
    }
}

// One refused value in a straight and in a transposed tensor, for each stored dtype: the error
// names the file, the tensor, the value and its element, and the arena and targets are untouched.
TEST_P(WeightUpload, NanAndInfAreErrorsNamingTensorFileAndElement) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  Values values(seed);
  for (DType stored : kFloatTypes)
    for (bool transpose : {false, true})
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        const std::vector<int64_t> shape = {70, 45};
        std::vector<Stored> tensors = {{"fine", stored, {33}, values.bytes(stored, 33)},
                                       {"layer.w", stored, shape, values.bytes(stored, numel(shape))}};
        const int64_t i = int64_t(values.rng()() % 70), j = int64_t(values.rng()() % 45);
        store_element(tensors[1].bytes.data(), stored, i * 45 + j, bad);
        const WeightFiles& f = files(tensors);
        Tensor fine, w;
        std::vector<WeightPlan> plans = {{"fine", {33}, {{&f.get("fine")}}, WeightInit::stored, 0.02f, &fine},
                                         {"w", transpose ? std::vector<int64_t>{45, 70} : shape,
                                          {{&f.get("layer.w"), transpose}}, WeightInit::stored, 0.02f, &w}};
        const std::string value = std::isnan(bad) ? "NaN" : bad > 0 ? "+Inf" : "-Inf";
        SCOPED_TRACE(fmt::format("{} {} at [{}, {}]{}", dtype_name(stored), value, i, j, transpose ? " transposed" : ""));
        Buffer arena;
        expect_error([&] { upload_weights(device(), plans, arena, {.dtype = DType::bf16, .chunk_bytes = 512}); },
                     ErrorCode::parse, {file(), "'layer.w'", value, fmt::format("[{}, {}]", i, j)});
        EXPECT_EQ(arena.data(), nullptr);
        EXPECT_FALSE(fine.defined());
        EXPECT_FALSE(w.defined());
      }
}

// check_values = false (a trusted folder): NaN loads as NaN and a value beyond the compute dtype
// as +Inf, where the default refuses both.
TEST_P(WeightUpload, UncheckedValuesLoadAsTheyConvert) {
  for (bool transpose : {false, true}) {
    std::vector<Stored> tensors = {{"w", DType::f32, {16, 24}, std::vector<uint8_t>(16 * 24 * 4)}};
    store_element(tensors[0].bytes.data(), DType::f32, 5, NAN);
    store_element(tensors[0].bytes.data(), DType::f32, 30, 1e6);
    const WeightFiles& f = files(tensors);
    Tensor t;
    std::vector<WeightPlan> plans = {{"w", transpose ? std::vector<int64_t>{24, 16} : std::vector<int64_t>{16, 24},
                                      {{&f.get("w"), transpose}}, WeightInit::stored, 0.02f, &t}};
    Buffer arena;
    expect_error([&] { upload_weights(device(), plans, arena, {.dtype = DType::f16}); }, ErrorCode::parse, {"'w'", "NaN"});
    upload_weights(device(), plans, arena, {.dtype = DType::f16, .check_values = false});
    const std::vector<uint8_t> back = read_back(device(), t);
    // Stored elements 5 = [0, 5] and 30 = [1, 6]; transposed, they sit at [5, 0] and [6, 1] of [24, 16].
    EXPECT_TRUE(std::isnan(load_element(back.data(), DType::f16, transpose ? 5 * 16 : 5)));
    EXPECT_EQ(load_element(back.data(), DType::f16, transpose ? 6 * 16 + 1 : 30), INFINITY);
    EXPECT_EQ(load_element(back.data(), DType::f16, transpose ? 1 : 1), 0.0);
  }
}

// Finite values that round past the compute dtype's largest finite value: f32 → f16 and
// bf16 → f16 above 65519.99…, f32 → bf16 near FLT_MAX. The largest values that do fit pass.
TEST_P(WeightUpload, ValuesBeyondTheComputeDtypeAreErrors) {
  struct Case {
    DType stored, dtype;
    float too_big, fits;
  } cases[] = {{DType::f32, DType::f16, 65520.0f, std::nextafter(65520.0f, 0.0f)},
               {DType::f32, DType::f16, -1e9f, -65504.0f},
               {DType::bf16, DType::f16, 65536.0f, 65280.0f},
               {DType::f32, DType::bf16, std::numeric_limits<float>::max(), bf16_to_f32(bf16{0x7f7f})}};
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {} → {}", dtype_name(c.stored), c.too_big, dtype_name(c.dtype)));
    std::vector<Stored> tensors = {{"big", c.stored, {3, 9}, std::vector<uint8_t>(27 * dtype_size(c.stored))}};
    store_element(tensors[0].bytes.data(), c.stored, 20, c.fits);
    const WeightFiles& f = files(tensors);
    Tensor t;
    std::vector<WeightPlan> plans = {{"big", {3, 9}, {{&f.get("big")}}, WeightInit::stored, 0.02f, &t}};
    Buffer arena;
    upload_weights(device(), plans, arena, {.dtype = c.dtype});
    std::vector<uint8_t> fits(dtype_size(c.dtype));
    store_element(fits.data(), c.dtype, 0, c.fits);
    EXPECT_EQ(load_element(read_back(device(), t).data(), c.dtype, 20), load_element(fits.data(), c.dtype, 0));

    store_element(tensors[0].bytes.data(), c.stored, 22, c.too_big);
    const WeightFiles& g = files(tensors);
    plans[0].parts[0].tensor = &g.get("big");
    expect_error([&] { upload_weights(device(), plans, arena, {.dtype = c.dtype}); }, ErrorCode::parse,
                 {file(), "'big'", "[2, 4]", fmt::format("beyond {}", dtype_name(c.dtype))});
  }
}

// A weights file truncated by another process after it was mapped: the pages past its new end
// fault (SIGBUS) when read. Truncated before the upload, and midway (from the progress callback,
// after the first chunk), with the faults on every converting thread at once: an error naming the
// file and the tensor, the arena and targets untouched, and the process alive.
TEST_P(WeightUpload, AFileTruncatedWhileMappedIsAnErrorNamingIt) {
  const std::vector<int64_t> shape = {512, 1024};  // 2 MiB of f32: several conversion tasks
  for (bool midway : {false, true})
    for (bool transpose : {false, true}) {
      SCOPED_TRACE(fmt::format("{}{}", midway ? "truncated midway" : "truncated before", transpose ? ", transposed" : ""));
      const std::vector<Stored> tensors = {{"first", DType::f32, {1024}, std::vector<uint8_t>(4096)},
                                           {"layer.w", DType::f32, shape, std::vector<uint8_t>(size_t(numel(shape)) * 4)}};
      const WeightFiles& f = files(tensors);
      const uintmax_t data_start = fs::file_size(file()) - 4096 - size_t(numel(shape)) * 4;
      Tensor first, w;
      std::vector<WeightPlan> plans = {{"first", {1024}, {{&f.get("first")}}, WeightInit::stored, 0.02f, &first},
                                       {"w", transpose ? std::vector<int64_t>{1024, 512} : shape,
                                        {{&f.get("layer.w"), transpose}}, WeightInit::stored, 0.02f, &w}};
      UploadOptions options{.dtype = DType::f16, .chunk_bytes = 8192};
      if (midway) options.progress = [&](size_t, size_t) { fs::resize_file(file(), data_start + 4096); };
      else fs::resize_file(file(), data_start + 4096);
      Buffer arena;
      expect_error([&] { upload_weights(device(), plans, arena, options); }, ErrorCode::io,
                   {file(), "'layer.w'", fmt::format("held {} bytes", data_start + 4096 + size_t(numel(shape)) * 4),
                    fmt::format("now {} bytes", data_start + 4096)});
      EXPECT_EQ(arena.data(), nullptr);
      EXPECT_FALSE(w.defined());
    }
}

// The handler behind mapped_read catches only the reads it guards: a read of a truncated mapping
// outside mapped_read still ends the process (by SIGBUS, or a sanitizer's report of it).
TEST(MappedRead, AnUnguardedFaultStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path path = fs::temp_directory_path() / fmt::format("ding_mapped_read_{}.safetensors", getpid());
  write_safetensors(path, {{"w", DType::f32, {4096}, std::vector<uint8_t>(16384)}});
  const std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(path.string());
  const StoredTensor& t = f->tensors().at("w");
  fs::resize_file(path, 8);
  const volatile char* last = static_cast<const char*>(t.data) + t.bytes - 1;
  EXPECT_FALSE(mapped_read(t.data, t.bytes, [&] { (void)*last; }));
  EXPECT_EXIT(
      {
        (void)*last;
        std::_Exit(0);
      },
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }, "");
  fs::remove(path);
}

// The limits convert.h states, against dtype.h's scalar conversions.
TEST(WeightConvert, ConvertibleLimitsAreWhereTheScalarConversionsOverflow) {
  for (DType d : kFloatTypes) {
    const uint32_t limit = convertible_limit_bits(d);
    auto finite_after = [&](uint32_t bits) {
      const float v = std::bit_cast<float>(bits);
      return d == DType::f16 ? std::isfinite(f16_to_f32(f32_to_f16(v)))
             : d == DType::bf16 ? std::isfinite(bf16_to_f32(f32_to_bf16(v)))
                                : std::isfinite(v);
    };
    EXPECT_TRUE(finite_after(limit)) << dtype_name(d);
    EXPECT_FALSE(finite_after(limit + 1)) << dtype_name(d);
    EXPECT_TRUE(weight_convertible(std::bit_cast<float>(limit | 0x80000000u), d));
    EXPECT_FALSE(weight_convertible(NAN, d));
  }
}

TEST_P(WeightUpload, PartsThatDoNotFitTheWeightAreErrors) {
  Values values(test_seed());
  const WeightFiles& f = files({{"a", DType::f32, {4, 6}, values.bytes(DType::f32, 24)},
                                {"b", DType::bf16, {6, 3}, values.bytes(DType::bf16, 18)},
                                {"c", DType::f16, {2, 3, 6}, values.bytes(DType::f16, 36)}});
  Tensor t;
  auto attempt = [&](std::vector<int64_t> shape, std::vector<WeightPart> parts) {
    std::vector<WeightPlan> plans = {{"fused", std::move(shape), std::move(parts), WeightInit::stored, 0.02f, &t}};
    Buffer arena;
    upload_weights(device(), plans, arena, {});
  };
  const WeightPart a{&f.get("a")}, b_t{&f.get("b"), true}, c{&f.get("c")};
  attempt({7, 6}, {a, b_t});  // fits: 4 rows + 3 transposed rows of 6
  expect_error([&] { attempt({8, 6}, {a, b_t}); }, ErrorCode::parse, {file(), "'fused'", "'a'", "'b'", "7 rows, not 8"});
  expect_error([&] { attempt({4, 5}, {a}); }, ErrorCode::parse, {file(), "'a'", "[4, 6]", "after dim 0"});
  expect_error([&] { attempt({7, 4}, {a, b_t}); }, ErrorCode::parse, {file(), "'a'"});
  expect_error([&] { attempt({3, 7}, {b_t}); }, ErrorCode::parse, {file(), "'b'", "rows are 6 long"});
  expect_error([&] { attempt({2, 3, 6}, {{&f.get("c"), true}}); }, ErrorCode::parse, {file(), "'c'", "2-D"});
  expect_error([&] { attempt({4, 6}, {c}); }, ErrorCode::parse, {file(), "'c'", "after dim 0"});
}

// 8-bit tensors with block scales (block-wise fp8 checkpoints; ding's row scales are blocks of one
// row) widen to q · their block's scale, in f32 before the one rounding, with chunks small enough
// to split rows; a part's row range keeps its rows' scales.
TEST_P(WeightUpload, EightBitPartsWidenWithTheirBlockScales) {
  std::mt19937 rng{uint32_t(test_seed())};
  constexpr int64_t R = 10, C = 7, kBlockRows = 4, kBlockCols = 3;  // scales [3, 3]
  std::vector<uint8_t> ints(size_t(R * C)), e4m3(size_t(R * C)), scale_bytes(9 * sizeof(float));
  for (uint8_t& b : ints) b = uint8_t(int8_t(int(rng() % 255) - 127));
  for (uint8_t& b : e4m3)
    do b = uint8_t(rng()); while ((b & 0x7Fu) == 0x7Fu);  // E4M3's NaN codes are refused elsewhere
  std::vector<float> scales(9);
  for (float& v : scales) v = std::uniform_real_distribution<float>(0.01f, 2.0f)(rng);
  std::memcpy(scale_bytes.data(), scales.data(), scale_bytes.size());
  const WeightFiles& f = files({{"qi", DType::i8, {R, C}, ints}, {"qf", DType::f8e4m3, {R, C}, e4m3},
                                {"s", DType::f32, {3, 3}, scale_bytes}});
  const StoredTensor &qi = f.get("qi"), &qf = f.get("qf"), &s = f.get("s");
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor whole, range;
    std::vector<WeightPlan> plans = {
        {.name = "whole", .shape = {R, C},
         .parts = {{.tensor = &qi, .scales = &s, .block_rows = kBlockRows, .block_cols = kBlockCols}}, .target = &whole},
        {.name = "range", .shape = {6, C},
         .parts = {{.tensor = &qf, .row_begin = 3, .row_end = 9, .scales = &s, .block_rows = kBlockRows, .block_cols = kBlockCols}},
         .target = &range}};
    Buffer arena;
    upload_weights(device(), plans, arena, {.dtype = dtype, .chunk_bytes = 40});
    auto want = [&](const StoredTensor& t, int64_t first_row, int64_t rows) {
      std::vector<uint8_t> out(size_t(rows * C) * dtype_size(dtype));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t row = first_row + r;
          const float q = float(load_element(t.data, t.dtype, row * C + c));
          store_element(out.data(), dtype, r * C + c, double(q * scales[size_t(row / kBlockRows * 3 + c / kBlockCols)]));
        }
      return out;
    };
    EXPECT_EQ(read_back(device(), whole), want(qi, 0, R)) << dtype_name(dtype);
    EXPECT_EQ(read_back(device(), range), want(qf, 3, 6)) << dtype_name(dtype);
  }
}

// Row ranges of a stored matrix gathered in another order (Qwen3-Next's per-key-head groups into q,
// k, v, …) and a stored offset added before the one rounding (zero-centred norms as 1 + w), with
// chunks small enough to split the parts.
TEST_P(WeightUpload, RowRangesGatherAndStoredOffsetsShift) {
  Values values(test_seed());
  const WeightFiles& f = files({{"grouped", DType::bf16, {10, 6}, values.bytes(DType::bf16, 60)},
                                {"norm", DType::f32, {7}, values.bytes(DType::f32, 7)}});
  const StoredTensor& grouped = f.get("grouped");
  const StoredTensor& norm = f.get("norm");
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor gathered, shifted;
    std::vector<WeightPlan> plans = {
        {.name = "gathered", .shape = {6, 6},
         .parts = {{.tensor = &grouped, .row_begin = 4, .row_end = 6}, {.tensor = &grouped, .row_begin = 0, .row_end = 2},
                   {.tensor = &grouped, .row_begin = 8}},
         .target = &gathered},
        {.name = "shifted", .shape = {7}, .parts = {{.tensor = &norm}}, .target = &shifted, .stored_offset = 1.0f}};
    Buffer arena;
    upload_weights(device(), plans, arena, {.dtype = dtype, .chunk_bytes = 40});
    std::vector<uint8_t> want(size_t(36) * dtype_size(dtype));
    const int64_t rows[] = {4, 5, 0, 1, 8, 9};
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < 6; ++c) store_element(want.data(), dtype, r * 6 + c, load_element(grouped.data, grouped.dtype, rows[r] * 6 + c));
    EXPECT_EQ(read_back(device(), gathered), want) << dtype_name(dtype);
    std::vector<uint8_t> want_norm(size_t(7) * dtype_size(dtype));
    for (int64_t i = 0; i < 7; ++i)
      store_element(want_norm.data(), dtype, i, double(float(load_element(norm.data, norm.dtype, i)) + 1.0f));
    EXPECT_EQ(read_back(device(), shifted), want_norm) << dtype_name(dtype);
  }
  Tensor t;
  auto attempt = [&](WeightPart part, std::vector<int64_t> shape) {
    std::vector<WeightPlan> plans = {{.name = "bad", .shape = std::move(shape), .parts = {part}, .target = &t}};
    Buffer arena;
    upload_weights(device(), plans, arena, {});
  };
  expect_error([&] { attempt({.tensor = &grouped, .row_begin = 8, .row_end = 11}, {3, 6}); }, ErrorCode::parse,
               {file(), "'grouped'", "rows [8, 11)", "10 rows"});
  expect_error([&] { attempt({.tensor = &grouped, .row_begin = 4, .row_end = 2}, {2, 6}); }, ErrorCode::parse,
               {"'grouped'", "rows [4, 2)"});
  expect_error([&] { attempt({.tensor = &grouped, .transpose = true, .row_begin = 1}, {6, 10}); }, ErrorCode::invalid_argument,
               {"'grouped'", "transposed part takes the whole tensor"});
}

TEST_P(WeightUpload, PlansThatCannotBeCarriedOutAreErrors) {
  Values values(test_seed());
  const WeightFiles& f = files({{"a", DType::f32, {4, 6}, values.bytes(DType::f32, 24)}});
  Tensor t;
  Buffer arena;
  auto attempt = [&](WeightPlan plan, UploadOptions options = {}) {
    std::vector<WeightPlan> plans = {std::move(plan)};
    upload_weights(device(), plans, arena, options);
  };
  expect_error([&] { attempt({"w", {4, 6}, {{&f.get("a")}}}); }, ErrorCode::invalid_argument, {"'w'", "no target"});
  expect_error([&] { attempt({"w", {4, 6}, {{&f.get("a")}}, WeightInit::stored, 0, &t}, {.dtype = DType::i32}); },
               ErrorCode::invalid_argument, {"f32, f16 or bf16", "i32"});
  expect_error([&] { attempt({"w", {4, 6}, {{&f.get("a")}}, WeightInit::normal, 0.02f, &t}); }, ErrorCode::invalid_argument,
               {"'w'", "generated"});
  expect_error([&] { attempt({"w", {4, 6}, {}, WeightInit::stored, 0.02f, &t}); }, ErrorCode::invalid_argument, {"'w'", "no part"});
  expect_error([&] { attempt({"w", {}, {}, WeightInit::zeros, 0.02f, &t}); }, ErrorCode::invalid_argument, {"'w'", "rank 0"});
  expect_error([&] { attempt({"w", {4, -6}, {}, WeightInit::zeros, 0.02f, &t}); }, ErrorCode::invalid_argument, {"'w'", "negative"});
  expect_error([&] { attempt({"w", {4}, {}, WeightInit::normal, NAN, &t}); }, ErrorCode::invalid_argument, {"'w'", "normal_std"});
  // Sizes that wrapped: 2^62 f32 elements are 2^64 bytes, which wrapped to 0 (a tiny arena), and
  // an element count past 2^63 was signed overflow.
  const int64_t big = int64_t(1) << 31;
  expect_error([&] { attempt({"w", {big, big}, {}, WeightInit::zeros, 0.02f, &t}); }, ErrorCode::out_of_memory,
               {"'w'", "2^62 bytes"});
  expect_error([&] { attempt({"w", {big, big, big}, {}, WeightInit::zeros, 0.02f, &t}); }, ErrorCode::invalid_argument,
               {"'w'", "2^63 elements"});
  expect_error([&] { attempt({"w", {4}, {}, WeightInit::normal, 1e30f, &t}, {.dtype = DType::f16}); },
               ErrorCode::invalid_argument, {"'w'", "beyond f16"});
  EXPECT_FALSE(t.defined());
}

// N(0, σ²) by its moments and its mass within one σ, each within 5 standard errors of n draws;
// the same values for the same seed whatever the chunking, other values for another seed or plan;
// a 16-bit weight holds the f32 draws rounded.
TEST_P(WeightUpload, NormalInitIsNormalAndReproducible) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  const float sigma = 0.02f;
  std::vector<Tensor> targets(2);
  std::vector<WeightPlan> plans = {{"a", {256, 513}, {}, WeightInit::normal, sigma, &targets[0]},
                                   {"b", {999}, {}, WeightInit::normal, sigma, &targets[1]}};
  auto draw = [&](DType dtype, uint64_t s, size_t chunk) {
    Buffer arena;
    upload_weights(device(), plans, arena, {.dtype = dtype, .seed = s, .chunk_bytes = chunk});
    return std::make_pair(read_back(device(), targets[0]), read_back(device(), targets[1]));
  };
  const auto [a, b] = draw(DType::f32, seed, size_t(32) << 20);
  std::vector<float> z(a.size() / 4);
  std::memcpy(z.data(), a.data(), a.size());
  const double n = double(z.size());
  double sum = 0, squares = 0, within = 0;
  for (float v : z) {
    sum += v;
    squares += double(v) * v;
    within += std::fabs(v) <= sigma;
  }
  const double mean = sum / n, var = squares / n - mean * mean;
  EXPECT_LT(std::fabs(mean), 5 * sigma / std::sqrt(n));
  EXPECT_LT(std::fabs(std::sqrt(var) / sigma - 1), 5 / std::sqrt(2 * n));  // s.e. of s/σ is 1/√(2n)
  const double p = 0.6826894921370859;                                     // P(|z| ≤ 1)
  EXPECT_LT(std::fabs(within / n - p), 5 * std::sqrt(p * (1 - p) / n));

  EXPECT_TRUE(draw(DType::f32, seed, 1000) == std::make_pair(a, b)) << "chunking changed the values";
  EXPECT_FALSE(draw(DType::f32, seed + 1, size_t(32) << 20).first == a) << "another seed gave the same values";
  EXPECT_NE(std::memcmp(a.data(), b.data(), b.size()), 0) << "two weights drew the same values";
  for (DType dtype : {DType::f16, DType::bf16}) {
    const std::vector<uint8_t> narrow = draw(dtype, seed, 4096).first;
    std::vector<uint8_t> expected(narrow.size());
    for (size_t i = 0; i < z.size(); ++i) store_element(expected.data(), dtype, int64_t(i), z[i]);
    EXPECT_TRUE(narrow == expected) << dtype_name(dtype) << " is not the f32 draw rounded";
  }
}

TEST_P(WeightUpload, OnesAndZerosFillTheirWeights) {
  for (DType dtype : kFloatTypes) {
    std::vector<Tensor> targets(2);
    std::vector<WeightPlan> plans = {{"ones", {3, 37}, {}, WeightInit::ones, 0.02f, &targets[0]},
                                     {"zeros", {41}, {}, WeightInit::zeros, 0.02f, &targets[1]}};
    Buffer arena;
    upload_weights(device(), plans, arena, {.dtype = dtype, .chunk_bytes = 64});
    const std::vector<uint8_t> ones = read_back(device(), targets[0]), zeros = read_back(device(), targets[1]);
    for (int64_t i = 0; i < 111; ++i) ASSERT_EQ(load_element(ones.data(), dtype, i), 1.0) << dtype_name(dtype) << " at " << i;
    for (uint8_t byte : zeros) ASSERT_EQ(byte, 0) << dtype_name(dtype);
  }
}

// A device whose memory is host memory but which says it is not, so that upload_weights stages
// chunks; its stream copies on a worker thread after a pause. A staging buffer refilled before
// its copy ran would show as wrong bytes: this is the GPU path's protocol, run where no GPU is.
class AsyncCopyDevice final : public Device {
 public:
  AsyncCopyDevice() : stream_(*this), worker_([this] { work(); }) {
    caps_.backend = "async-copy";
    caps_.name = "host memory behind an asynchronous copy queue (test)";
  }
  ~AsyncCopyDevice() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  const Caps& caps() const override { return caps_; }
  const ops::Kernels& kernels() const override { return Device::open("cpu").kernels(); }
  Stream& default_stream() override { return stream_; }
  Buffer alloc(size_t bytes) override { return Buffer(this, std::aligned_alloc(64, (bytes + 64) / 64 * 64), bytes); }
  void free(void* data, size_t) override { std::free(data); }
  size_t free_bytes() const override { return Device::open("cpu").free_bytes(); }
  HostBuffer alloc_staging(size_t bytes) override {
    ++staging_buffers;
    return Device::alloc_staging(bytes);
  }
  void copy_to_device(Stream&, void* dst, const void* src, size_t bytes) override {
    ++copies;
    std::lock_guard lock(mutex_);
    queue_.push_back([=] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::memcpy(dst, src, bytes);
    });
    wake_.notify_all();
  }
  void copy_to_host(Stream&, void* dst, const void* src, size_t bytes) override {
    drain();
    std::memcpy(dst, src, bytes);
  }
  void copy_within(Stream&, void* dst, const void* src, size_t bytes) override {
    drain();
    std::memmove(dst, src, bytes);
  }
  void fill_bytes(Stream&, void* dst, uint8_t value, size_t bytes) override {
    drain();
    std::memset(dst, value, bytes);
  }
  // Waits until every queued copy has run.
  void drain() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

  int staging_buffers = 0;
  int copies = 0;

 private:
  class AsyncStream final : public Stream {
   public:
    explicit AsyncStream(AsyncCopyDevice& device) : device_(device) {}
    Device& device() override { return device_; }
    void synchronize() override { device_.drain(); }

   private:
    AsyncCopyDevice& device_;
  };
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      std::function<void()> copy = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      copy();
      lock.lock();
      busy_ = false;
      done_.notify_all();
    }
  }

  Caps caps_;
  AsyncStream stream_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

TEST(WeightUploadStaged, ChunksCopiedAsynchronouslyArriveIntact) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(fmt::format("seed {} (rerun with DING_TEST_SEED={})", seed, seed));
  const fs::path dir = fs::temp_directory_path() / fmt::format("ding_weight_upload_staged_{}", getpid());
  fs::create_directories(dir);
  Values values(seed);
  MixedModel m(values, DType::bf16, DType::f32);
  write_safetensors(dir / "model.safetensors", m.stored);
  const WeightFiles files = WeightFiles::open_folder(dir.string());
  m.plan(files);
  AsyncCopyDevice device;
  for (DType dtype : kFloatTypes)
    for (size_t chunk : {size_t(100), size_t(4097), size_t(1) << 20}) {
      SCOPED_TRACE(fmt::format("{} in chunks of {} bytes", dtype_name(dtype), chunk));
      device.staging_buffers = device.copies = 0;
      Buffer arena;
      upload_weights(device, m.plans, arena, {.dtype = dtype, .chunk_bytes = chunk});
      for (const WeightPlan& plan : m.plans)
        EXPECT_TRUE(read_back(device, *plan.target) == expected_weight(plan, dtype)) << "weight " << plan.name;
      EXPECT_EQ(device.staging_buffers, 2);
      if (chunk < 1000) EXPECT_GT(device.copies, int(m.plans.size()));
    }
  // A refused value in a late chunk: the error comes after earlier copies were queued, and
  // nothing is left half-done (the copies finish before the staging buffers go).
  store_element(m.stored.back().bytes.data(), m.stored.back().dtype, 5, INFINITY);
  write_safetensors(dir / "model.safetensors", m.stored);
  const WeightFiles bad = WeightFiles::open_folder(dir.string());
  m.plan(bad);
  Buffer arena;
  expect_error([&] { upload_weights(device, m.plans, arena, {.dtype = DType::f16, .chunk_bytes = 64}); }, ErrorCode::parse,
               {"'v'", "+Inf", "[0, 5]", "(weight 'qkv')"});
  EXPECT_EQ(arena.data(), nullptr);
  EXPECT_GT(device.copies, 10);
  fs::remove_all(dir);
}

std::vector<std::string> backends() { return registry::compiled_backends(); }

INSTANTIATE_TEST_SUITE_P(Backends, WeightUpload, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ding::testing
