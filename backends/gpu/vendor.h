// vendor.h: the one file that spells CUDA or HIP. Kernels in backends/gpu/ use the ding-owned
// names below (gpu::stream_t, gpu::shfl_xor, gpu::warp_size, ...), so the same sources build
// with nvcc for NVIDIA, with hipcc for AMD, and with nvcc through HIP's NVIDIA headers (HIP on
// NVIDIA: -D__HIP_PLATFORM_NVIDIA__, cmake/hip_nvidia_headers.cmake).
//
// Two questions, answered apart:
//   DING_GPU_HIP_API      the runtime API is HIP's (hipcc and the host sources of an AMD build,
//                         or HIP on NVIDIA): streams, events, launches, errors are spelled hip*.
//   DING_GPU_AMD          the hardware is AMD's: wavefronts of 64 (CDNA) or 32 (RDNA), HIP's
//                         intrinsics. Otherwise the device code is NVIDIA's, whichever API.
// Guards for code that only NVIDIA hardware runs:
//   DING_GPU_NVIDIA_MMA   mma.sync / ldmatrix / cp.async (sm_80+): set only while compiling
//                         device code for such an architecture; a portable path sits beside it.
//   DING_GPU_NVIDIA       the host side of a build for NVIDIA hardware: lets host code choose an
//                         NVIDIA-only kernel (after checking Props::has_mma_sync()).
#pragma once

// hipcc defines __HIP_PLATFORM_AMD__ itself; the host sources of an AMD build get it from CMake
// (cmake/hip_backend.cmake) and compile with the C++ compiler.
#if defined(__HIP_PLATFORM_AMD__) || (defined(__HIPCC__) && !defined(__HIP_PLATFORM_NVIDIA__))
#define DING_GPU_AMD 1
#endif
#if defined(__HIPCC__) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP_PLATFORM_AMD__)
#define DING_GPU_HIP_API 1
#endif

#if defined(DING_GPU_HIP_API)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#endif
#if !defined(DING_GPU_AMD)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <cstdint>
#include <string>
#include <utility>

#if !defined(DING_GPU_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define DING_GPU_NVIDIA_MMA 1
#endif
// Device code for NVIDIA sm_90+: chained launches' griddepcontrol, clusters, bulk copies.
#if !defined(DING_GPU_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DING_GPU_SM90_CODE 1
#endif
#if !defined(DING_GPU_AMD)
#define DING_GPU_NVIDIA 1
#endif

// One build may compile these sources twice, for CUDA and for HIP (HIP on NVIDIA, or a build with
// both backends), and link both into one library: each compilation's symbols sit in an inline
// namespace named after its API, so `gpu::matmul` is one function per API, never an ODR clash.
// Every backends/gpu file opens its namespace with DING_GPU_BEGIN and closes it with DING_GPU_END.
#if defined(DING_GPU_HIP_API)
#define DING_GPU_API_NAMESPACE hip_api
#else
#define DING_GPU_API_NAMESPACE cuda_api
#endif
#define DING_GPU_BEGIN \
  namespace ding::gpu {  \
  inline namespace DING_GPU_API_NAMESPACE {
#define DING_GPU_END \
  }                  \
  }

DING_GPU_BEGIN

