// ding::gpu::set_matmul_tuning, set_matmul_override and set_attention_tuning (ding/gpu.h): each
// GPU API compiled into this library is asked in turn whether `device` is one of its devices.
// Compiled into ding and ding_cpu alike, like builtin.cpp, with the DING_HAVE_* definitions of each.
#include <fmt/format.h>

#include "ding/error.h"
#include "ding/gpu.h"

namespace ding::gpu {

// backends/gpu/device.h, for each API's compilation of it (vendor.h's inline namespaces).
#ifdef DING_HAVE_CUDA
inline namespace cuda_api {
bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning);
bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);
bool apply_attention_tuning(Device& device, const AttentionTuning& tuning);
}  // namespace cuda_api
#endif
#ifdef DING_HAVE_HIP
inline namespace hip_api {
bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning);
bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);
bool apply_attention_tuning(Device& device, const AttentionTuning& tuning);
}  // namespace hip_api
#endif

namespace {

[[noreturn]] void not_a_gpu(const char* what, const Device& device) {
  throw Error(ErrorCode::invalid_argument, fmt::format("ding::gpu::{}: device '{}' is not a GPU device", what, device.name()));
}

}  // namespace

void set_matmul_tuning(Device& device, const MatmulTuning& tuning) {
#ifdef DING_HAVE_CUDA
  if (cuda_api::apply_matmul_tuning(device, tuning)) return;
#endif
#ifdef DING_HAVE_HIP
  if (hip_api::apply_matmul_tuning(device, tuning)) return;
#endif
  (void)tuning;
  not_a_gpu("set_matmul_tuning", device);
}

void set_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override) {
#ifdef DING_HAVE_CUDA
  if (cuda_api::apply_matmul_override(device, override)) return;
#endif
#ifdef DING_HAVE_HIP
  if (hip_api::apply_matmul_override(device, override)) return;
#endif
  (void)override;
  not_a_gpu("set_matmul_override", device);
}

void set_attention_tuning(Device& device, const AttentionTuning& tuning) {
  if (tuning.mla_stages != 0 && (tuning.mla_stages < 2 || tuning.mla_stages > 4))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding::gpu::set_attention_tuning: mla_stages = {}: expected 0 (automatic) or 2 to 4",
                            tuning.mla_stages));
#ifdef DING_HAVE_CUDA
  if (cuda_api::apply_attention_tuning(device, tuning)) return;
#endif
#ifdef DING_HAVE_HIP
  if (hip_api::apply_attention_tuning(device, tuning)) return;
#endif
  not_a_gpu("set_attention_tuning", device);
}

}  // namespace ding::gpu
