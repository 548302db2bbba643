// GpuDevice and GpuStream (device.h, stream.h), written once against vendor.h's host API: the
// same code is the "cuda" backend's device compiled for CUDA and the "hip" backend's compiled
// for HIP. What differs by hardware (how a device names itself, its peak rates) is chosen by
// vendor.h's hardware macros below; registration lives in backends/cuda and backends/hip.
// C++17, since HIP on NVIDIA compiles it with nvcc (cmake/hip_backend.cmake).
#include "device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "check.h"
#include "kernels.h"
#include "ding/error.h"

DING_GPU_BEGIN
namespace {

int attribute(Attribute a, int index) {
  int value = 0;
  DING_GPU_CHECK(device_attribute(&value, a, index));
  return value;
}

// Dense bf16 FLOPs per multiprocessor (compute unit) per clock with f32 accumulation: the
// datasheet rate divided by units × boost clock.
double bf16_flops_per_unit_clock(const Props& p, std::string_view arch) {
#if defined(DING_GPU_AMD)
  (void)p;
  // Matrix cores: MI300 (gfx94x) 2048, MI200 (gfx90a) 1024, MI100 (gfx908) 512. RDNA has none:
  // bf16 runs at the f32 FMA rate there (64 lanes × 2).
  const auto is = [&](std::string_view prefix) { return arch.substr(0, prefix.size()) == prefix; };
  if (is("gfx94")) return 2048;
  if (is("gfx90a")) return 1024;
  if (is("gfx908")) return 512;
  return 128;
#else
  (void)arch;
  // Tensor cores: Hopper 4096, A100 2048, Ada and consumer Ampere 512.
  if (p.cc_major >= 9) return 4096;
  if (p.cc_major == 8 && p.cc_minor == 0) return 2048;
  if (p.cc_major == 8) return 512;
  if (p.cc_major == 7) return 1024;  // f16 only on Volta/Turing; a rough ceiling
  return 0;
#endif
}

// "sm_90"; "gfx90a" (the device's name for it less its feature flags, as in "gfx90a:sramecc+:xnack-").
std::string instruction_set(std::string_view arch, const Props& p) {
#if defined(DING_GPU_AMD)
  (void)p;
  return std::string(arch.substr(0, arch.find(':')));
#else
  (void)arch;
  return fmt::format("sm_{}{}", p.cc_major, p.cc_minor);
#endif
}

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)"; "AMD Instinct MI250X (gfx90a, 110 CUs)".
std::string describe(const std::string& name, const std::string& instruction_set, const Props& p) {
#if defined(DING_GPU_AMD)
  return fmt::format("{} ({}, {} CUs)", name, instruction_set, p.sm_count);
#else
  return fmt::format("{} ({}, {} SMs)", name, instruction_set, p.sm_count);
#endif
}

class GpuGraph final : public Graph {
 public:
  GpuGraph(graph_t graph, graph_exec_t exec) : graph_(graph), exec_(exec) {}
  ~GpuGraph() override {
    (void)graph_exec_destroy(exec_);  // errors at teardown have no one to report to
    (void)graph_destroy(graph_);
  }
  void replay(Stream& stream) override { DING_GPU_CHECK(graph_launch(exec_, gpu_stream(stream).handle())); }

 private:
  graph_t graph_;
  graph_exec_t exec_;
};

// Two events in the stream's order; seconds() waits for the second.
class GpuTimer final : public StreamTimer {
 public:
  explicit GpuTimer(stream_t stream) : stream_(stream) {
    DING_GPU_CHECK(event_create(&start_));
    if (error_t e = event_create(&stop_); e != success) {
      (void)event_destroy(start_);
      throw_api_error(e, "event_create", __FILE__, __LINE__);
    }
  }
  ~GpuTimer() override {
    (void)event_destroy(start_);
    (void)event_destroy(stop_);
  }
  void start() override { DING_GPU_CHECK(event_record(start_, stream_)); }
  void stop() override { DING_GPU_CHECK(event_record(stop_, stream_)); }
  double seconds() override {
    DING_GPU_CHECK(event_synchronize(stop_));
    float ms = 0;
    DING_GPU_CHECK(event_elapsed_ms(&ms, start_, stop_));
    return double(ms) * 1e-3;
  }

 private:
  stream_t stream_;
  event_t start_ = nullptr, stop_ = nullptr;
};

