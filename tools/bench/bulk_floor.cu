// How a decode GEMV's weights reach shared memory or registers, without the arithmetic: per-thread
// 16-byte cp.async copies in a ring (what gemv_mma.cuh does; with and without an L2 fetch-size
// hint), per-thread loads straight into registers, bulk copies (sm_90 cp.async.bulk, one thread
// issues whole rows, completion counted on an mbarrier), against a bare grid-stride read.
// Standalone probe for docs/PERFORMANCE.md, not part of the CMake build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o bulk_floor tools/bench/bulk_floor.cu && ./bulk_floor [NxK ...]
// Every kernel reads an [N, K] bf16 matrix dealt to blocks as equal runs of rows, as the GEMV deals
// them, stages a 1 × K row of x after its first loads are issued (as the GEMV does after its
// chained-launch wait), and folds every byte into a checksum. Timed cold (rotating through ≥ 200 MB
// of copies): "alone" is one launch between two events, median of 50; "batch" is 20 launches back
// to back between two events, per launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    const cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kThreads = 256, kWarps = 8, kRows = 16, kChunk = 32;

struct Run {
  int base, extra;
};
__device__ inline void run_of(const Run& r, int& r0, int& rows) {
  const int b = int(blockIdx.x);
  r0 = b * r.base + min(b, r.extra);
  rows = r.base + (b < r.extra ? 1 : 0);
}
__device__ inline uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ inline void stage_x(const uint4* x, uint4* xs, int K) {
  for (int i = threadIdx.x; i < K / 8; i += kThreads) xs[i] = x[i];
}

template <int Hint>
__device__ inline void copy16(void* dst, const void* src, int bytes) {
  if constexpr (Hint == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
  else if constexpr (Hint == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
}

// ---- per-thread cp.async ring (the GEMV's pattern) ------------------------------------------
// Hint: the L2 prefetch size the copies ask for (0: none, 128 or 256 bytes): a lane group reads 64
// bytes of a row, the block's 8 warps 512 contiguous bytes, so a larger L2 fetch turns 8 DRAM
// requests per row into 2.
template <int Depth, int Hint = 0>
__global__ void __launch_bounds__(kThreads, 2) ring_kernel(const uint16_t* w, const uint4* x, int K, Run run, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char sh[];
  uint4* xs = reinterpret_cast<uint4*>(sh);
  uint4* ring = reinterpret_cast<uint4*>(sh + K * 2);
  int r0, rows;
  run_of(run, r0, rows);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, q = lane % 4;
  const int chunks = K / kChunk, tiles = (rows + kRows - 1) / kRows, units = tiles * chunks;
  const uint16_t* wb = w + size_t(r0) * K;
  auto issue = [&](int s, int u) {
    if (u < units) {
      const int t = u / chunks, c = u % chunks, row = t * kRows + g, k = c * kChunk + q * 8;
      const bool lo = row < rows, hi = row + 8 < rows;
      const uint16_t* src = wb + size_t(row) * K + k;
      copy16<Hint>(ring + s * kThreads + tid, lo ? src : wb, lo ? 16 : 0);
      copy16<Hint>(ring + (Depth + s) * kThreads + tid, hi ? src + 8 * K : wb, hi ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  int ahead = warp;
  for (int s = 0; s < Depth; ++s, ahead += kWarps) issue(s, ahead);
  stage_x(x, xs, K);
  __syncthreads();
  unsigned acc = 0;
  int s = 0;
  for (int u = warp; u < units; u += kWarps) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Depth - 1) : "memory");
    const uint4 lo = ring[s * kThreads + tid], hi = ring[(Depth + s) * kThreads + tid];
    const uint4 xv = xs[(u % chunks) * 4 + q];
    acc ^= lo.x ^ lo.y ^ lo.z ^ lo.w ^ hi.x ^ hi.y ^ hi.z ^ hi.w ^ xv.x;
    issue(s, ahead);
    ahead += kWarps;
    s = s + 1 == Depth ? 0 : s + 1;
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  if (acc == 0x12345678u) *sink = acc;
}

// ---- the GEMV's pattern through registers --------------------------------------------------
// Each warp takes units w, w + 8, ... as the ring does, but loads U of them straight into
// registers (16-byte non-caching loads, evict-first) and issues the next U before folding these:
// 2 · U · 16 bytes per thread in flight without a ring, so as many warps per SM as registers allow.
template <int Hint>
__device__ inline uint4 load16(const uint16_t* p) {
  uint4 v;
  if constexpr (Hint == 256)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <int U, int Hint, int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks) reg_kernel(const uint16_t* w, const uint4* x, int K, Run run, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char sh[];
  uint4* xs = reinterpret_cast<uint4*>(sh);
  int r0, rows;
  run_of(run, r0, rows);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, q = lane % 4;
  const int chunks = K / kChunk, tiles = (rows + kRows - 1) / kRows, units = tiles * chunks;
  const uint16_t* wb = w + size_t(r0) * K;
  auto load = [&](uint4 (&v)[U][2], int u0) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int u = u0 + j * kWarps;
      const int t = u / chunks, c = u - t * chunks, row = t * kRows + g, k = c * kChunk + q * 8;
      const uint16_t* src = wb + size_t(row) * K + k;
      v[j][0] = u < units && row < rows ? load16<Hint>(src) : make_uint4(0, 0, 0, 0);
      v[j][1] = u < units && row + 8 < rows ? load16<Hint>(src + 8 * K) : make_uint4(0, 0, 0, 0);
    }
  };
  uint4 cur[U][2], next[U][2];
  load(cur, warp);
  stage_x(x, xs, K);
  __syncthreads();
  unsigned acc = 0;
  for (int u0 = warp; u0 < units; u0 += U * kWarps) {
    load(next, u0 + U * kWarps);
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const uint4 xv = xs[((u0 + j * kWarps) % chunks) * 4 + q];
      acc ^= cur[j][0].x ^ cur[j][0].y ^ cur[j][0].z ^ cur[j][0].w ^ cur[j][1].x ^ cur[j][1].y ^ cur[j][1].z ^
             cur[j][1].w ^ xv.x;
    }
#pragma unroll
    for (int j = 0; j < U; ++j) cur[j][0] = next[j][0], cur[j][1] = next[j][1];
  }
  if (acc == 0x12345678u) *sink = acc;
}

