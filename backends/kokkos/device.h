// The "kokkos" backend's device and stream. Memory is Kokkos' default memory space (device
// memory under a CUDA or HIP Kokkos, host memory under Serial or OpenMP) and kernels run on the
// default execution space, in launch order: the stream is that space's instance, and
// synchronize() is its fence.
//
// Kokkos is initialised when the first device is made (unless the program did so itself, in which
// case ding leaves initialising and finalising to it) and finalised at exit, before static
// destructors that may still free buffers: a free after finalize leaves the memory to the
// process's end instead of calling into a finalised Kokkos.
#pragma once
#include "ding/device.h"

namespace ding::kokkos {

class KokkosDevice;

class KokkosStream final : public Stream {
 public:
  explicit KokkosStream(KokkosDevice& device) : device_(device) {}
  Device& device() override;
  void synchronize() override;

 private:
  KokkosDevice& device_;
};

class KokkosDevice final : public Device {
 public:
  KokkosDevice();

  const Caps& caps() const override { return caps_; }
  const ops::Kernels& kernels() const override;
  Stream& default_stream() override { return stream_; }

  Buffer alloc(size_t bytes) override;
  size_t free_bytes() const override;
  void free(void* data, size_t bytes) override;

  void copy_to_device(Stream& s, void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(Stream& s, void* dst_host, const void* src, size_t bytes) override;
  void copy_within(Stream& s, void* dst, const void* src, size_t bytes) override;
  void fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) override;

 private:
  Caps caps_;
  KokkosStream stream_{*this};
};

}  // namespace ding::kokkos