#if defined(DING_GPU_HIP_API)
using stream_t = hipStream_t;
using event_t = hipEvent_t;
using graph_t = hipGraph_t;
using graph_exec_t = hipGraphExec_t;
using error_t = hipError_t;
inline constexpr error_t success = hipSuccess;
inline const char* error_string(error_t e) { return hipGetErrorString(e); }
inline error_t get_last_error() { return hipGetLastError(); }
inline error_t func_set_max_dynamic_shared(const void* kernel, int bytes) {
  return hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// The virtual architecture a kernel's loaded code was compiled for (major · 10 + minor).
inline error_t func_ptx_version(const void* kernel, int& version) {
  hipFuncAttributes attributes{};
  const error_t e = hipFuncGetAttributes(&attributes, kernel);
  version = attributes.ptxVersion;
  return e;
}
#else
using stream_t = cudaStream_t;
using event_t = cudaEvent_t;
using graph_t = cudaGraph_t;
using graph_exec_t = cudaGraphExec_t;
using error_t = cudaError_t;
inline constexpr error_t success = cudaSuccess;
inline const char* error_string(error_t e) { return cudaGetErrorString(e); }
inline error_t get_last_error() { return cudaGetLastError(); }
inline error_t func_set_max_dynamic_shared(const void* kernel, int bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}
// The virtual architecture a kernel's loaded code was compiled for (major · 10 + minor): a PTX-only
// build for compute_80 runs on an sm_89 GPU through the JIT, without what sm_89 added.
inline error_t func_ptx_version(const void* kernel, int& version) {
  cudaFuncAttributes attributes{};
  const error_t e = cudaFuncGetAttributes(&attributes, kernel);
  version = attributes.ptxVersion;
  return e;
}
#endif

// Whether `kernel`'s loaded code was compiled for virtual architecture `arch` (major · 10 + minor)
// or a later one: a build whose code for the GPU is PTX for an older chip carries the kernel
// without that chip's instructions (clusters, E4M3 conversions), which it must then not be asked for.
inline bool kernel_compiled_for(const void* kernel, int arch) {
  int version = 0;
  return func_ptx_version(kernel, version) == success && version >= arch;
}

// ---- host side: the runtime API under one name each (backends/gpu/device.cpp) -----------------
enum class CopyKind { host_to_device, device_to_host, device_to_device };
// Device facts read one at a time (the property structs differ between the APIs and versions).
enum class Attribute {
  multiprocessors, cc_major, cc_minor, warp_size, l2_bytes, shared_per_block_optin, shared_per_multiprocessor,
  memory_clock_khz, memory_bus_bits, clock_khz
};

#if defined(DING_GPU_HIP_API)
inline constexpr error_t error_out_of_memory = hipErrorOutOfMemory;
inline error_t device_count(int* n) { return hipGetDeviceCount(n); }
inline error_t set_device(int index) { return hipSetDevice(index); }
inline error_t device_attribute(int* value, Attribute a, int index) {
  hipDeviceAttribute_t v = hipDeviceAttributeMultiprocessorCount;
  switch (a) {
    case Attribute::multiprocessors: v = hipDeviceAttributeMultiprocessorCount; break;
    case Attribute::cc_major: v = hipDeviceAttributeComputeCapabilityMajor; break;
    case Attribute::cc_minor: v = hipDeviceAttributeComputeCapabilityMinor; break;
    case Attribute::warp_size: v = hipDeviceAttributeWarpSize; break;
    case Attribute::l2_bytes: v = hipDeviceAttributeL2CacheSize; break;
    case Attribute::shared_per_block_optin: v = hipDeviceAttributeSharedMemPerBlockOptin; break;
    case Attribute::shared_per_multiprocessor: v = hipDeviceAttributeMaxSharedMemoryPerMultiprocessor; break;
    case Attribute::memory_clock_khz: v = hipDeviceAttributeMemoryClockRate; break;
    case Attribute::memory_bus_bits: v = hipDeviceAttributeMemoryBusWidth; break;
    case Attribute::clock_khz: v = hipDeviceAttributeClockRate; break;
  }
#if !defined(DING_GPU_AMD)
  // HIP 5.2's NVIDIA headers leave this one unmapped; ask the CUDA runtime they stand on.
  if (a == Attribute::shared_per_block_optin)
    return hipCUDAErrorTohipError(cudaDeviceGetAttribute(value, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
#endif
  return hipDeviceGetAttribute(value, v, index);
}
// The marketing name and, on AMD, the ISA ("gfx90a:sramecc+:xnack-"); empty arch elsewhere.
inline error_t device_names(std::string* name, std::string* arch, int index) {
  hipDeviceProp_t p{};
  const error_t e = hipGetDeviceProperties(&p, index);
  if (e != hipSuccess) return e;
  *name = p.name;
#if defined(DING_GPU_AMD)
  *arch = p.gcnArchName;
#else
  arch->clear();
#endif
  return e;
}
inline error_t mem_info(size_t* free, size_t* total) { return hipMemGetInfo(free, total); }
inline error_t malloc_device(void** p, size_t bytes) { return hipMalloc(p, bytes); }
inline error_t free_device(void* p) { return hipFree(p); }
inline error_t malloc_pinned(void** p, size_t bytes) { return hipHostMalloc(p, bytes, hipHostMallocDefault); }
inline error_t free_pinned(void* p) { return hipHostFree(p); }
inline error_t memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, stream_t s) {
  const hipMemcpyKind k = kind == CopyKind::host_to_device   ? hipMemcpyHostToDevice
                          : kind == CopyKind::device_to_host ? hipMemcpyDeviceToHost
                                                             : hipMemcpyDeviceToDevice;
  return hipMemcpyAsync(dst, src, bytes, k, s);
}
inline error_t memset_async(void* dst, int value, size_t bytes, stream_t s) { return hipMemsetAsync(dst, value, bytes, s); }
inline error_t stream_create(stream_t* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline error_t stream_destroy(stream_t s) { return hipStreamDestroy(s); }
inline error_t stream_synchronize(stream_t s) { return hipStreamSynchronize(s); }
inline error_t begin_capture(stream_t s) { return hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed); }
inline error_t end_capture(stream_t s, graph_t* g) { return hipStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* exec, graph_t g) { return hipGraphInstantiate(exec, g, nullptr, nullptr, 0); }
inline error_t graph_launch(graph_exec_t exec, stream_t s) { return hipGraphLaunch(exec, s); }
inline error_t graph_exec_destroy(graph_exec_t exec) { return hipGraphExecDestroy(exec); }
inline error_t graph_destroy(graph_t g) { return hipGraphDestroy(g); }
inline error_t event_create(event_t* e) { return hipEventCreate(e); }
inline error_t event_destroy(event_t e) { return hipEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return hipEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return hipEventSynchronize(e); }
inline error_t event_elapsed_ms(float* ms, event_t start, event_t stop) { return hipEventElapsedTime(ms, start, stop); }
#else
inline constexpr error_t error_out_of_memory = cudaErrorMemoryAllocation;
inline error_t device_count(int* n) { return cudaGetDeviceCount(n); }
inline error_t set_device(int index) { return cudaSetDevice(index); }
inline error_t device_attribute(int* value, Attribute a, int index) {
  cudaDeviceAttr v = cudaDevAttrMultiProcessorCount;
  switch (a) {
    case Attribute::multiprocessors: v = cudaDevAttrMultiProcessorCount; break;
    case Attribute::cc_major: v = cudaDevAttrComputeCapabilityMajor; break;
    case Attribute::cc_minor: v = cudaDevAttrComputeCapabilityMinor; break;
    case Attribute::warp_size: v = cudaDevAttrWarpSize; break;
    case Attribute::l2_bytes: v = cudaDevAttrL2CacheSize; break;
    case Attribute::shared_per_block_optin: v = cudaDevAttrMaxSharedMemoryPerBlockOptin; break;
    case Attribute::shared_per_multiprocessor: v = cudaDevAttrMaxSharedMemoryPerMultiprocessor; break;
    case Attribute::memory_clock_khz: v = cudaDevAttrMemoryClockRate; break;
    case Attribute::memory_bus_bits: v = cudaDevAttrGlobalMemoryBusWidth; break;
    case Attribute::clock_khz: v = cudaDevAttrClockRate; break;
  }
  return cudaDeviceGetAttribute(value, v, index);
}
inline error_t device_names(std::string* name, std::string* arch, int index) {
  cudaDeviceProp p{};
  const error_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess) return e;
  *name = p.name;
  arch->clear();
  return e;
}
inline error_t mem_info(size_t* free, size_t* total) { return cudaMemGetInfo(free, total); }
inline error_t malloc_device(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
inline error_t free_device(void* p) { return cudaFree(p); }
inline error_t malloc_pinned(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }
inline error_t free_pinned(void* p) { return cudaFreeHost(p); }
inline error_t memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, stream_t s) {
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  return cudaMemcpyAsync(dst, src, bytes, k, s);
}
inline error_t memset_async(void* dst, int value, size_t bytes, stream_t s) { return cudaMemsetAsync(dst, value, bytes, s); }
inline error_t stream_create(stream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline error_t stream_destroy(stream_t s) { return cudaStreamDestroy(s); }
inline error_t stream_synchronize(stream_t s) { return cudaStreamSynchronize(s); }
inline error_t begin_capture(stream_t s) { return cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed); }
inline error_t end_capture(stream_t s, graph_t* g) { return cudaStreamEndCapture(s, g); }
inline error_t graph_instantiate(graph_exec_t* exec, graph_t g) { return cudaGraphInstantiate(exec, g, 0); }
inline error_t graph_launch(graph_exec_t exec, stream_t s) { return cudaGraphLaunch(exec, s); }
inline error_t graph_exec_destroy(graph_exec_t exec) { return cudaGraphExecDestroy(exec); }
inline error_t graph_destroy(graph_t g) { return cudaGraphDestroy(g); }
inline error_t event_create(event_t* e) { return cudaEventCreate(e); }
inline error_t event_destroy(event_t e) { return cudaEventDestroy(e); }
inline error_t event_record(event_t e, stream_t s) { return cudaEventRecord(e, s); }
inline error_t event_synchronize(event_t e) { return cudaEventSynchronize(e); }
inline error_t event_elapsed_ms(float* ms, event_t start, event_t stop) { return cudaEventElapsedTime(ms, start, stop); }
#endif

// Launches kernel<<<grid, block, shared, stream>>>(args...) as a programmatic dependent launch
// where the device has it (sm_90+, `chained`): the kernel may then start while the previous
// kernel on the stream is still running, and must call wait_for_prior_kernels() (below) before
// it touches anything an earlier kernel writes or reads. Elsewhere, and on HIP, a plain launch.
// Recorded into a CUDA graph, the early start becomes a programmatic edge and survives replay.
// `cluster` > 0 (NVIDIA sm_90+; grid.x a multiple of it) puts the grid's blocks in clusters of that
// many consecutive blocks along x: a cluster's blocks run at once and reach each other's shared
// memory (cluster_store, cluster_sync below). HIP has no clusters: refused there.
template <class... Params, class... Args>
inline error_t launch_chained_in_clusters(bool chained, unsigned cluster, void (*kernel)(Params...), dim3 grid, dim3 block,
                                          size_t shared, stream_t stream, Args&&... args) {
#if defined(DING_GPU_HIP_API)
  (void)chained;
  if (cluster > 0) return hipErrorNotSupported;
  hipLaunchKernelGGL(kernel, grid, block, shared, stream, static_cast<Params>(args)...);
  return hipGetLastError();
#else
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned count = 0;
  if (cluster > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (chained) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
#endif
}

template <class... Params, class... Args>
inline error_t launch_chained(bool chained, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                              stream_t stream, Args&&... args) {
  return launch_chained_in_clusters(chained, 0, kernel, grid, block, shared, stream, std::forward<Args>(args)...);
}

// Blocks of `threads` threads with `shared` bytes of dynamic shared memory that fit one SM (CU)
// at once, by the runtime's occupancy calculator (registers, shared memory, block limits).
template <class... Params>
inline error_t resident_blocks(int* blocks, void (*kernel)(Params...), int threads, size_t shared) {
#if defined(DING_GPU_HIP_API)
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, shared);
#else
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, shared);
#endif
}

