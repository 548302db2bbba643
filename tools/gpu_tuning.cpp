#include "gpu_tuning.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ding/error.h"

namespace ding::tools {
namespace {

[[noreturn]] void unreadable(const char* name, std::string_view value, const char* expected) {
  throw Error(ErrorCode::invalid_argument, fmt::format("{}={}: expected {}", name, value, expected));
}

// "0" or "1".
std::optional<bool> flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  const std::string_view s(v);
  if (s != "0" && s != "1") unreadable(name, s, "0 or 1");
  return s == "1";
}

std::optional<int> count(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < 0 || n > 1 << 20) unreadable(name, v, "a count (0 or more)");
  return int(n);
}

}  // namespace

std::optional<gpu::MatmulTuning> matmul_tuning_from_environment() {
  gpu::MatmulTuning t;
  bool any = false;
  if (auto v = flag("DING_GEMM_TMA")) t.tma = *v, any = true;
  if (auto v = flag("DING_GEMM_WGMMA")) t.wgmma = *v, any = true;
  if (const char* v = std::getenv("DING_GEMM_TILE")) {
    int m = 0, n = 0;
    char tail = 0;
    if (std::sscanf(v, "%dx%d%c", &m, &n, &tail) != 2 || m <= 0 || n <= 0)
      unreadable("DING_GEMM_TILE", v, "MxN, e.g. 64x128");
    t.tile_m = m;
    t.tile_n = n;
    any = true;
  }
  if (auto v = count("DING_GEMM_SPLIT")) t.splits = *v, any = true;
  if (auto v = flag("DING_GEMV_CHAINED")) t.gemv_chained = *v, any = true;
  if (auto v = flag("DING_GEMV_PREFETCH")) t.gemv_prefetch = *v, any = true;
  if (auto v = count("DING_GEMV_L2")) {
    if (*v != 0 && *v != 128 && *v != 256) unreadable("DING_GEMV_L2", std::to_string(*v), "0, 128 or 256");
    t.gemv_l2_fetch = *v;
    any = true;
  }
  if (auto v = count("DING_GEMV_EARLY")) t.gemv_early_units = *v, any = true;
  if (auto v = flag("DING_GEMV_EARLY_SEGMENTS")) t.gemv_early_segments = *v, any = true;
  if (auto v = flag("DING_GEMV_EVICT_FIRST")) t.gemv_evict_first = *v, any = true;
  if (auto v = count("DING_GEMV_MMA_MIN_KB")) t.gemv_mma_min_bytes = int64_t(*v) * 1024, any = true;
  if (auto v = flag("DING_GEMM_E4M3")) t.e4m3_mma = *v, any = true;
  if (!any) return std::nullopt;
  return t;
}

std::optional<gpu::OpTuning> op_tuning_from_environment() {
  gpu::OpTuning t;
  bool any = false;
  if (auto v = count("DING_MLA_STAGES")) {
    if (*v != 0 && (*v < 2 || *v > 4)) unreadable("DING_MLA_STAGES", std::to_string(*v), "0 or 2 to 4");
    t.mla_stages = *v;
    any = true;
  }
  if (auto v = flag("DING_MLA_BULK")) t.mla_bulk_copies = *v, any = true;
  if (auto v = flag("DING_MLA_FOLD")) t.mla_fold_projection = *v, any = true;
  if (auto v = count("DING_DELTA_SEGMENT")) t.delta_rule_segment_chunks = *v, any = true;
  if (auto v = flag("DING_DELTA_PAIRS")) t.delta_rule_bf16_pairs = *v, any = true;
  if (auto v = flag("DING_DELTA_BULK")) t.delta_rule_bulk_copies = *v, any = true;
  if (auto v = count("DING_DELTA_PREPARE_BLOCKS")) {
    if (*v != 0 && *v != 2 && *v != 3) unreadable("DING_DELTA_PREPARE_BLOCKS", std::to_string(*v), "0, 2 or 3");
    t.delta_rule_prepare_blocks = *v;
    any = true;
  }
  if (auto v = flag("DING_DELTA_CLUSTER_NORM")) t.delta_rule_cluster_norm = *v, any = true;
  if (auto v = flag("DING_DECODE_EARLY")) t.decode_early_tiles = *v, any = true;
  if (auto v = flag("DING_DECODE_CLUSTER")) t.decode_cluster_merge = *v, any = true;
  if (auto v = flag("DING_ROUTE_CLUSTER")) t.moe_route_cluster = *v, any = true;
  if (!any) return std::nullopt;
  return t;
}

void apply_gpu_tuning_from_environment(Device& device) {
  const auto matmul = matmul_tuning_from_environment();
  const auto attention = op_tuning_from_environment();
  const std::string& backend = device.caps().backend;
  if (backend != "cuda" && backend != "hip") return;
  if (matmul) gpu::set_matmul_tuning(device, *matmul);
  if (attention) gpu::set_op_tuning(device, *attention);
}

}  // namespace ding::tools
