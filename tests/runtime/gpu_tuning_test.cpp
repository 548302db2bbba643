// The GPU matmul and op tunings: their public setters (ding/gpu.h) and the tools'
// environment readers (tools/gpu_tuning.h), which this file also applies to the GPU devices of the
// whole test run, so that tools/gemm-check.sh runs the parity suite on each matmul core by
// DING_GEMM_* variables (and DING_MLA_* picks the latent attend kernel's configuration).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ding/device.h"
#include "ding/gpu.h"
#include "expect_error.h"
#include "ops/op_cases.h"
#include "tools/gpu_tuning.h"

namespace ding {
namespace {

bool compiled_and_present(const std::string& backend) {
  const auto compiled = registry::compiled_backends();
  return std::find(compiled.begin(), compiled.end(), backend) != compiled.end() && registry::is_available(backend);
}

class GpuTuningFromEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    for (const char* backend : {"cuda", "hip"})
      if (compiled_and_present(backend)) tools::apply_gpu_tuning_from_environment(Device::open(backend));
  }
};
[[maybe_unused]] const ::testing::Environment* const kGpuTuning =
    ::testing::AddGlobalTestEnvironment(new GpuTuningFromEnvironment);

// Sets one variable for the scope of a test, restoring what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(GpuTuning, CpuDeviceIsNotAGpu) {
  testing::expect_error([] { gpu::set_matmul_tuning(Device::open("cpu"), gpu::MatmulTuning{}); },
                        ErrorCode::invalid_argument, {"set_matmul_tuning", "'cpu' is not a GPU device"});
  testing::expect_error([] { gpu::set_matmul_override(Device::open("ref"), nullptr); }, ErrorCode::invalid_argument,
                        {"set_matmul_override", "'ref' is not a GPU device"});
  testing::expect_error([] { gpu::set_op_tuning(Device::open("cpu"), gpu::OpTuning{}); },
                        ErrorCode::invalid_argument, {"set_op_tuning", "'cpu' is not a GPU device"});
  testing::expect_error([] { gpu::set_form_log(Device::open("cpu"), std::make_shared<gpu::FormLog>()); },
                        ErrorCode::invalid_argument, {"set_form_log", "'cpu' is not a GPU device"});
}

// A GPU device names its instruction set, which the tests read to know what forms the kernels can
// take (tests/ops/configurations.h); the host devices name none.
TEST(GpuTuning, GpuDevicesNameTheirInstructionSet) {
  EXPECT_EQ(Device::open("cpu").caps().arch, "");
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  const std::string& arch = Device::open("cuda").caps().arch;
  EXPECT_TRUE(arch.starts_with("sm_") && arch.size() >= 5) << arch;
  EXPECT_NE(Device::open("cuda").caps().name.find("(" + arch + ","), std::string::npos) << Device::open("cuda").caps().name;
}

// A decode step on an sm_90 GPU notes the forms its kernels took while a log is set, and nothing
// once it is taken away.
TEST(GpuTuning, FormLogNotesTheFormsTakenWhileSet) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  auto log = std::make_shared<gpu::FormLog>();
  const auto route = [&] {  // every routing case with a router: on a GPU, decode-sized ones take the routing kernel
    for (const testing::OpCase& c : testing::all_op_cases())
      if (c.name.starts_with("moe_route/router_") && c.in_tests) {
        testing::CaseRun run(cuda, testing::test_seed());
        c.build(run);
        run.run();
      }
  };
  gpu::set_form_log(cuda, log);
  route();
  gpu::set_form_log(cuda, nullptr);
  ASSERT_FALSE(log->empty());
  for (const std::string& form : *log) EXPECT_TRUE(form.starts_with("moe_route: logits handed over ")) << form;
  const size_t noted = log->size();
  route();
  EXPECT_EQ(log->size(), noted);
}

// A value no kernel has an instance for is refused before any device is asked: a latent attend
// ring outside 2 to 4, a negative delta rule segment, a first pass of other than two or three
// blocks an SM.
TEST(GpuTuning, OpTuningValuesWithoutAKernelAreRefused) {
  struct Bad {
    std::function<void(gpu::OpTuning&)> set;
    std::string value, expected;  // as the message names them
  };
  const std::vector<Bad> cases = {
      {[](auto& t) { t.mla_stages = 1; }, "mla_stages = 1", "2 to 4"},
      {[](auto& t) { t.mla_stages = 5; }, "mla_stages = 5", "2 to 4"},
      {[](auto& t) { t.mla_stages = -2; }, "mla_stages = -2", "2 to 4"},
      {[](auto& t) { t.delta_rule_segment_chunks = -1; }, "delta_rule_segment_chunks = -1", "0 (automatic) or more"},
      {[](auto& t) { t.delta_rule_prepare_blocks = 1; }, "delta_rule_prepare_blocks = 1", "2 or 3"},
      {[](auto& t) { t.delta_rule_prepare_blocks = 4; }, "delta_rule_prepare_blocks = 4", "2 or 3"},
      {[](auto& t) { t.delta_rule_prepare_blocks = -1; }, "delta_rule_prepare_blocks = -1", "2 or 3"},
  };
  for (const Bad& bad : cases) {
    gpu::OpTuning tuning;
    bad.set(tuning);
    testing::expect_error([&] { gpu::set_op_tuning(Device::open("cpu"), tuning); }, ErrorCode::invalid_argument,
                          {"set_op_tuning", bad.value, bad.expected});
  }
}