// The streams alive in the process. Devices live in Device::open's function-static registry,
// which is destroyed after the runtime's own exit handler has torn the context down: the
// streams' scratch blocks, freed then, would be freed into a dead context (compute-sanitizer
// reports them as leaked). An exit handler registered after the runtime's (at the first
// stream's creation, so it runs before the runtime's) frees every live stream's scratch first.
// Never destroyed, so that it outlives every exit handler and static destructor.
struct LiveStreams {
  std::mutex mutex;
  std::vector<GpuStream*> streams;
};
LiveStreams& live_streams() {
  static LiveStreams* live = new LiveStreams;
  return *live;
}
void release_live_scratch() {
  LiveStreams& live = live_streams();
  std::lock_guard lock(live.mutex);
  for (GpuStream* s : live.streams) s->release_scratch();
}

}  // namespace

// ---- GpuStream ----

GpuStream::GpuStream(GpuDevice& device, int index, const Props& props) : device_(device), props_(props) {
  DING_GPU_CHECK(set_device(index));
  DING_GPU_CHECK(stream_create(&stream_));
  static std::once_flag exit_handler;
  std::call_once(exit_handler, [] { std::atexit(release_live_scratch); });
  LiveStreams& live = live_streams();
  std::lock_guard lock(live.mutex);
  live.streams.push_back(this);
}

GpuStream::~GpuStream() {
  {
    LiveStreams& live = live_streams();
    std::lock_guard lock(live.mutex);
    live.streams.erase(std::remove(live.streams.begin(), live.streams.end(), this), live.streams.end());
  }
  for (Scratch& slot : scratch_) slot.blocks.clear();
  (void)stream_destroy(stream_);
}

Device& GpuStream::device() { return device_; }

void GpuStream::synchronize() { DING_GPU_CHECK(stream_synchronize(stream_)); }

void GpuStream::begin_capture() {
  // Relaxed: a scratch block first needed during capture may still be allocated (callers run
  // a step eagerly before recording it, so normally nothing is).
  DING_GPU_CHECK(gpu::begin_capture(stream_));
}

std::unique_ptr<Graph> GpuStream::end_capture() {
  graph_t graph = nullptr;
  DING_GPU_CHECK(gpu::end_capture(stream_, &graph));
  graph_exec_t exec = nullptr;
  if (error_t e = graph_instantiate(&exec, graph); e != success) {
    (void)graph_destroy(graph);
    throw_api_error(e, "graph_instantiate", __FILE__, __LINE__);
  }
  return std::make_unique<GpuGraph>(graph, exec);
}

std::unique_ptr<StreamTimer> GpuStream::make_timer() { return std::make_unique<GpuTimer>(stream_); }

void* GpuStream::scratch(size_t bytes, ScratchSlot slot) {
  Scratch& s = scratch_[size_t(slot)];
  if (bytes > s.bytes) {
    const size_t grown = std::max(bytes, 2 * s.bytes);
    s.blocks.push_back(device_.alloc(grown));
    s.bytes = grown;
  }
  return s.blocks.empty() ? nullptr : s.blocks.back().data();
}

void GpuStream::release_scratch() {
  (void)stream_synchronize(stream_);
  for (Scratch& slot : scratch_) slot = Scratch{};
}

// ---- GpuDevice ----

GpuDevice::GpuDevice(std::string backend, int index) : backend_(std::move(backend)), index_(index) {
  DING_GPU_CHECK(set_device(index));
  props_.sm_count = attribute(Attribute::multiprocessors, index);
  props_.cc_major = attribute(Attribute::cc_major, index);
  props_.cc_minor = attribute(Attribute::cc_minor, index);
  props_.warp_size = attribute(Attribute::warp_size, index);
  props_.l2_bytes = size_t(attribute(Attribute::l2_bytes, index));
  props_.shared_per_block_optin = size_t(attribute(Attribute::shared_per_block_optin, index));
  props_.shared_per_sm = size_t(attribute(Attribute::shared_per_multiprocessor, index));

  std::string name, arch;
  DING_GPU_CHECK(device_names(&name, &arch, index));
  size_t free = 0, total = 0;
  DING_GPU_CHECK(mem_info(&free, &total));
  caps_.backend = backend_;
  caps_.arch = instruction_set(arch, props_);
  caps_.name = describe(name, caps_.arch, props_);
  caps_.memory_bytes = total;
  caps_.compute_units = props_.sm_count;
  caps_.llc_bytes = props_.l2_bytes;
  // Clock-derived peaks: double data rate × bus width; units × boost clock × tensor rate.
  const double mem_khz = attribute(Attribute::memory_clock_khz, index);
  const double bus_bits = attribute(Attribute::memory_bus_bits, index);
  caps_.peak_bandwidth_gbs = 2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9;
  const double clock_khz = attribute(Attribute::clock_khz, index);
  caps_.peak_gflops = props_.sm_count * clock_khz * 1e3 * bf16_flops_per_unit_clock(props_, arch) / 1e9;
  stream_ = std::make_unique<GpuStream>(*this, index, props_);
}

