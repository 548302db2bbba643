// The bare read kernel of the standalone bandwidth probes (read_floor.cu, chain_floor.cu): the
// floor a decode GEMV of the same bytes is measured against (docs/PERFORMANCE.md, issue 5).
#pragma once
#include <cstddef>

#include "../../backends/gpu/vendor.h"  // chained launch, host and device side: as ding's kernels use it

// Grid-stride read; mode 0: plain, 1: wait first, then release the next kernel,
// 2: release, read, wait.
template <int U>
__global__ void __launch_bounds__(256) read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink, int mode) {
  if (mode == 1) {
    ding::gpu::wait_for_prior_kernels();
    ding::gpu::release_dependents();
  }
  if (mode == 2) ding::gpu::release_dependents();
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= p[i].x;
  if (mode == 2) ding::gpu::wait_for_prior_kernels();
  if (acc == 0x12345678u) *sink = acc;
}
