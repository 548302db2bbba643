// The registry, Device::open, buffers, workspace and profiler, including their failures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ding/ding.h"
#include "ding/ops/dispatch.h"
#include "../expect_error.h"

namespace ding {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Error open_error(const char* spec) {
  try {
    Device::open(spec);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "Device::open(\"" << spec << "\") did not throw";
  return Error(ErrorCode::internal, "");
}

TEST(Device, CpuAndRefAreCompiledAndAvailable) {
  const auto compiled = registry::compiled_backends();
  EXPECT_NE(std::find(compiled.begin(), compiled.end(), "cpu"), compiled.end());
  EXPECT_NE(std::find(compiled.begin(), compiled.end(), "ref"), compiled.end());
  Device& cpu = Device::open("cpu");
  EXPECT_EQ(&cpu, &Device::open("cpu:0"));  // one instance per device
  EXPECT_EQ(cpu.caps().backend, "cpu");
  EXPECT_GE(cpu.caps().compute_units, 1);
  EXPECT_GT(cpu.caps().memory_bytes, 0u);
  EXPECT_TRUE(cpu.caps().host_accessible);
}

// Host memory is committed when touched: an allocation past what the machine has available must
// fail when asked for, naming both numbers, not succeed and take the process down later.
TEST(Device, HostAllocationPastTheAvailableMemoryFails) {
  Device& cpu = Device::open("cpu");
  const size_t available = cpu.free_bytes();
  ASSERT_GT(available, size_t(0));
  try {
    Buffer b = cpu.alloc(available + (size_t(1) << 30));
    FAIL() << "allocated " << available + (size_t(1) << 30) << " bytes with " << available << " available";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("available"), std::string::npos) << e.what();
  }
}

// Every compiled backend's copies and fills, through its own memory: host → device, device →
// device at an offset, a byte fill, device → host.
TEST(Device, EveryBackendCopiesAndFills) {
  for (const std::string& backend : registry::compiled_backends()) {
    if (!registry::is_available(backend)) continue;
    SCOPED_TRACE(backend);
    Device& device = Device::open(backend);
    EXPECT_EQ(device.caps().backend, backend);
    EXPECT_GE(device.caps().compute_units, 1);
    Stream& stream = device.default_stream();
    std::vector<uint8_t> host(1000), back(2000, 0);
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 7 + 1);
    Buffer a = device.alloc(1000), b = device.alloc(2000);
    device.copy_to_device(stream, a.data(), host.data(), 1000);
    device.fill_bytes(stream, b.data(), 0xab, 2000);
    device.copy_within(stream, static_cast<char*>(b.data()) + 500, a.data(), 1000);
    device.copy_to_host(stream, back.data(), b.data(), 2000);
    stream.synchronize();
    for (size_t i = 0; i < back.size(); ++i)
      ASSERT_EQ(back[i], i >= 500 && i < 1500 ? host[i - 500] : uint8_t(0xab)) << "byte " << i;
  }
}

TEST(Device, AutoNeverPicksTheReference) { EXPECT_NE(Device::open("auto").name(), "ref"); }

TEST(Device, UnknownBackendIsNamed) {
  Error e = open_error("tpu");
  EXPECT_EQ(e.code(), ErrorCode::backend_unavailable);
  EXPECT_TRUE(contains(e.what(), "unknown backend 'tpu'")) << e.what();
}

TEST(Device, KnownButNotCompiledBackendSaysSo) {
  const auto compiled = registry::compiled_backends();
  for (const char* backend : {"cuda", "hip", "kokkos"}) {
    if (std::find(compiled.begin(), compiled.end(), backend) != compiled.end()) continue;
    Error e = open_error(backend);
    EXPECT_EQ(e.code(), ErrorCode::backend_unavailable);
    EXPECT_TRUE(contains(e.what(), "not compiled into this build")) << e.what();
  }
}

TEST(Device, BadIndexIsRejected) {
  Error e = open_error("cpu:x");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(e.what(), "cpu:x")) << e.what();
}

TEST(Device, OutOfMemoryNamesTheRequest) {
  Device& cpu = Device::open("cpu");
  try {
    Buffer b = cpu.alloc(size_t(1) << 62);
    FAIL() << "a 4 EiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_TRUE(contains(e.what(), std::to_string(size_t(1) << 62))) << e.what();
  }
}

TEST(Device, BufferMovesOwnership) {
  Device& cpu = Device::open("cpu");
  Buffer a = cpu.alloc(1024);
  void* p = a.data();
  Buffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_THROW(b.as(DType::f32, {257}), Error);  // 1028 bytes do not fit in 1024
}

TEST(Workspace, TakesAlignedPiecesAndReportsExhaustion) {
  Device& cpu = Device::open("cpu");
  Workspace ws(cpu, 4096);
  Tensor a = ws.take(DType::f32, {10});
  Tensor b = ws.take(DType::bf16, {3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 256, 0u);
  EXPECT_FALSE(overlaps(a, b));
  try {
    ws.take(DType::f32, {2000});
    FAIL() << "workspace overflow not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_TRUE(contains(e.what(), "8000 bytes requested")) << e.what();
  }
  ws.reset();
  EXPECT_EQ(ws.used(), 0u);
}

TEST(Profiler, RecordsCallsFlopsAndBytesPerOp) {
  Device& cpu = Device::open("cpu");
  Stream& stream = cpu.default_stream();
  Profiler profiler;
  stream.profiler = &profiler;
  std::vector<float> x(64, 1.0f), w(8, 1.0f), y(64);
  const Tensor tx = Tensor::view(x.data(), &cpu, DType::f32, {8, 8});
  for (int i = 0; i < 3; ++i)
    ops::rms_norm(stream, Tensor::view(y.data(), &cpu, DType::f32, {8, 8}), tx, Tensor::view(w.data(), &cpu, DType::f32, {8}));
  stream.profiler = nullptr;
  ASSERT_EQ(profiler.stats().count("rms_norm"), 1u);
  const OpStats& s = profiler.stats().at("rms_norm");
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.bytes, 3.0 * (64 * 4 * 2 + 8 * 4));  // x and out, plus the weight, per call
  EXPECT_GT(s.flops, 0);
  EXPECT_TRUE(contains(profiler.report(), "rms_norm"));
}

