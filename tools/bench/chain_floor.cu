// What a decode step's weight reads cost when they are a chain of kernels,
// against one persistent kernel: the floor for the layer's four GEMVs without
// their arithmetic (docs/PERFORMANCE.md, issue 5). Standalone, not part of the
// CMake build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o chain_floor tools/bench/chain_floor.cu
//   && ./chain_floor
// 48 layers × the gpt2-xl bf16 matrices (QKV 15.4 MB, out-projection 5.1, MLP
// up and down 20.5: 2.95 GB, every byte read once per replay, so from DRAM),
// recorded in a CUDA graph and replayed (median of 20 after 5 warm-up replays).
// Kernels:
//   linear      grid-stride 16-byte loads; `plain` launches, or chained
//   (programmatic dependent
//               launch) with the wait first (as a GEMV that needs its
//               predecessor's output before it loads) or last (loads overlap
//               the predecessor freely: no kernel can do that with a data
//               dependency, an upper bound)
//   slice       each block one contiguous run, like a GEMV's rows
//   persistent  one kernel for all 192 matrices, with or without a grid barrier
//   after each
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

// Every matrix of every layer in turn; barrier != 0: a grid barrier (counter in
// global memory) after each.
struct Mats {
  const uint4* p[48 * 4];
  size_t n[48 * 4];
};
__device__ unsigned g_arrive;
__global__ void __launch_bounds__(256)
    persistent_kernel(Mats m, int count, unsigned* sink, int barrier, unsigned epoch0) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int k = 0; k < count; ++k) {
    const uint4* p = m.p[k];
    const size_t n = m.n[k];
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
        const unsigned target = epoch0 + (k + 1) * gridDim.x;
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

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  const size_t layer_bytes[4] = {15360000, 5120000, 20480000, 20480000};
  const int layers = 48;
  Mats m{};
  double total = 0;
  for (int l = 0; l < layers; ++l)
    for (int j = 0; j < 4; ++j) {
      void* p;
      CHECK(cudaMalloc(&p, layer_bytes[j]));
      CHECK(cudaMemset(p, 1, layer_bytes[j]));
      m.p[l * 4 + j] = (const uint4*)p;
      m.n[l * 4 + j] = layer_bytes[j] / 16;
      total += layer_bytes[j];
    }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time_graph = [&](const char* name, auto record) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    record();
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
      if (it >= 5) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    const float ms = t[t.size() / 2];
    std::printf("%-48s %.3f ms  %.1f us/layer  %.0f GB/s (%.0f%% of 3000)\n", name, ms, ms * 1000 / layers,
                total / ms / 1e6, total / ms / 1e6 / 30);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
  };
  for (int per_sm : {1, 2, 4})
    for (int mode : {0, 1, 2}) {
      char name[96];
      std::snprintf(name, sizeof name, "linear %d/SM %s", per_sm,
                    mode == 0   ? "plain"
                    : mode == 1 ? "chained wait-first"
                                : "chained wait-last");
      time_graph(name, [&] {
        for (int k = 0; k < layers * 4; ++k)
          launch(mode != 0, read_kernel<4>, sms * per_sm, s, m.p[k], m.n[k], sink, mode);
      });
    }
  for (int per_sm : {1, 2})
    for (int mode : {0, 1}) {
      char name[96];
      std::snprintf(name, sizeof name, "slice %d/SM %s", per_sm, mode == 0 ? "plain" : "chained wait-first");
      time_graph(name, [&] {
        for (int k = 0; k < layers * 4; ++k)
          launch(mode != 0, slice_kernel<4>, sms * per_sm, s, m.p[k], m.n[k], sink, mode);
      });
    }
  unsigned epoch = 0;
  for (int per_sm : {1, 2})
    for (int barrier : {0, 1}) {
      char name[96];
      std::snprintf(name, sizeof name, "persistent %d/SM %s", per_sm, barrier ? "barrier per matrix" : "no barrier");
      CHECK(cudaMemcpyToSymbol(g_arrive, &epoch, 4));
      time_graph(name, [&] {
        unsigned* ptr;
        CHECK(cudaGetSymbolAddress((void**)&ptr, g_arrive));
        CHECK(cudaMemsetAsync(ptr, 0, 4, s));  // the barrier counter restarts at every replay
        launch(false, persistent_kernel, sms * per_sm, s, m, layers * 4, sink, barrier, 0u);
      });
    }
  return 0;
}
