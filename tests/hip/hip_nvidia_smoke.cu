// HIP on NVIDIA through the patched headers (cmake/hip_nvidia_headers.cmake): the host API ding's
// GPU code needs — device properties, allocation, async copies and memsets, streams, events, a
// kernel launch and stream capture into a graph — built with nvcc and run on an NVIDIA GPU.
// Prints one line and exits 0 when every result is right; otherwise names the first failure.
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    const hipError_t e = (call);                                                                      \
    if (e != hipSuccess) {                                                                            \
      std::fprintf(stderr, "hip_nvidia_smoke: error: %s failed: %s\n", #call, hipGetErrorString(e)); \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

__global__ void axpy(float* y, const float* x, float a, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] += a * x[i];
}

int main() {
  constexpr int n = 1 << 20;
  int count = 0;
  CHECK(hipGetDeviceCount(&count));
  if (count == 0) {
    std::fprintf(stderr, "hip_nvidia_smoke: error: no GPU\n");
    return 1;
  }
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = float(i % 1000) * 0.5f, y[i] = float(i % 7);
  float *dx = nullptr, *dy = nullptr;
  CHECK(hipMalloc(&dx, n * sizeof(float)));
  CHECK(hipMalloc(&dy, n * sizeof(float)));
  hipStream_t stream;
  hipEvent_t start, stop;
  CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  CHECK(hipEventCreate(&start));
  CHECK(hipEventCreate(&stop));
  CHECK(hipMemcpyAsync(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice, stream));
  CHECK(hipMemcpyAsync(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice, stream));

  // y += 2x eagerly, then y += 3x twice through a captured graph: y0 + 8x.
  CHECK(hipEventRecord(start, stream));
  hipLaunchKernelGGL(axpy, dim3((n + 255) / 256), dim3(256), 0, stream, dy, dx, 2.0f, n);
  CHECK(hipGetLastError());
  CHECK(hipEventRecord(stop, stream));
  hipGraph_t graph;
  hipGraphExec_t exec;
  CHECK(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal));
  hipLaunchKernelGGL(axpy, dim3((n + 255) / 256), dim3(256), 0, stream, dy, dx, 3.0f, n);
  CHECK(hipStreamEndCapture(stream, &graph));
  CHECK(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
  CHECK(hipGraphLaunch(exec, stream));
  CHECK(hipGraphLaunch(exec, stream));
  std::vector<float> out(n, -1.0f);
  CHECK(hipMemcpyAsync(out.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost, stream));
  CHECK(hipStreamSynchronize(stream));
  float ms = 0.0f;
  CHECK(hipEventElapsedTime(&ms, start, stop));
  for (int i = 0; i < n; ++i) {
    const float want = y[i] + 8.0f * x[i];
    if (out[i] != want) {
      std::fprintf(stderr, "hip_nvidia_smoke: error: y[%d] = %g, expected %g\n", i, out[i], want);
      return 1;
    }
  }
  CHECK(hipMemsetAsync(dy, 0, n * sizeof(float), stream));
  CHECK(hipMemcpyAsync(out.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost, stream));
  CHECK(hipStreamSynchronize(stream));
  for (int i = 0; i < n; ++i)
    if (out[i] != 0.0f) {
      std::fprintf(stderr, "hip_nvidia_smoke: error: memset left y[%d] = %g\n", i, out[i]);
      return 1;
    }
  CHECK(hipGraphExecDestroy(exec));
  CHECK(hipGraphDestroy(graph));
  CHECK(hipFree(dx));
  CHECK(hipFree(dy));
  std::printf("hip_nvidia_smoke: %s (cc %d.%d, %d SMs, clock %d kHz): axpy, graph replay and memset right; first launch %.3f ms\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.clockRate, ms);
  return 0;
}