// Grouped by bytes, calls of one op on two shapes stand apart, each with its own count.
TEST(Profiler, GroupsCallsByTheBytesTheyMove) {
  Device& cpu = Device::open("cpu");
  Stream& stream = cpu.default_stream();
  Profiler profiler(Profiler::Grouping::op_and_bytes);
  stream.profiler = &profiler;
  std::vector<float> x(64, 1.0f), w(8, 1.0f), y(64);
  const Tensor weight = Tensor::view(w.data(), &cpu, DType::f32, {8});
  for (int64_t rows : {8, 8, 4})
    ops::rms_norm(stream, Tensor::view(y.data(), &cpu, DType::f32, {rows, 8}), Tensor::view(x.data(), &cpu, DType::f32, {rows, 8}),
                  weight);
  stream.profiler = nullptr;
  // x and out, plus the weight: 8 rows 544 bytes, 4 rows 288.
  ASSERT_EQ(profiler.stats().size(), 2u) << profiler.report();
  EXPECT_EQ(profiler.stats().at("rms_norm (0.000544 MB)").calls, 2);
  EXPECT_EQ(profiler.stats().at("rms_norm (0.000288 MB)").calls, 1);
  EXPECT_TRUE(contains(profiler.report(), "rms_norm (0.000288 MB)"));
}

TEST(Dispatch, SkippedOpIsValidatedButNotRun) {
  Device& cpu = Device::open("cpu");
  Stream& stream = cpu.default_stream();
  const std::vector<std::string> skipped = {"rms_norm"};
  std::vector<float> x(16, 2.0f), w(4, 1.0f), y(16, -7.0f);
  const Tensor tx = Tensor::view(x.data(), &cpu, DType::f32, {4, 4}), ty = Tensor::view(y.data(), &cpu, DType::f32, {4, 4});
  stream.skipped_ops = &skipped;
  ops::rms_norm(stream, ty, tx, Tensor::view(w.data(), &cpu, DType::f32, {4}));
  for (float v : y) EXPECT_EQ(v, -7.0f);  // out as it was
  // A bad call is still refused: the arguments are checked before the op is skipped.
  testing::expect_error([&] { ops::rms_norm(stream, ty, tx, Tensor::view(w.data(), &cpu, DType::f32, {3})); },
                        ErrorCode::shape_mismatch, {"rms_norm", "weight"});
  stream.skipped_ops = nullptr;
  ops::rms_norm(stream, ty, tx, Tensor::view(w.data(), &cpu, DType::f32, {4}));
  for (float v : y) EXPECT_NEAR(v, 1.0f, 1e-5f);  // x / rms(x), weight 1
}

// A partial backend's table: cpu's, less rope, with a matmul that refuses bf16 x.
ops::Kernels partial_table() {
  ops::Kernels k = Device::open("cpu").kernels();
  k.rope = nullptr;
  k.limits.matmul = [](const ops::MatmulArgs& a) { return a.x.dtype == DType::bf16 ? std::string("no bf16 x") : std::string(); };
  return k;
}

ops::MatmulArgs matmul_args(DType dtype) {
  Device& cpu = Device::open("cpu");
  return {.out = Tensor::view(nullptr, &cpu, DType::f32, {2, 3}), .x = Tensor::view(nullptr, &cpu, dtype, {2, 8}),
          .w = Tensor::view(nullptr, &cpu, dtype, {3, 8})};
}

TEST(Dispatch, MissingKernelIsNotImplementedNamingOpAndBackend) {
  const ops::Kernels k = partial_table();
  testing::expect_error([&] { ops::kernel_for(k, Device::open("cpu"), ops::RopeArgs{}); }, ErrorCode::not_implemented,
                        {"op rope is not implemented on backend cpu"});
}

TEST(Dispatch, LimitedKernelRefusesWithItsReasonAndTakesTheRest) {
  const ops::Kernels k = partial_table();
  Device& cpu = Device::open("cpu");
  testing::expect_error([&] { ops::kernel_for(k, cpu, matmul_args(DType::bf16)); }, ErrorCode::not_implemented,
                        {"op matmul on backend cpu does not take this call: no bf16 x"});
  EXPECT_EQ(ops::kernel_for(k, cpu, matmul_args(DType::f32)), cpu.kernels().matmul);
  // The complete table has no limit: bf16 goes through.
  EXPECT_EQ(ops::kernel_for(cpu.kernels(), cpu, matmul_args(DType::bf16)), cpu.kernels().matmul);
}

TEST(Dispatch, MissingKernelsOfAListComeInItsOrder) {
  const ops::Kernels k = partial_table();
  const std::vector<std::string_view> needed = {"matmul", "rope", "embedding"};
  EXPECT_EQ(ops::missing_kernels(k, needed), std::vector<std::string>{"rope"});
  EXPECT_EQ(ops::missing_kernels(Device::open("cpu").kernels(), needed), std::vector<std::string>{});
  const std::vector<std::string_view> unknown = {"matmul", "not_an_op"};
  testing::expect_error([&] { ops::missing_kernels(k, unknown); }, ErrorCode::internal, {"\"not_an_op\"", "op_list.h"});
}

}  // namespace
}  // namespace ding
