// GpuStream: what the kernels of backends/gpu/ get from a stream of a GPU backend (cuda, hip):
// the native queue, the device's properties, scratch memory for temporaries, the matmul and op
// tunings and the form log; Props: the device facts the kernels choose their paths by.
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "ding/device.h"
#include "ding/gpu.h"
#include "vendor.h"

DING_GPU_BEGIN

// Read from the driver once per device.
struct Props {
  int sm_count = 0;                  // multiprocessors (NVIDIA) / compute units (AMD)
  int cc_major = 0, cc_minor = 0;    // compute capability (NVIDIA); gfx major/minor on AMD
  int warp_size = 32;
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0; // dynamic shared memory a block may opt into
  size_t shared_per_sm = 0;
  // bf16/f16 mma.sync, ldmatrix, cp.async: NVIDIA sm_80+ (HIP on AMD reports gfx9 as cc 9.x).
  bool has_mma_sync() const {
#if defined(DING_GPU_NVIDIA)
    return cc_major >= 8;
#else
    return false;
#endif
  }
  // mma.sync with E4M3 operands: NVIDIA sm_89+ (the kernels must also have been compiled for it:
  // gemm_mma_e4m3.cu checks).
  bool has_e4m3_mma() const {
#if defined(DING_GPU_NVIDIA)
    return cc_major > 8 || (cc_major == 8 && cc_minor >= 9);
#else
    return false;
#endif
  }
  // The copy engine's bulk global → shared copies with mbarrier completion: NVIDIA sm_90+.
  bool has_bulk_copies() const {
#if defined(DING_GPU_NVIDIA)
    return cc_major >= 9;
#else
    return false;
#endif
  }
  // Programmatic dependent launch (vendor.h launch_chained): NVIDIA sm_90+.
  bool has_chained_launch() const {
#if defined(DING_GPU_NVIDIA)
    return cc_major >= 9;
#else
    return false;
#endif
  }
};

class GpuDevice;

// The stream of a GPU device (device.h): the native queue, scratch memory, graph capture, timers,
// and what the kernels read to choose their path (the device's properties, the matmul tuning and
// override, the op tuning) and where to note the form they took. The kernels see only this header.
class GpuStream final : public Stream {
 public:
  GpuStream(GpuDevice& device, int index, const Props& props);
  ~GpuStream() override;
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;

  Device& device() override;
  void synchronize() override;
  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<Graph> end_capture() override;
  std::unique_ptr<StreamTimer> make_timer() override;

  stream_t handle() const { return stream_; }
  const Props& props() const { return props_; }
  // Device scratch of at least `bytes`, valid for work enqueued on this stream until the next
  // call for the same slot. Grow-only: after the first steps of a workload it allocates nothing,
  // so a recorded graph keeps pointing at live memory. Slots are independent: an op that stages
  // an input (staged_input) may then call a core that takes kernel scratch, and an op built from
  // other ops' kernels keeps what passes between them in `intermediate` (mla_prefill's expanded
  // keys and values between its matmul and the attention kernel).
  enum class ScratchSlot { kernel, staged_input, intermediate };
  void* scratch(size_t bytes, ScratchSlot slot = ScratchSlot::kernel);
  // Frees the scratch blocks once the stream's work is done (they grow again on the next use).
  void release_scratch();

  // Another library's matmul as a comparison path (ding::gpu::set_matmul_override): true when
  // it computed the matmul; false to run ding's own kernels.
  bool vendor_blas_matmul(const ops::MatmulArgs& a) {
    return matmul_override_ && matmul_override_->matmul(stream_, a);
  }
  void set_matmul_override(std::shared_ptr<MatmulOverride> override) { matmul_override_ = std::move(override); }
  const MatmulTuning& matmul_tuning() const { return matmul_tuning_; }
  void set_matmul_tuning(const MatmulTuning& tuning) { matmul_tuning_ = tuning; }
  const OpTuning& op_tuning() const { return op_tuning_; }
  void set_op_tuning(const OpTuning& tuning) { op_tuning_ = tuning; }
  // Notes the form an op took where two compute it (ding::gpu::set_form_log); nothing without a log.
  void note_form(const char* op, const char* form) {
    if (form_log_) form_log_->push_back(std::string(op) + ": " + form);
  }
  void set_form_log(std::shared_ptr<FormLog> log) { form_log_ = std::move(log); }

 private:
  GpuDevice& device_;
  const Props& props_;
  stream_t stream_ = nullptr;
  // Scratch grows by replacement; replaced blocks stay allocated until the stream goes, since
  // work already enqueued (or a recorded graph) may still point into them.
  struct Scratch {
    std::vector<Buffer> blocks;
    size_t bytes = 0;
  };
  std::array<Scratch, 3> scratch_;  // by ScratchSlot
  std::shared_ptr<MatmulOverride> matmul_override_;
  MatmulTuning matmul_tuning_;
  OpTuning op_tuning_;
  std::shared_ptr<FormLog> form_log_;
};

// The GPU stream behind `stream`; throws Error(device_mismatch) if it is another backend's.
GpuStream& gpu_stream(Stream& stream);

DING_GPU_END
