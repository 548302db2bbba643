// The device layer, split by lifetime: registry (process) -> Device (enumerated backend instance)
// -> Stream (ordered queue of launches) -> Buffer (owned memory).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ding/tensor.h"

namespace ding {

namespace ops { struct Kernels; }  // the op table, defined in ops/kernels.h
class Profiler;

// What a device can do. Zero means unknown; ding-bench measures bandwidth and FLOP/s itself.
struct Caps {
  std::string name;                // "AMD EPYC 7B13 (2 threads)", "NVIDIA H100 80GB HBM3"
  std::string backend;             // "cpu", "ref", "cuda", ...
  std::string arch;                // a GPU's instruction set: "sm_90", "gfx90a"; empty elsewhere
  size_t memory_bytes = 0;         // total device memory
  int compute_units = 0;           // CPU threads, GPU SMs / CUs
  size_t llc_bytes = 0;            // last-level cache (L3 on CPUs, L2 on GPUs)
  double peak_bandwidth_gbs = 0;   // DRAM/HBM bandwidth, if known
  double peak_gflops = 0;          // dense f32 (CPU) or bf16 tensor-core (GPU), if known
  bool host_accessible = false;    // device memory is ordinary host memory
};

class Device;

// Owned device memory. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* device, void* data, size_t bytes) : device_(device), data_(data), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device* device() const { return device_; }
  // A contiguous tensor over the start of the buffer; throws if it does not fit.
  Tensor as(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory that a device copies from at full speed: page-locked on GPUs, so that a copy from
// it runs asynchronously at the bus's rate. Move-only; freed by the function it came with.
class HostBuffer {
 public:
  using Release = void (*)(void* data);
  HostBuffer() = default;
  HostBuffer(void* data, size_t bytes, Release release) : data_(data), bytes_(bytes), release_(release) {}
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Release release_ = nullptr;
};

// An ordered queue of work on one device. Host backends run synchronously.
class Stream;

// A recorded sequence of stream work, replayed as one launch (a CUDA graph). The recorded
// kernels read their inputs through the same device pointers each replay, so callers change
// per-step values (token ids, positions) by writing those buffers before replaying.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void replay(Stream& stream) = 0;
};

// Times work on a stream by the device's own clock (GPU events), so a short kernel is not
// measured together with the host's launch and synchronisation overhead.
class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  virtual void start() = 0;       // a mark before the work
  virtual void stop() = 0;        // a mark after it
  virtual double seconds() = 0;   // waits for the stop mark; the time between the two marks
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device& device() = 0;
  virtual void synchronize() = 0;
  // Recording: between begin_capture and end_capture, work is recorded instead of run. Streams
  // that cannot record return false from supports_graphs and throw Error(not_implemented).
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture();
  virtual std::unique_ptr<Graph> end_capture();
  // A timer on this stream; the default synchronises and reads the host clock at each mark.
  virtual std::unique_ptr<StreamTimer> make_timer();
  // Optional per-op profiler; ops record time, FLOPs and bytes into it when set.
  Profiler* profiler = nullptr;
  // Measurement only: ops (names from ops/op_list.h) that are validated and then not run, their
  // outputs left as they were, so that a benchmark can time a step without them (ding-bench model
  // --skip-op: what an op costs inside a recorded step, launch gaps included). Results are
  // meaningless while it is set.
  const std::vector<std::string>* skipped_ops = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  // "auto", "cpu", "ref", "cuda", "cuda:0", ... The registry owns the instance.
  static Device& open(std::string_view spec);

  virtual const Caps& caps() const = 0;
  virtual const ops::Kernels& kernels() const = 0;
  virtual Stream& default_stream() = 0;

  // Allocation throws Error(out_of_memory) naming requested and free bytes.
  virtual Buffer alloc(size_t bytes) = 0;
  // Memory an allocation could still take now: the driver's free bytes on a GPU; on the host,
  // what the kernel reports available (MemAvailable + SwapFree), since host allocations succeed
  // lazily and fail only when touched. Callers planning several allocations check their sum.
  virtual size_t free_bytes() const = 0;
  virtual void free(void* data, size_t bytes) = 0;
  // Host memory to stage copies to this device in (weight upload); ordinary host memory unless
  // the device has a faster kind. Throws Error(out_of_memory) naming the bytes requested.
  virtual HostBuffer alloc_staging(size_t bytes);

  // Copies ordered on `stream`; for host-accessible devices both sides are host memory.
  virtual void copy_to_device(Stream& stream, void* dst, const void* src_host, size_t bytes) = 0;
  virtual void copy_to_host(Stream& stream, void* dst_host, const void* src, size_t bytes) = 0;
  virtual void copy_within(Stream& stream, void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_bytes(Stream& stream, void* dst, uint8_t value, size_t bytes) = 0;

  const std::string& name() const { return caps().backend; }
};

// Backends register a factory under a name; `Device::open` finds them here.
struct BackendInfo {
  std::string name;                       // "cpu"
  std::function<bool()> available;        // false when compiled in but no device is present
  std::function<std::unique_ptr<Device>(int index)> create;
};

namespace registry {
void add(BackendInfo info);
std::vector<std::string> compiled_backends();  // in preference order for "auto"
bool is_available(std::string_view backend);
}  // namespace registry

// Copies between host vectors and tensors (synchronous; for tools and tests, not hot paths).
void upload(Stream& stream, const Tensor& dst, const void* host, size_t bytes);
void download(Stream& stream, void* host, const Tensor& src, size_t bytes);

}  // namespace ding
