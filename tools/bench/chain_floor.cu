// What a decode step's reads cost when they are a chain of kernels, against one persistent
// kernel: the floor of a step's bytes without their arithmetic (docs/PERFORMANCE.md, issues 5 and
// 20–22). Standalone, not part of the CMake build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o chain_floor tools/bench/chain_floor.cu
//   ./chain_floor [STEP ...]
// STEP is NAME:LAYERS:L1,L2,...:T1,T2,... — the MB (10^6 bytes) each kernel of a layer reads, the
// layer repeated LAYERS times, then the step's tail kernels (either list may be empty). Without a
// STEP: gpt2-xl's 48 layers of QKV 15.36, out-projection 5.12, MLP up and down 20.48 MB
// (tools/bench/step_floor.sh writes the STEPs of ding's decode steps from their per-op profile).
// Every kernel reads its own bytes; a step smaller than 256 MB is recorded as copies of itself on
// their own buffers, so each replay reads from DRAM as the model's step does; the graph's time is
// divided by the copies. Median of 20 replays after 5 warm-up ones.
// Kernels:
//   linear      grid-stride 16-byte loads; `plain` launches, or chained (programmatic dependent
//               launch) with the wait first (as a kernel that needs its predecessor's output
//               before it loads) or last (loads overlap the predecessor freely: no kernel can do
//               that with a data dependency, an upper bound)
//   slice       each block one contiguous run, like a GEMV's rows
//   gemv-like   slice, chained, each block holding a decode GEMV's shared memory (96 KB: two
//               blocks an SM, so the next kernel's blocks start only as these leave) and loading
//               the first 48 KB of its run (half a GEMV's ring) before the wait, as ding's GEMVs
//               do with the weights they need no predecessor for
//   persistent  one kernel for the whole step, with or without a grid barrier after each read
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "read_kernels.cuh"

#define CHECK(x)                                                                                \
  do {                                                                                          \
    cudaError_t err_ = (x);                                                                     \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

// Block b reads one contiguous run (a GEMV's rows), 16 bytes per thread per
// step.
template <int U>
__global__ void __launch_bounds__(256) slice_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink, int mode) {
  if (mode == 1) {
    ding::gpu::wait_for_prior_kernels();
    ding::gpu::release_dependents();
  }
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  const size_t b0 = blockIdx.x * per, b1 = n < b0 + per ? n : b0 + per;
  unsigned acc = 0;
  size_t i = b0 + threadIdx.x;
  for (; i + (U - 1) * 256 < b1; i += U * 256) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(p + i + u * 256);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < b1; i += 256) acc ^= p[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

constexpr int kEarlyLoads = 12;                    // 16-byte loads a thread before the wait: 48 KB a block
constexpr size_t kGemvSharedBytes = 96 * 1024;      // a decode GEMV block's ring

// The slice kernel as a chained decode GEMV streams: up to kEarlyLoads of its thread's pieces
// before the wait, the rest after it; launched with kGemvSharedBytes of (unused) shared memory.
__global__ void __launch_bounds__(256) gemv_like_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  const size_t b0 = blockIdx.x * per, b1 = n < b0 + per ? n : b0 + per;
  uint4 early[kEarlyLoads];
  size_t i = b0 + threadIdx.x;
#pragma unroll
  for (int u = 0; u < kEarlyLoads; ++u)
    if (i + u * 256 < b1) early[u] = __ldcs(p + i + u * 256);
  ding::gpu::wait_for_prior_kernels();
  ding::gpu::release_dependents();
  unsigned acc = 0;
#pragma unroll
  for (int u = 0; u < kEarlyLoads; ++u)
    if (i + u * 256 < b1) acc ^= early[u].x ^ early[u].y ^ early[u].z ^ early[u].w;
  i += kEarlyLoads * 256;
  for (; i + 3 * 256 < b1; i += 4 * 256) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * 256);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < b1; i += 256) acc ^= p[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

struct Read {
  const uint4* p;
  size_t n;  // 16-byte units
};

// Every read of the step in turn; barrier != 0: a grid barrier (counter in global memory) after
// each.
__device__ unsigned g_arrive;
__global__ void __launch_bounds__(256)
    persistent_kernel(const Read* reads, int count, unsigned* sink, int barrier) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int k = 0; k < count; ++k) {
    const uint4* p = reads[k].p;
    const size_t n = reads[k].n;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
      uint4 v0 = __ldcs(p + i), v1 = __ldcs(p + i + stride), v2 = __ldcs(p + i + 2 * stride),
            v3 = __ldcs(p + i + 3 * stride);
      acc ^= v0.x ^ v1.y ^ v2.z ^ v3.w;
    }
    for (; i < n; i += stride) acc ^= p[i].x;
    if (barrier) {
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        const unsigned target = (k + 1) * gridDim.x;
        atomicAdd(&g_arrive, 1u);
        unsigned v;
        do {
          asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(&g_arrive));
        } while (int(v - target) < 0);
      }
      __syncthreads();
    }
  }
  if (acc == 0x12345678u) *sink = acc;
}

template <class... Params, class... Args>
void launch(bool chained, void (*kernel)(Params...), int grid, cudaStream_t s, Args... args) {
  CHECK(ding::gpu::launch_chained(chained, kernel, dim3(grid), dim3(256), 0, s, args...));
}

void launch_gemv_like(int grid, cudaStream_t s, const uint4* p, size_t n, unsigned* sink) {
  CHECK(ding::gpu::launch_chained(true, gemv_like_kernel, dim3(grid), dim3(256), kGemvSharedBytes, s, p, n, sink));
}

struct Step {
  std::string name;
  int layers = 0;
  std::vector<double> layer_mb, tail_mb;

