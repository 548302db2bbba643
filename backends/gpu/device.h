// GpuDevice: one GPU of the "cuda" or "hip" backend (whichever API vendor.h compiles for):
// allocation with an out-of-memory error that names requested and free bytes, copies on its
// stream, and capabilities read from the driver. The backends' own folders only register it.
#pragma once
#include <memory>
#include <string>

#include "stream.h"

DING_GPU_BEGIN

class GpuDevice final : public Device {
 public:
  // `backend`: the name the device is registered under ("cuda", "hip"), used in its messages.
  GpuDevice(std::string backend, int index);

  const Caps& caps() const override { return caps_; }
  const ops::Kernels& kernels() const override;
  Stream& default_stream() override { return *stream_; }

  Buffer alloc(size_t bytes) override;
  size_t free_bytes() const override;
  void free(void* data, size_t) override;
  // Page-locked, so that copies from it are asynchronous and run at full speed.
  HostBuffer alloc_staging(size_t bytes) override;

  void copy_to_device(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_to_host(Stream& s, void* dst, const void* src, size_t bytes) override;
  void copy_within(Stream& s, void* dst, const void* src, size_t bytes) override;
  void fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) override;

  GpuStream& stream() { return *stream_; }

 private:
  stream_t native(Stream& s);
  std::string where() const;  // "cuda:0", for messages

  std::string backend_;
  int index_;
  Props props_;
  Caps caps_;
  std::unique_ptr<GpuStream> stream_;
};

// The number of devices the driver reports; 0 (never an error) where there is no driver or GPU.
int device_count();

// The registry entry of this API's backend under `name` ("cuda", "hip"): available when the
// driver reports a device, creating GpuDevices.
BackendInfo backend_info(std::string name);

// ding::gpu::set_matmul_tuning / set_matmul_override / set_op_tuning / set_form_log for this API's devices: false when `device`
// is not one of them (backends/gpu_controls.cpp then asks the next API compiled in).
bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning);
bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override);
bool apply_op_tuning(Device& device, const OpTuning& tuning);
bool apply_form_log(Device& device, std::shared_ptr<FormLog> log);

DING_GPU_END
