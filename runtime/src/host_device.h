// HostDevice: a device whose memory is ordinary host memory and whose stream runs work
// synchronously on the calling thread. The cpu backend and the reference backend are both this.
#pragma once
#include "ding/device.h"

namespace ding {

class HostDevice;

class HostStream final : public Stream {
 public:
  explicit HostStream(HostDevice& device) : device_(device) {}
  Device& device() override;
  void synchronize() override {}

 private:
  HostDevice& device_;
};

class HostDevice : public Device {
 public:
  HostDevice(Caps caps, const ops::Kernels& kernels);
  const Caps& caps() const override { return caps_; }
  const ops::Kernels& kernels() const override { return kernels_; }
  Stream& default_stream() override { return stream_; }
  Buffer alloc(size_t bytes) override;
  size_t free_bytes() const override;
  void free(void* data, size_t bytes) override;
  void copy_to_device(Stream&, void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(Stream&, void* dst_host, const void* src, size_t bytes) override;
  void copy_within(Stream&, void* dst, const void* src, size_t bytes) override;
  void fill_bytes(Stream&, void* dst, uint8_t value, size_t bytes) override;

 private:
  Caps caps_;
  const ops::Kernels& kernels_;
  HostStream stream_{*this};
};

// What the host machine reports about itself: CPU model name, memory, last-level cache.
Caps host_caps(std::string backend, int threads);
// Host memory an allocation could still take: MemAvailable + SwapFree, or `fallback` where the
// kernel does not say.
size_t host_free_bytes(size_t fallback);

}  // namespace ding
