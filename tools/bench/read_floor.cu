// What one kernel launch can read, cold, between two CUDA events: the floor for a decode GEMV of
// the same bytes (docs/PERFORMANCE.md, issue 5). Standalone, not part of the CMake build:
//   nvcc -O3 -arch=sm_90 -o read_floor tools/bench/read_floor.cu && ./read_floor
// Each size rotates through copies (≥ 200 MB in all) so every launch reads from DRAM; each line is
// the median of 50 launches, each timed alone; an empty kernel gives the launch + event overhead.
#include <cuda_runtime.h>

#include "read_kernels.cuh"

#include <algorithm>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                              \
  do {                                                                        \
    const cudaError_t e = (x);                                                \
    if (e != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));            \
      return 1;                                                               \
    }                                                                         \
  } while (0)

__global__ void empty_kernel() {}

template <class Launch>
float median_ms(cudaEvent_t a, cudaEvent_t b, Launch launch) {
  std::vector<float> t;
  for (int it = 0; it < 60; ++it) {
    cudaEventRecord(a);
    launch(it);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (it >= 10) t.push_back(ms);  // after warm-up
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  // gpt2-xl decode matrices in bf16: out-projection, QKV, MLP up/down, LM head.
  for (const size_t bytes : {size_t(5120000), size_t(15360000), size_t(20480000), size_t(160822400)}) {
    const int copies = int(std::max<size_t>(2, 200000000 / bytes + 1));
    std::vector<uint4*> bufs(static_cast<size_t>(copies));
    for (uint4*& p : bufs) {
      CHECK(cudaMalloc(&p, bytes));
      CHECK(cudaMemset(p, 1, bytes));
    }
    for (const int blocks_per_sm : {2, 4, 8})
      for (const int unroll : {4, 8}) {
        const float ms = median_ms(a, b, [&](int it) {
          const uint4* p = bufs[size_t(it % copies)];
          if (unroll == 4)
            read_kernel<4><<<sms * blocks_per_sm, 256>>>(p, bytes / 16, sink, 0);
          else
            read_kernel<8><<<sms * blocks_per_sm, 256>>>(p, bytes / 16, sink, 0);
        });
        CHECK(cudaGetLastError());
        std::printf("read %9zu B  %d blocks/SM unroll %d: %.4f ms = %.0f GB/s\n", bytes, blocks_per_sm, unroll, ms,
                    double(bytes) / ms / 1e6);
      }
    for (uint4* p : bufs) CHECK(cudaFree(p));
  }
  const float empty = median_ms(a, b, [&](int) { empty_kernel<<<2 * sms, 256>>>(); });
  CHECK(cudaGetLastError());
  std::printf("empty kernel between events: %.4f ms\n", empty);
  return 0;
}