// ---- bulk copies into a ring of tiles (sm_90) ----------------------------------------------
// Stage: 16 rows of K elements, rows padded by 16 bytes so that the 8 rows a warp's lanes read
// together fall in different banks. Thread 0 issues a tile's rows (one cp.async.bulk per row) on
// the stage's mbarrier; every thread waits for the phase, reads, and a block barrier frees the
// stage for the tile Stages further on.
__device__ inline void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ inline void mbar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ inline void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred p;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra wait_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
__device__ inline void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

template <int Stages>
__global__ void __launch_bounds__(kThreads, 2) bulk_kernel(const uint16_t* w, const uint4* x, int K, Run run, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char sh[];
  __shared__ __align__(8) uint64_t bars[Stages];
  const int ld = K + 8;  // elements per staged row
  uint4* xs = reinterpret_cast<uint4*>(sh);
  uint16_t* stage0 = reinterpret_cast<uint16_t*>(sh + K * 2);
  int r0, rows;
  run_of(run, r0, rows);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, q = lane % 4;
  const int chunks = K / kChunk, tiles = (rows + kRows - 1) / kRows;
  const uint16_t* wb = w + size_t(r0) * K;
  auto stage = [&](int s) { return stage0 + size_t(s) * kRows * ld; };
  auto issue = [&](int t) {  // thread 0
    if (t >= tiles) return;
    const int s = t % Stages, n = min(kRows, rows - t * kRows);
    mbar_expect(&bars[s], unsigned(n * K * 2));
    for (int r = 0; r < n; ++r) bulk_copy(stage(s) + r * ld, wb + size_t(t * kRows + r) * K, unsigned(K * 2), &bars[s]);
  };
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int t = 0; t < Stages; ++t) issue(t);
  }
  stage_x(x, xs, K);
  __syncthreads();
  unsigned acc = 0;
  for (int t = 0; t < tiles; ++t) {
    const int s = t % Stages;
    mbar_wait(&bars[s], unsigned((t / Stages) & 1));
    const int n = min(kRows, rows - t * kRows);
    const uint16_t* st = stage(s);
    for (int c = warp; c < chunks; c += kWarps) {
      const int k = c * kChunk + q * 8;
      const uint4 lo = g < n ? *reinterpret_cast<const uint4*>(st + g * ld + k) : make_uint4(0, 0, 0, 0);
      const uint4 hi = g + 8 < n ? *reinterpret_cast<const uint4*>(st + (g + 8) * ld + k) : make_uint4(0, 0, 0, 0);
      const uint4 xv = xs[c * 4 + q];
      acc ^= lo.x ^ lo.y ^ lo.z ^ lo.w ^ hi.x ^ hi.y ^ hi.z ^ hi.w ^ xv.x;
    }
    __syncthreads();  // stage s is free
    if (tid == 0) issue(t + Stages);
  }
  if (acc == 0x12345678u) *sink = acc;
}

// ---- bare grid-stride read ----------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) read_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= p[i].x;
  if (acc == 0x12345678u) *sink = acc;
}