const ops::Kernels& GpuDevice::kernels() const { return kernel_table(); }

std::string GpuDevice::where() const { return fmt::format("{}:{}", backend_, index_); }

Buffer GpuDevice::alloc(size_t bytes) {
  DING_GPU_CHECK(set_device(index_));
  void* p = nullptr;
  const error_t e = malloc_device(&p, std::max<size_t>(bytes, 1));
  if (e == error_out_of_memory) {
    (void)get_last_error();  // clear the error so later calls are not blamed
    size_t free_bytes = 0, total_bytes = 0;
    (void)mem_info(&free_bytes, &total_bytes);
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot allocate {} bytes ({:.2f} GiB): {} bytes ({:.2f} GiB) free of {}", where(), bytes,
                            double(bytes) / (1 << 30), free_bytes, double(free_bytes) / (1 << 30), total_bytes));
  }
  DING_GPU_CHECK(e);
  return Buffer(this, p, bytes);
}

size_t GpuDevice::free_bytes() const {
  DING_GPU_CHECK(set_device(index_));
  size_t free = 0, total = 0;
  DING_GPU_CHECK(mem_info(&free, &total));
  return free;
}

HostBuffer GpuDevice::alloc_staging(size_t bytes) {
  DING_GPU_CHECK(set_device(index_));
  void* p = nullptr;
  const error_t e = malloc_pinned(&p, std::max<size_t>(bytes, 1));
  if (e == error_out_of_memory) {
    (void)get_last_error();
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot allocate {} bytes ({:.2f} GiB) of page-locked host memory for staging", where(),
                            bytes, double(bytes) / (1 << 30)));
  }
  DING_GPU_CHECK(e);
  // Called from destructors, possibly after the runtime unloaded at exit: never throws.
  return HostBuffer(p, bytes, [](void* data) { (void)free_pinned(data); });
}

void GpuDevice::free(void* data, size_t) {
  // Called from destructors, possibly after the runtime unloaded at exit: never throws.
  (void)free_device(data);
}

void GpuDevice::copy_to_device(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(memcpy_async(dst, src, bytes, CopyKind::host_to_device, native(s)));
}
void GpuDevice::copy_to_host(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(memcpy_async(dst, src, bytes, CopyKind::device_to_host, native(s)));
}
void GpuDevice::copy_within(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(memcpy_async(dst, src, bytes, CopyKind::device_to_device, native(s)));
}
void GpuDevice::fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) {
  DING_GPU_CHECK(memset_async(dst, value, bytes, native(s)));
}

stream_t GpuDevice::native(Stream& s) {
  if (&s.device() != this)
    throw Error(ErrorCode::device_mismatch, fmt::format("{}: a copy was given a stream of {}", where(), s.device().name()));
  return gpu_stream(s).handle();
}

int device_count() {
  int count = 0;
  if (gpu::device_count(&count) != success) {
    (void)get_last_error();
    return 0;
  }
  return count;
}

BackendInfo backend_info(std::string name) {
  return {name, [] { return device_count() > 0; }, [name](int index) -> std::unique_ptr<Device> {
            const int count = device_count();
            if (index >= count)
              throw Error(ErrorCode::backend_unavailable,
                          fmt::format("Device::open: {}:{} does not exist ({} devices)", name, index, count));
            return std::make_unique<GpuDevice>(name, index);
          }};
}

bool apply_matmul_tuning(Device& device, const MatmulTuning& tuning) {
  auto* ours = dynamic_cast<GpuDevice*>(&device);
#if !defined(DING_GPU_HIP_API) && !defined(DING_GPU_TMA)
  // A request for a core that is not there must not pass for a measurement of it.
  if (ours && tuning.tma)
    throw Error(ErrorCode::invalid_argument,
                "set_matmul_tuning: tma asks for the persistent TMA matmul core, which this build does not have "
                "(configure with -DDING_CUDA_TMA=ON)");
#endif
  if (ours) ours->stream().set_matmul_tuning(tuning);
  return ours != nullptr;
}

bool apply_op_tuning(Device& device, const OpTuning& tuning) {
  auto* ours = dynamic_cast<GpuDevice*>(&device);
  if (ours) ours->stream().set_op_tuning(tuning);
  return ours != nullptr;
}

bool apply_form_log(Device& device, std::shared_ptr<FormLog> log) {
  auto* ours = dynamic_cast<GpuDevice*>(&device);
  if (ours) ours->stream().set_form_log(std::move(log));
  return ours != nullptr;
}

bool apply_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override) {
  auto* ours = dynamic_cast<GpuDevice*>(&device);
  if (ours) ours->stream().set_matmul_override(std::move(override));
  return ours != nullptr;
}

DING_GPU_END