  std::vector<double> kernels_mb() const {
    std::vector<double> all;
    for (int l = 0; l < layers; ++l) all.insert(all.end(), layer_mb.begin(), layer_mb.end());
    all.insert(all.end(), tail_mb.begin(), tail_mb.end());
    return all;
  }
};

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    char* end = nullptr;
    const std::string item = s.substr(at, comma - at);
    const double mb = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(mb >= 0)) {  // 0: a launch that reads (almost) nothing
      std::fprintf(stderr, "chain_floor: error: \"%s\" is not a size in MB\n", item.c_str());
      std::exit(1);
    }
    out.push_back(mb);
    at = comma + 1;
  }
  return out;
}

Step parse_step(const std::string& arg) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (;;) {
    const size_t colon = arg.find(':', at);
    parts.push_back(arg.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() != 4 || parts[0].empty()) {
    std::fprintf(stderr, "chain_floor: error: \"%s\" is not NAME:LAYERS:L1,L2,...:T1,T2,...\n", arg.c_str());
    std::exit(1);
  }
  Step s;
  s.name = parts[0];
  s.layers = std::atoi(parts[1].c_str());
  s.layer_mb = parse_list(parts[2]);
  s.tail_mb = parse_list(parts[3]);
  if (s.layers < 0 || (s.layers > 0 && s.layer_mb.empty()) || s.kernels_mb().empty()) {
    std::fprintf(stderr, "chain_floor: error: \"%s\" reads nothing\n", arg.c_str());
    std::exit(1);
  }
  return s;
}

void run_step(const Step& step, int sms, cudaStream_t s, unsigned* sink) {
  const std::vector<double> mb = step.kernels_mb();
  double step_bytes = 0;
  for (double m : mb) step_bytes += m * 1e6;
  const int copies = std::max(1, int(256e6 / step_bytes));

  std::vector<size_t> units;  // 16-byte units of each kernel's read, each run 256-byte aligned
  size_t total_units = 0;
  for (double m : mb) {
    units.push_back(std::max<size_t>(1, size_t(m * 1e6 / 16)));
    total_units += (units.back() + 15) / 16 * 16;
  }
  uint4* base;
  CHECK(cudaMalloc(&base, total_units * copies * 16));
  CHECK(cudaMemset(base, 1, total_units * copies * 16));
  std::vector<std::vector<Read>> reads(copies);
  std::vector<Read*> reads_dev(copies);
  size_t at = 0;
  for (int c = 0; c < copies; ++c) {
    for (size_t n : units) {
      reads[c].push_back({base + at, n});
      at += (n + 15) / 16 * 16;
    }
    CHECK(cudaMalloc(&reads_dev[c], reads[c].size() * sizeof(Read)));
    CHECK(cudaMemcpy(reads_dev[c], reads[c].data(), reads[c].size() * sizeof(Read), cudaMemcpyHostToDevice));
  }

  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time_graph = [&](const char* mode, auto record) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int c = 0; c < copies; ++c) record(c);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    std::vector<float> t;
    for (int it = 0; it < 25; ++it) {
      CHECK(cudaEventRecord(a, s));
      CHECK(cudaGraphLaunch(e, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      if (it >= 5) t.push_back(ms / float(copies));
    }
    std::sort(t.begin(), t.end());
    const float ms = t[t.size() / 2];
    std::printf("%-20s %-32s %9.4f ms/step %9.2f us/layer %7.0f GB/s  (%zu kernels, %.1f MB, %d copies)\n",
                step.name.c_str(), mode, ms, step.layers > 0 ? ms * 1000 / step.layers : 0.0,
                step_bytes / ms / 1e6, mb.size(), step_bytes / 1e6, copies);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  };
  for (int per_sm : {2, 4})
    for (int mode : {0, 1, 2}) {
      char name[96];
      std::snprintf(name, sizeof name, "linear %d/SM %s", per_sm,
                    mode == 0   ? "plain"
                    : mode == 1 ? "chained wait-first"
                                : "chained wait-last");
      time_graph(name, [&](int c) {
        for (const Read& r : reads[c]) launch(mode != 0, read_kernel<4>, sms * per_sm, s, r.p, r.n, sink, mode);
      });
    }
  time_graph("slice 2/SM chained wait-first", [&](int c) {
    for (const Read& r : reads[c]) launch(true, slice_kernel<4>, sms * 2, s, r.p, r.n, sink, 1);
  });
  time_graph("gemv-like 2/SM chained, 48 KB early", [&](int c) {
    for (const Read& r : reads[c]) launch_gemv_like(sms * 2, s, r.p, r.n, sink);
  });
  unsigned* arrive;
  CHECK(cudaGetSymbolAddress((void**)&arrive, g_arrive));
  for (int barrier : {0, 1})
    time_graph(barrier ? "persistent 2/SM barrier per read" : "persistent 2/SM no barrier", [&](int c) {
      CHECK(cudaMemsetAsync(arrive, 0, 4, s));  // the barrier counter restarts at every step
      launch(false, persistent_kernel, sms * 2, s, (const Read*)reads_dev[c], int(reads[c].size()), sink, barrier);
    });
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  for (Read* r : reads_dev) CHECK(cudaFree(r));
  CHECK(cudaFree(base));
}

int main(int argc, char** argv) {
  std::vector<Step> steps;
  for (int i = 1; i < argc; ++i) steps.push_back(parse_step(argv[i]));
  if (steps.empty()) steps.push_back(parse_step("gpt2-xl:48:15.36,5.12,20.48,20.48:"));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaFuncSetAttribute(gemv_like_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGemvSharedBytes)));
  for (const Step& step : steps) run_step(step, sms, s, sink);
  return 0;
}
