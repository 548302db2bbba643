// The few-rows matmul core (decode, M ≤ kGemvMaxRows): out = epilogue(x[M, K] · w[N, K]ᵀ).
// At ~1 FLOP per weight byte the roofline is memory bandwidth, so the kernel is a weight
// stream: each warp owns kRowsPerWarp rows of w and walks them with 16-byte loads, every lane
// keeping kUnroll × kRowsPerWarp loads in flight before it touches them; x (a few KB) comes
// through L1 and is reused for all of the warp's rows. Sums are f32, reduced across the warp.
//
// Few output rows (N / rows-per-block) leave SMs idle and too few bytes in flight; then K is
// split over gridDim.y, each split writes f32 partial sums to scratch, and a second kernel adds
// the splits in a fixed order (deterministic) and applies the epilogue.
#pragma once
#include <algorithm>
#include <type_traits>

#include "check.h"
#include "gemm.cuh"
#include "reduce.cuh"
#include "stream.h"

namespace ding::gpu {

// Rows of x (per batch) up to which matmul streams w through the GEMV core.
inline constexpr int64_t kGemvMaxRows = 8;

namespace gemv {

constexpr int kThreads = 256;     // a multiple of 64: whole warps on either vendor
constexpr int kRowsPerWarp = 2;   // rows of w per warp: x loads are reused this many times
constexpr int kUnroll = 4;        // vectors per row and lane loaded before the FMAs use them
constexpr int64_t kMinSplitK = 512;  // a split shorter than this costs more in partials than it gains
constexpr int kMaxSplits = 16;

struct Params {
  GemmShape p;
  Epilogue ep;
  int64_t k_split = 0;        // elements of K per split, a multiple of the vector width
  float* partial = nullptr;   // [gridDim.y, batches · M, N] when K is split; null otherwise
};

// v[i] = float(p[i]) for N contiguous elements, in 16-byte loads where the width allows
// (the caller guarantees p is aligned to N · sizeof(T), or to 16 bytes if that is less).
template <class T, int N>
__device__ inline void load_floats(const T* p, float (&v)[N]) {
  constexpr int kChunk = int(N * sizeof(T)) > 16 ? 16 / int(sizeof(T)) : N;
#pragma unroll
  for (int c = 0; c < N; c += kChunk) {
    const Pack<T, kChunk> pk = *reinterpret_cast<const Pack<T, kChunk>*>(p + c);
#pragma unroll
    for (int e = 0; e < kChunk; ++e) v[c + e] = to_float(pk.v[e]);
  }
}

// Rows: a compile-time bound on M (1, 2, 4 or 8) so the sums live in registers; rows ≥ M are
// skipped at run time. Vec: elements per load (16 bytes of W, or 1 for rows that are not
// 16-byte aligned).
template <class X, class W, int Rows, int Vec>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const Params a) {
  const GemmShape& p = a.p;
  const int lane = int(threadIdx.x) % warp_size();
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / warp_size();
  const int64_t n0 = warp * kRowsPerWarp;
  if (n0 >= p.N) return;  // nothing below synchronises the block
  const int64_t k_begin = int64_t(blockIdx.y) * a.k_split;
  const int64_t k_end = k_begin + a.k_split < p.K ? k_begin + a.k_split : p.K;
  // A lane's loads start Vec-aligned: k_begin, K (Vec > 1) and k_split are multiples of Vec, so
  // k < k_end implies k + Vec ≤ k_end.
  constexpr int64_t kStep = int64_t(Vec) * warp_size();
  bool row_ok[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) row_ok[r] = n0 + r < p.N;

  for (int64_t b = blockIdx.z; b < p.batches; b += gridDim.z) {
    const X* x = static_cast<const X*>(p.x) + b * p.x_batch;
    const W* w = static_cast<const W*>(p.w) + b * p.w_batch + n0 * p.K;
    float acc[Rows][kRowsPerWarp] = {};
    for (int64_t k0 = k_begin + int64_t(lane) * Vec; k0 < k_end; k0 += kStep * kUnroll) {
      Pack<W, Vec> wv[kUnroll][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * kStep;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          if (k < k_end && row_ok[r])
            wv[u][r] = *reinterpret_cast<const Pack<W, Vec>*>(w + r * p.K + k);
          else
            wv[u][r] = Pack<W, Vec>{};
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * kStep;
        if (k >= k_end) break;
#pragma unroll
        for (int m = 0; m < Rows; ++m) {
          if (m >= p.M) break;
          float xv[Vec];
          load_floats<X, Vec>(x + m * p.K + k, xv);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int e = 0; e < Vec; ++e) acc[m][r] = fmaf(xv[e], to_float(wv[u][r].v[e]), acc[m][r]);
        }
      }
    }
    // Every lane ends with every sum; lane m · kRowsPerWarp + r (< 16 ≤ warp size) picks one, so
    // the epilogue is one store per lane (and one copy of its code).
    float mine = 0.0f;
#pragma unroll
    for (int m = 0; m < Rows; ++m)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float sum = warp_sum(acc[m][r]);
        if (lane == m * kRowsPerWarp + r) mine = sum;
      }
    const int m = lane / kRowsPerWarp, r = lane % kRowsPerWarp;
    if (m < Rows && m < p.M && n0 + r < p.N) {
      const int64_t row = b * p.M + m;
      if (a.partial)
        a.partial[(int64_t(blockIdx.y) * p.batches * p.M + row) * p.N + n0 + r] = mine;
      else
        a.ep.store(row, n0 + r, mine);
    }
  }
}

