// The "cuda" backend: one CudaDevice per GPU, its stream (with scratch and graph recording),
// allocation with an out-of-memory error that names requested and free bytes, and
// capabilities read from the driver. The kernels are the single-source ones of backends/gpu/.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "device.h"

#include "../gpu/check.h"
#include "../gpu/kernels.h"
#include "ding/error.h"

namespace ding::cuda {
namespace {

int device_attribute(cudaDeviceAttr attr, int index) {
  int value = 0;
  DING_GPU_CHECK(cudaDeviceGetAttribute(&value, attr, index));
  return value;
}

// Dense bf16 tensor-core FLOPs per SM per clock with f32 accumulation (the datasheet rates
// divided by SMs × boost clock): Hopper 4096, A100 2048, Ada and consumer Ampere 512.
double bf16_flops_per_sm_clock(int major, int minor) {
  if (major >= 9) return 4096;
  if (major == 8 && minor == 0) return 2048;
  if (major == 8) return 512;
  if (major == 7) return 1024;  // f16 only on Volta/Turing; a rough ceiling
  return 0;
}

class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);  // errors at teardown have no one to report to
    cudaGraphDestroy(graph_);
  }
  void replay(Stream& stream) override {
    DING_GPU_CHECK(cudaGraphLaunch(exec_, gpu::gpu_stream(stream).handle()));
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

// The GEMM cores' switches (gpu::MatmulTuning). An exception to "environment variables only in
// tools/": DING_GEMM_WGMMA=0 must bypass the wgmma core (and DING_GEMM_TMA=1 try the TMA core) in
// any program (ding_tests, ding-bench, an application) without a rebuild, and DING_GEMM_TILE /
// DING_GEMM_SPLIT let a benchmark sweep the plans. Unparsable values are ignored (the automatic
// choice stays).
gpu::MatmulTuning matmul_tuning_from_environment() {
  gpu::MatmulTuning t;
  if (const char* v = std::getenv("DING_GEMM_TMA")) t.tma = std::string_view(v) == "1";
  if (const char* v = std::getenv("DING_GEMM_WGMMA")) t.wgmma = std::string_view(v) != "0";
  if (const char* v = std::getenv("DING_GEMM_TILE")) {
    int m = 0, n = 0;
    if (std::sscanf(v, "%dx%d", &m, &n) == 2 && m > 0 && n > 0) {
      t.tile_m = m;
      t.tile_n = n;
    }
  }
  if (const char* v = std::getenv("DING_GEMM_SPLIT")) t.splits = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("DING_GEMV_CHAINED")) t.gemv_chained = std::string_view(v) != "0";
  if (const char* v = std::getenv("DING_GEMV_PREFETCH")) t.gemv_prefetch = std::string_view(v) != "0";
  if (const char* v = std::getenv("DING_GEMV_L2")) t.gemv_l2_fetch = std::atoi(v);
  return t;
}

// ---- CudaStream ----

void CudaStream::synchronize() { DING_GPU_CHECK(cudaStreamSynchronize(stream_)); }

void CudaStream::begin_capture() {
  // Relaxed: a scratch block first needed during capture may still be allocated (callers run
  // a step eagerly before recording it, so normally nothing is).
  DING_GPU_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
}

std::unique_ptr<Graph> CudaStream::end_capture() {
  cudaGraph_t graph = nullptr;
  DING_GPU_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess) {
    cudaGraphDestroy(graph);
    gpu::throw_api_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  return std::make_unique<CudaGraph>(graph, exec);
}

// ---- CudaDevice ----

CudaDevice::CudaDevice(int index) : index_(index) {
  DING_GPU_CHECK(cudaSetDevice(index));
  cudaDeviceProp p{};
  DING_GPU_CHECK(cudaGetDeviceProperties(&p, index));
  props_.sm_count = p.multiProcessorCount;
  props_.cc_major = p.major;
  props_.cc_minor = p.minor;
  props_.warp_size = p.warpSize;
  props_.l2_bytes = size_t(p.l2CacheSize);
  props_.shared_per_block_optin = size_t(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
  props_.shared_per_sm = p.sharedMemPerMultiprocessor;

  caps_.backend = "cuda";
  caps_.name = fmt::format("{} (sm_{}{}, {} SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
  caps_.memory_bytes = p.totalGlobalMem;
  caps_.compute_units = p.multiProcessorCount;
  caps_.llc_bytes = props_.l2_bytes;
  // Clock-derived peaks: double data rate × bus width; SMs × boost clock × tensor rate.
  const double mem_khz = device_attribute(cudaDevAttrMemoryClockRate, index);
  const double bus_bits = device_attribute(cudaDevAttrGlobalMemoryBusWidth, index);
  caps_.peak_bandwidth_gbs = 2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9;
  const double clock_khz = device_attribute(cudaDevAttrClockRate, index);
  caps_.peak_gflops = p.multiProcessorCount * clock_khz * 1e3 * bf16_flops_per_sm_clock(p.major, p.minor) / 1e9;
  stream_ = std::make_unique<CudaStream>(*this, index, props_);
}

const ops::Kernels& CudaDevice::kernels() const { return gpu::kernel_table(); }

Buffer CudaDevice::alloc(size_t bytes) {
  DING_GPU_CHECK(cudaSetDevice(index_));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    throw Error(ErrorCode::out_of_memory,
                fmt::format("cuda:{}: cannot allocate {} bytes ({:.2f} GiB): {} bytes ({:.2f} GiB) free of {}", index_,
                            bytes, double(bytes) / (1 << 30), free_bytes, double(free_bytes) / (1 << 30), total_bytes));
  }
  DING_GPU_CHECK(e);
  return Buffer(this, p, bytes);
}

size_t CudaDevice::free_bytes() const {
  DING_GPU_CHECK(cudaSetDevice(index_));
  size_t free = 0, total = 0;
  DING_GPU_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

HostBuffer CudaDevice::alloc_staging(size_t bytes) {
  DING_GPU_CHECK(cudaSetDevice(index_));
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw Error(ErrorCode::out_of_memory,
                fmt::format("cuda:{}: cannot allocate {} bytes ({:.2f} GiB) of page-locked host memory for staging", index_,
                            bytes, double(bytes) / (1 << 30)));
  }
  DING_GPU_CHECK(e);
  // Called from destructors, possibly after the runtime unloaded at exit: never throws.
  return HostBuffer(p, bytes, [](void* data) { (void)cudaFreeHost(data); });
}

void CudaDevice::free(void* data, size_t) {
  // Called from destructors, possibly after the runtime unloaded at exit: never throws.
  (void)cudaFree(data);
}

void CudaDevice::copy_to_device(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(s)));
}
void CudaDevice::copy_to_host(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(s)));
}
void CudaDevice::copy_within(Stream& s, void* dst, const void* src, size_t bytes) {
  DING_GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(s)));
}
void CudaDevice::fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) {
  DING_GPU_CHECK(cudaMemsetAsync(dst, value, bytes, native(s)));
}