template <class Launch>
void time(const char* what, size_t bytes, int copies, Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> alone;
  for (int it = 0; it < 60; ++it) {
    CHECK(cudaEventRecord(a));
    launch(it % copies);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (it >= 10) alone.push_back(ms);
  }
  CHECK(cudaGetLastError());
  std::sort(alone.begin(), alone.end());
  std::vector<float> batch;
  for (int rep = 0; rep < 7; ++rep) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < 20; ++i) launch((rep * 20 + i) % copies);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    batch.push_back(ms / 20);
  }
  std::sort(batch.begin(), batch.end());
  const float m1 = alone[alone.size() / 2], m2 = batch[batch.size() / 2];
  std::printf("%-28s %9zu B  alone %.4f ms = %5.0f GB/s   batch %.4f ms = %5.0f GB/s\n", what, bytes, m1,
              double(bytes) / m1 / 1e6, m2, double(bytes) / m2 / 1e6);
}

// One shape, N × K: every kernel over copies of the matrix (≥ 200 MB in all, so from DRAM).
void shape(int N, int K, int sms, unsigned* sink) {
  uint4* x = nullptr;
  CHECK(cudaMalloc(&x, size_t(K) * 2));
  CHECK(cudaMemset(x, 0, size_t(K) * 2));
  const size_t bytes = size_t(N) * K * 2;
  const int copies = int(std::max<size_t>(2, 200000000 / bytes + 1));
  std::vector<uint16_t*> bufs(size_t(copies), nullptr);
  for (auto& p : bufs) {
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMemset(p, 1, bytes));
  }
  std::printf("[%d x %d]\n", N, K);
  auto run_for = [&](int blocks) { return Run{N / blocks, N % blocks}; };
  const int blocks = 2 * sms;
  time("bare read", bytes, copies, [&](int c) {
    read_kernel<<<blocks, kThreads>>>(reinterpret_cast<const uint4*>(bufs[size_t(c)]), bytes / 16, sink);
  });
  auto ring = [&](const char* what, auto kernel, int depth) {
    const int smem = K * 2 + 2 * depth * kThreads * 16;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    time(what, bytes, copies, [&](int c) { kernel<<<blocks, kThreads, smem>>>(bufs[size_t(c)], x, K, run_for(blocks), sink); });
  };
  ring("cp.async ring, depth 12", ring_kernel<12, 0>, 12);
  ring("ring 12, L2::128B", ring_kernel<12, 128>, 12);
  ring("ring 12, L2::256B", ring_kernel<12, 256>, 12);
  ring("cp.async ring, depth 4", ring_kernel<4, 0>, 4);
  auto reg = [&](const char* what, auto kernel, int per_sm) {
    const int b = per_sm * sms, smem = K * 2;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    time(what, bytes, copies, [&](int c) { kernel<<<b, kThreads, smem>>>(bufs[size_t(c)], x, K, run_for(b), sink); });
  };
  reg("registers U4, 2/SM", reg_kernel<4, 0, 2>, 2);
  reg("registers U4, 4/SM", reg_kernel<4, 0, 4>, 4);
  reg("registers U2, 4/SM", reg_kernel<2, 0, 4>, 4);
  reg("registers U8, 2/SM", reg_kernel<8, 0, 2>, 2);
  reg("registers U4, 4/SM, L2::256B", reg_kernel<4, 256, 4>, 4);
  if (K * 2 + 2 * kRows * (K + 8) * 2 <= 227 * 1024) {
    const int smem = K * 2 + 2 * kRows * (K + 8) * 2;
    CHECK(cudaFuncSetAttribute(bulk_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    time("bulk rows, 2 tiles", bytes, copies, [&](int c) {
      bulk_kernel<2><<<blocks, kThreads, smem>>>(bufs[size_t(c)], x, K, run_for(blocks), sink);
    });
  }
  for (auto& p : bufs) CHECK(cudaFree(p));
  CHECK(cudaFree(x));
}

// Shapes as NxK arguments (default: the gpt2-xl layer's and LM head's at K = 1600).
int main(int argc, char** argv) {
  int sms = 0, optin = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  std::vector<std::pair<int, int>> shapes;
  for (int i = 1; i < argc; ++i) {
    int n = 0, k = 0;
    if (std::sscanf(argv[i], "%dx%d", &n, &k) != 2 || n <= 0 || k <= 0 || k % kChunk) {
      std::fprintf(stderr, "bulk_floor: error: shape '%s' is not NxK with K a multiple of %d\n", argv[i], kChunk);
      return 1;
    }
    shapes.emplace_back(n, k);
  }
  if (shapes.empty()) shapes = {{1600, 1600}, {4800, 1600}, {6400, 1600}, {50257, 1600}};
  for (const auto& [n, k] : shapes) shape(n, k, sms, sink);
  std::printf("optin shared %d B per block, %d SMs\n", optin, sms);
  return 0;
}