// out = epilogue(Σ_s partial[s]) for the `count` = rows · N outputs, splits added in order.
__global__ void __launch_bounds__(kThreads) gemv_reduce_kernel(const float* partial, int splits, int64_t rows, int64_t N,
                                                             const Epilogue ep) {
  const int64_t count = rows * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += partial[s * count + i];
    ep.store(i / N, i % N, sum);
  }
}

}  // namespace gemv

template <class X, class W>
void launch_gemv(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace gemv;
  // 16 bytes of W per load; x then needs the same count of elements at its own width.
  constexpr int kVec = kPack16<W>;
  const bool vec = p.K % kVec == 0 && aligned_to(p.x, std::min<size_t>(16, kVec * sizeof(X))) &&
                   aligned_to(p.w, 16);
  const int64_t rows_per_block = int64_t(kThreads / s.props().warp_size) * kRowsPerWarp;
  const int64_t row_blocks = ceil_div(p.N, rows_per_block);

  // Split K when there would be fewer than two blocks (16 warps on NVIDIA) per SM: too few
  // loads in flight to cover HBM latency. Not more eagerly: the split costs a second launch,
  // which is comparable to streaming a few MB of weights.
  Params a{p, ep, p.K, nullptr};
  int splits = 1;
  const int64_t blocks = row_blocks * p.batches, wanted = 2 * int64_t(s.props().sm_count);
  if (blocks < wanted) {
    const int64_t most = std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, p.K / kMinSplitK));
    splits = int(std::min(ceil_div(wanted, blocks), most));
  }
  if (splits > 1) {
    // Balanced splits that start on whole vectors.
    const int64_t unit = vec ? kVec : 1;
    a.k_split = ceil_div(ceil_div(p.K, splits), unit) * unit;
    splits = int(ceil_div(p.K, a.k_split));
  }
  const int64_t outputs = p.batches * p.M * p.N;
  if (splits > 1) a.partial = static_cast<float*>(s.scratch(size_t(splits) * size_t(outputs) * sizeof(float)));

  const dim3 grid(unsigned(row_blocks), unsigned(splits), unsigned(std::min(p.batches, kMaxGridYZ)));
  auto launch = [&](auto rows_tag, auto vec_tag) {
    constexpr int kRows = decltype(rows_tag)::value, kV = decltype(vec_tag)::value;
    gemv_kernel<X, W, kRows, kV><<<grid, kThreads, 0, s.handle()>>>(a);
  };
  auto with_rows = [&](auto vec_tag) {
    if (p.M <= 1) launch(std::integral_constant<int, 1>{}, vec_tag);
    else if (p.M <= 2) launch(std::integral_constant<int, 2>{}, vec_tag);
    else if (p.M <= 4) launch(std::integral_constant<int, 4>{}, vec_tag);
    else launch(std::integral_constant<int, 8>{}, vec_tag);
  };
  // Rows that are not 16-byte aligned (K·size not a multiple of 16, or an offset view) are rare:
  // one scalar instance, with the full 8-row bound, serves them all.
  if (vec)
    with_rows(std::integral_constant<int, kVec>{});
  else
    launch(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{});
  DING_GPU_CHECK_LAUNCH("gemv_kernel");

  if (splits > 1) {
    const unsigned reduce_blocks = unsigned(std::min<int64_t>(ceil_div(outputs, kThreads), int64_t(s.props().sm_count) * 8));
    gemv_reduce_kernel<<<reduce_blocks, kThreads, 0, s.handle()>>>(a.partial, splits, p.batches * p.M, p.N, ep);
    DING_GPU_CHECK_LAUNCH("gemv_reduce_kernel");
  }
}

}  // namespace ding::gpu
