// The "cuda" backend's device and stream (CUDA-only host glue; the kernels are the single-source
// ones of backends/gpu/).
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <vector>

#include "../gpu/stream.h"
#include "ding/cuda.h"

namespace ding::cuda {

class CudaDevice;

gpu::MatmulTuning matmul_tuning_from_environment();

class CudaStream final : public gpu::GpuStream {
 public:
  CudaStream(CudaDevice& device, int index, const gpu::Props& props);
  ~CudaStream() override;
  Device& device() override;
  void synchronize() override;
  gpu::stream_t handle() const override { return stream_; }
  const gpu::Props& props() const override { return props_; }
  void* scratch(size_t bytes, ScratchSlot slot = ScratchSlot::kernel) override;
  // Frees the scratch blocks once the stream's work is done (they grow again on the next use).
  void release_scratch();
  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<Graph> end_capture() override;
  std::unique_ptr<StreamTimer> make_timer() override;
  // The matmul override's answer when one is set (set_matmul_override).
  bool vendor_blas_matmul(const ops::MatmulArgs& a) override {
    return matmul_override_ && matmul_override_->matmul(stream_, a);
  }
  void set_matmul_override(std::shared_ptr<MatmulOverride> override) { matmul_override_ = std::move(override); }
  const gpu::MatmulTuning& matmul_tuning() const override { return matmul_tuning_; }

 private:
  CudaDevice& device_;
  const gpu::Props& props_;
  cudaStream_t stream_ = nullptr;
  // Scratch grows by replacement; replaced blocks stay allocated until the stream goes, since
  // work already enqueued (or a recorded graph) may still point into them.
  struct Scratch {
    std::vector<Buffer> blocks;
    size_t bytes = 0;
  };
  std::array<Scratch, 2> scratch_;  // by ScratchSlot
  std::shared_ptr<MatmulOverride> matmul_override_;
  gpu::MatmulTuning matmul_tuning_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index);

  const Caps& caps() const override { return caps_; }
  const ops::Kernels& kernels() const override;
  Stream& default_stream() override { return *stream_; }

  Buffer alloc(size_t bytes) override;
  size_t free_bytes() const override;
  void free(void* data, size_t) override;
  // Page-locked (cudaHostAlloc), so that copies from it are asynchronous and run at full speed.
  HostBuffer alloc_staging(size_t bytes) override;

  void copy_to_device(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_to_host(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_within(Stream& s, void* dst, const void* src, size_t bytes) override;
  void fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) override;

  void set_matmul_override(std::shared_ptr<MatmulOverride> override) {
    stream_->set_matmul_override(std::move(override));
  }

 private:
  cudaStream_t native(Stream& s);

  int index_;
  gpu::Props props_;
  Caps caps_;
  std::unique_ptr<CudaStream> stream_;
};

}  // namespace ding::cuda
