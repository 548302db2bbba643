// ding::gpu::set_matmul_tuning, set_matmul_override, set_op_tuning and set_form_log (ding/gpu.h): each
// GPU API compiled into this library is asked in turn whether `device` is one of its devices.
// Compiled into ding and ding_cpu alike, like builtin.cpp, with the DING_HAVE_* definitions of each.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "ding/error.h"
#include "ding/gpu.h"

namespace ding::gpu {

// backends/gpu/device.h, for each API's compilation of it (vendor.h's inline namespaces).
#ifdef DING_HAVE_CUDA
inline namespace cuda_api {
bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning);
bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);
bool apply_op_tuning(Device& device, const OpTuning& tuning);
bool apply_form_log(Device& device, std::shared_ptr<FormLog> log);
}  // namespace cuda_api
#endif
#ifdef DING_HAVE_HIP
inline namespace hip_api {
bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning);
bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);
bool apply_op_tuning(Device& device, const OpTuning& tuning);
bool apply_form_log(Device& device, std::shared_ptr<FormLog> log);
}  // namespace hip_api
#endif

namespace {

// One GPU API's appliers, each false when `device` is not one of its devices.
struct Api {
  bool (*matmul_tuning)(Device&, const MatmulTuning&);
  bool (*matmul_override)(Device&, std::shared_ptr<MatmulOverride>);
  bool (*op_tuning)(Device&, const OpTuning&);
  bool (*form_log)(Device&, std::shared_ptr<FormLog>);
};

const std::vector<Api>& compiled_apis() {
  static const std::vector<Api> apis = {
#ifdef DING_HAVE_CUDA
      {cuda_api::apply_matmul_tuning, cuda_api::apply_matmul_override, cuda_api::apply_op_tuning, cuda_api::apply_form_log},
#endif
#ifdef DING_HAVE_HIP
      {hip_api::apply_matmul_tuning, hip_api::apply_matmul_override, hip_api::apply_op_tuning, hip_api::apply_form_log},
#endif
  };
  return apis;
}

// Asks each compiled-in API in turn to take the call (`apply`); none does: `device` is not a GPU.
template <class Apply>
void on_gpu(const char* what, const Device& device, Apply&& apply) {
  for (const Api& api : compiled_apis())
    if (apply(api)) return;
  throw Error(ErrorCode::invalid_argument, fmt::format("ding::gpu::{}: device '{}' is not a GPU device", what, device.name()));
}

}  // namespace

void set_matmul_tuning(Device& device, const MatmulTuning& tuning) {
  on_gpu("set_matmul_tuning", device, [&](const Api& api) { return api.matmul_tuning(device, tuning); });
}

void set_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override) {
  on_gpu("set_matmul_override", device, [&](const Api& api) { return api.matmul_override(device, override); });
}

void set_op_tuning(Device& device, const OpTuning& tuning) {
  if (tuning.mla_stages != 0 && (tuning.mla_stages < 2 || tuning.mla_stages > 4))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding::gpu::set_op_tuning: mla_stages = {}: expected 0 (automatic) or 2 to 4",
                            tuning.mla_stages));
  if (tuning.delta_rule_segment_chunks < 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding::gpu::set_op_tuning: delta_rule_segment_chunks = {}: expected 0 (automatic) or more",
                            tuning.delta_rule_segment_chunks));
  if (tuning.delta_rule_prepare_blocks != 0 && tuning.delta_rule_prepare_blocks != 2 && tuning.delta_rule_prepare_blocks != 3)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding::gpu::set_op_tuning: delta_rule_prepare_blocks = {}: expected 0 (by waves), 2 or 3",
                            tuning.delta_rule_prepare_blocks));
  on_gpu("set_op_tuning", device, [&](const Api& api) { return api.op_tuning(device, tuning); });
}

void set_form_log(Device& device, std::shared_ptr<FormLog> log) {
  on_gpu("set_form_log", device, [&](const Api& api) { return api.form_log(device, log); });
}

}  // namespace ding::gpu