cudaStream_t CudaDevice::native(Stream& s) {
  if (&s.device() != this)
    throw Error(ErrorCode::device_mismatch, fmt::format("cuda:{}: a copy was given a stream of {}", index_, s.device().name()));
  return gpu::gpu_stream(s).handle();
}

namespace {

// The streams alive in the process. Devices live in Device::open's function-static registry,
// which is destroyed after the CUDA runtime's own exit handler has torn the context down: the
// streams' scratch blocks, freed then, would be freed into a dead context (compute-sanitizer
// reports them as leaked). An exit handler registered after the runtime's — at the first
// stream's creation, so it runs before the runtime's — frees every live stream's scratch first.
// Never destroyed, so that it outlives every exit handler and static destructor.
struct LiveStreams {
  std::mutex mutex;
  std::vector<CudaStream*> streams;
};
LiveStreams& live_streams() {
  static LiveStreams* live = new LiveStreams;
  return *live;
}
void release_live_scratch() {
  LiveStreams& live = live_streams();
  std::lock_guard lock(live.mutex);
  for (CudaStream* s : live.streams) s->release_scratch();
}

}  // namespace

CudaStream::CudaStream(CudaDevice& device, int index, const gpu::Props& props)
    : device_(device), props_(props), matmul_tuning_(matmul_tuning_from_environment()) {
  DING_GPU_CHECK(cudaSetDevice(index));
  DING_GPU_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  static std::once_flag exit_handler;
  std::call_once(exit_handler, [] { std::atexit(release_live_scratch); });
  LiveStreams& live = live_streams();
  std::lock_guard lock(live.mutex);
  live.streams.push_back(this);
}

void CudaStream::release_scratch() {
  (void)cudaStreamSynchronize(stream_);
  for (Scratch& slot : scratch_) slot = Scratch{};
}

namespace {

// Two events in the stream's order; seconds() waits for the second.
class CudaTimer final : public StreamTimer {
 public:
  explicit CudaTimer(cudaStream_t stream) : stream_(stream) {
    DING_GPU_CHECK(cudaEventCreate(&start_));
    if (cudaError_t e = cudaEventCreate(&stop_); e != cudaSuccess) {
      (void)cudaEventDestroy(start_);
      gpu::throw_api_error(e, "cudaEventCreate", __FILE__, __LINE__);
    }
  }
  ~CudaTimer() override {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  void start() override { DING_GPU_CHECK(cudaEventRecord(start_, stream_)); }
  void stop() override { DING_GPU_CHECK(cudaEventRecord(stop_, stream_)); }
  double seconds() override {
    DING_GPU_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    DING_GPU_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return double(ms) * 1e-3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

std::unique_ptr<StreamTimer> CudaStream::make_timer() { return std::make_unique<CudaTimer>(stream_); }

CudaStream::~CudaStream() {
  {
    LiveStreams& live = live_streams();
    std::lock_guard lock(live.mutex);
    std::erase(live.streams, this);
  }
  for (Scratch& slot : scratch_) slot.blocks.clear();
  (void)cudaStreamDestroy(stream_);
}

Device& CudaStream::device() { return device_; }

void* CudaStream::scratch(size_t bytes, ScratchSlot slot) {
  Scratch& s = scratch_[size_t(slot)];
  if (bytes > s.bytes) {
    const size_t grown = std::max(bytes, 2 * s.bytes);
    s.blocks.push_back(device_.alloc(grown));
    s.bytes = grown;
  }
  return s.blocks.empty() ? nullptr : s.blocks.back().data();
}

namespace {

bool cuda_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace

void set_matmul_override(Device& device, std::shared_ptr<MatmulOverride> override) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (!cuda)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ding::cuda::set_matmul_override: device '{}' is not a CUDA device", device.name()));
  cuda->set_matmul_override(std::move(override));
}

}  // namespace ding::cuda

namespace ding {

void register_cuda_backend() {
  registry::add({"cuda", cuda::cuda_available, [](int index) -> std::unique_ptr<Device> {
                   int count = 0;
                   if (cudaGetDeviceCount(&count) != cudaSuccess || index >= count)
                     throw Error(ErrorCode::backend_unavailable,
                                 fmt::format("Device::open: cuda:{} does not exist ({} CUDA devices)", index, count));
                   return std::make_unique<cuda::CudaDevice>(index);
                 }});
}

}  // namespace ding