// A tuning that asks for the TMA core of a build without it is refused, naming the option that
// compiles it, rather than measured as the wgmma core.
TEST(GpuTuning, MissingTmaCoreIsRefused) {
#if defined(DING_TEST_CUDA_TMA)
  GTEST_SKIP() << "this build has the TMA core (-DDING_CUDA_TMA=ON)";
#else
  if (!compiled_and_present("cuda")) GTEST_SKIP() << "no cuda backend compiled or no NVIDIA device present";
  gpu::MatmulTuning tuning;
  tuning.tma = true;
  testing::expect_error([&] { gpu::set_matmul_tuning(Device::open("cuda"), tuning); }, ErrorCode::invalid_argument,
                        {"set_matmul_tuning", "TMA matmul core", "-DDING_CUDA_TMA=ON"});
#endif
}

TEST(GpuTuning, EnvironmentIsRead) {
  ScopedVariable tile("DING_GEMM_TILE", "64x128"), split("DING_GEMM_SPLIT", "3"), wgmma("DING_GEMM_WGMMA", "0"),
      l2("DING_GEMV_L2", "256"), mma_min("DING_GEMV_MMA_MIN_KB", "4"), e4m3("DING_GEMM_E4M3", "0"),
      early("DING_GEMV_EARLY", "3"), early_segments("DING_GEMV_EARLY_SEGMENTS", "0"),
      evict_first("DING_GEMV_EVICT_FIRST", "0");
  const auto t = tools::matmul_tuning_from_environment();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->tile_m, 64);
  EXPECT_EQ(t->tile_n, 128);
  EXPECT_EQ(t->splits, 3);
  EXPECT_FALSE(t->wgmma);
  EXPECT_EQ(t->gemv_l2_fetch, 256);
  EXPECT_EQ(t->gemv_mma_min_bytes, 4096);
  EXPECT_EQ(t->gemv_early_units, 3);
  EXPECT_FALSE(t->gemv_early_segments);  // the default is true
  EXPECT_FALSE(t->gemv_evict_first);     // the default is true
  EXPECT_FALSE(t->e4m3_mma);
  EXPECT_FALSE(t->tma);  // unset: the default
  EXPECT_FALSE(tools::op_tuning_from_environment().has_value());  // none of its variables set
  ScopedVariable stages("DING_MLA_STAGES", "2"), bulk("DING_MLA_BULK", "0"), fold("DING_MLA_FOLD", "0"),
      segment("DING_DELTA_SEGMENT", "5"), pairs("DING_DELTA_PAIRS", "0"), bulk_delta("DING_DELTA_BULK", "0"),
      prepare_blocks("DING_DELTA_PREPARE_BLOCKS", "3"), cluster_norm("DING_DELTA_CLUSTER_NORM", "0"),
      decode_early("DING_DECODE_EARLY", "0"), route_cluster("DING_ROUTE_CLUSTER", "0"),
      decode_cluster("DING_DECODE_CLUSTER", "0");
  const auto a = tools::op_tuning_from_environment();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->mla_stages, 2);
  EXPECT_FALSE(a->mla_bulk_copies);
  EXPECT_FALSE(a->mla_fold_projection);  // the default is true
  EXPECT_EQ(a->delta_rule_segment_chunks, 5);
  EXPECT_FALSE(a->delta_rule_bf16_pairs);  // the default is true
  EXPECT_FALSE(a->delta_rule_bulk_copies);  // the default is true
  EXPECT_EQ(a->delta_rule_prepare_blocks, 3);  // the default is 0: chosen by waves
  EXPECT_FALSE(a->delta_rule_cluster_norm);  // the default is true
  EXPECT_FALSE(a->decode_early_tiles);  // the default is true
  EXPECT_FALSE(a->moe_route_cluster);   // the default is true
  EXPECT_FALSE(a->decode_cluster_merge);  // the default is true
}

TEST(GpuTuning, UnreadableVariableIsNamed) {
  for (const auto& [name, value] : {std::pair{"DING_GEMM_TILE", "64by128"}, std::pair{"DING_GEMM_TILE", "64x128x2"},
                                    std::pair{"DING_GEMM_SPLIT", "-1"}, std::pair{"DING_GEMM_SPLIT", "two"},
                                    std::pair{"DING_GEMM_WGMMA", "off"}, std::pair{"DING_GEMV_L2", "64"},
                                    std::pair{"DING_GEMV_MMA_MIN_KB", "-1"}, std::pair{"DING_GEMM_E4M3", "no"},
                                    std::pair{"DING_GEMV_EARLY", "-2"}, std::pair{"DING_GEMV_EARLY_SEGMENTS", "yes"},
                                    std::pair{"DING_GEMV_EVICT_FIRST", "first"}}) {
    ScopedVariable v(name, value);
    testing::expect_error([] { (void)tools::matmul_tuning_from_environment(); }, ErrorCode::invalid_argument,
                          {std::string(name) + "=" + value});
  }
  for (const auto& [name, value] : {std::pair{"DING_MLA_STAGES", "5"}, std::pair{"DING_MLA_STAGES", "1"},
                                    std::pair{"DING_MLA_STAGES", "four"}, std::pair{"DING_MLA_BULK", "yes"}, std::pair{"DING_MLA_FOLD", "on"},
                                    std::pair{"DING_DELTA_SEGMENT", "-3"}, std::pair{"DING_DELTA_PREPARE_BLOCKS", "4"},
                                    std::pair{"DING_DELTA_BULK", "no"}, std::pair{"DING_DECODE_EARLY", "2"}}) {
    ScopedVariable v(name, value);
    testing::expect_error([] { (void)tools::op_tuning_from_environment(); }, ErrorCode::invalid_argument,
                          {std::string(name) + "=" + value});
  }
}

}  // namespace
}  // namespace ding