// The second argument of __launch_bounds__ for "at least `blocks` blocks of `threads` resident
// per SM (CU)": CUDA reads it as that block count, HIP as waves per SIMD (4 SIMDs of wave64 per
// CU on CDNA), so passing a CUDA block count to HIP would starve the registers 4-fold.
constexpr int launch_min_blocks([[maybe_unused]] int threads, int blocks) {
#if defined(DING_GPU_AMD)
  return (threads * blocks + 4 * 64 - 1) / (4 * 64);
#else
  return blocks;
#endif
}

// ---- device side -------------------------------------------------------------------------------
#if defined(__CUDACC__) || defined(__HIPCC__)

// Threads per warp (wavefront): 32 on NVIDIA and RDNA, 64 on CDNA. A compile-time constant in
// device code, so loops over lanes unroll.
__device__ constexpr int warp_size() {
#if defined(DING_GPU_AMD) && defined(__AMDGCN_WAVEFRONT_SIZE)
  return __AMDGCN_WAVEFRONT_SIZE;
#elif defined(DING_GPU_AMD)
  return 64;
#else
  return 32;
#endif
}

template <class T>
__device__ inline T shfl_xor(T v, int lane_mask) {
#if defined(DING_GPU_AMD)
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

template <class T>
__device__ inline T shfl(T v, int src_lane) {
#if defined(DING_GPU_AMD)
  return __shfl(v, src_lane);
#else
  return __shfl_sync(0xffffffffu, v, src_lane);
#endif
}

// x·y rounded to f32 on its own, never fused with a following add into an FMA (both compilers
// contract a·b + c by default): error-free transformations such as two-sum rely on it.
__device__ inline float mul_rn(float x, float y) {
#if defined(DING_GPU_AMD)
#pragma clang fp contract(off)
  return x * y;
#else
  return __fmul_rn(x, y);
#endif
}

// One bit per lane (lane l is bit l) for the lanes where `pred` holds; every lane of the warp
// must call it. 64 bits wide for both vendors (the upper half is zero with 32 lanes).
__device__ inline uint64_t ballot(bool pred) {
#if defined(DING_GPU_AMD)
  return __ballot(pred);
#else
  return __ballot_sync(0xffffffffu, pred);
#endif
}

// f16 <-> f32 through the vendor's half type (hardware conversions on both).
__device__ inline float half_bits_to_float(uint16_t bits) {
#if defined(DING_GPU_AMD)
  __half_raw raw;
  raw.data = bits;
  return __half2float(__half(raw));
#else
  return __half2float(__ushort_as_half(bits));
#endif
}

__device__ inline uint16_t float_to_half_bits(float f) {
#if defined(DING_GPU_AMD)
  __half_raw raw = __half(__float2half_rn(f));
  return raw.data;
#else
  return __half_as_ushort(__float2half_rn(f));
#endif
}

// bf16 <-> f32: widening is a shift everywhere; narrowing uses the hardware instruction where
// there is one (sm_80+) and round-to-nearest-even bit arithmetic elsewhere.
__device__ inline float bf16_bits_to_float(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

__device__ inline uint16_t float_to_bf16_bits(float f) {
#if !defined(DING_GPU_AMD) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
#endif
}

// Programmatic dependent launch, device side (no-ops before sm_90 and on HIP, where kernels
// never overlap). A kernel started by launch_chained() may run alongside its predecessor:
//   wait_for_prior_kernels()  returns once every earlier kernel on the stream has finished and
//                             its writes are visible. Before it, read only data the previous
//                             kernel does not write (weights; or what kernels two or more back
//                             wrote, see below), write nothing to global memory.
//   release_dependents()      lets the next chained kernel start now rather than when this one
//                             ends (it still waits for this one's writes where it reads them).
// Every kernel here releases only after its own wait, so a kernel starts once all but the one
// before it have finished: their writes are in memory (cp.async.cg and L2-coherent loads see
// them; the non-coherent read-only path may not).
__device__ inline void wait_for_prior_kernels() {
#if defined(DING_GPU_SM90_CODE)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ inline void release_dependents() {
#if defined(DING_GPU_SM90_CODE)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 to fetch [p, p + bytes) from memory without waiting for it: a chained kernel streams
// its weights in while its predecessor finishes. One bulk request per call on sm_90 (p and bytes
// multiples of 16); per 128-byte line elsewhere on NVIDIA; nothing on HIP.
__device__ inline void prefetch_to_l2(const void* p, uint32_t bytes) {
#if defined(DING_GPU_SM90_CODE)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#elif !defined(DING_GPU_AMD) && defined(__CUDA_ARCH__)
  for (uint32_t off = 0; off < bytes; off += 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(p) + off));
#else
  (void)p;
  (void)bytes;
#endif
}

// Asks for the 128-byte line holding p in this SM's L1, without waiting for it: small constants a
// kernel reads late on its critical path (a norm's weights) are fetched before its wait. Nothing
// on HIP.
__device__ inline void prefetch_to_l1(const void* p) {
#if !defined(DING_GPU_AMD) && defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

// A block's place in its cluster (launch_chained_in_clusters), and the cluster's barrier: every
// thread of every block of the cluster arrives (release) and waits (acquire), so shared-memory
// stores into other blocks before it are seen after it. A cluster's first remote store waits for
// a barrier its blocks passed (cluster_arrive at the start, cluster_wait before the store): every
// block has started. No-ops outside NVIDIA sm_90+, where nothing launches clusters.
__device__ inline unsigned cluster_rank() {
#if defined(DING_GPU_SM90_CODE)
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
#else
  return 0;
#endif
}

__device__ inline void cluster_arrive() {
#if defined(DING_GPU_SM90_CODE)
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}

__device__ inline void cluster_wait() {
#if defined(DING_GPU_SM90_CODE)
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__device__ inline void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// v into the float at `local` (a __shared__ address of this block) in the cluster's block `rank`.
__device__ inline void cluster_store(float* local, unsigned rank, float v) {
#if defined(DING_GPU_SM90_CODE)
  const uint32_t here = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t there;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(there) : "r"(here), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(there), "f"(v) : "memory");
#else
  (void)local, (void)rank, (void)v;
#endif
}

#endif  // device side

DING_GPU_END
