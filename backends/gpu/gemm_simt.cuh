// The portable matmul core: f32 FMAs on shared-memory tiles, for every shape, dtype mix and
// alignment (f32 operands, mixed x/w dtypes, rows that cp.async cannot load, GPUs without
// mma.sync, HIP), and for matmul_chain's [K, N] factors.
//
// A block computes a 64 × 64 tile of out; its 256 threads each own a 4 × 4 block of it. Per
// 16-deep slice of K, x and w are widened to f32 into shared memory (out-of-range elements as
// zeros, so edges need no special case in the inner loop), then each thread does 16 steps of two
// 16-byte shared loads and 16 FMAs. swiglu: the tile is 64 columns of the 2N-wide product
// (gemm.cuh), 32 outputs, and threads pair their gate and up sums by a shuffle.
#pragma once
#include <type_traits>

#include "check.h"
#include "gemm.cuh"
#include "stream.h"

DING_GPU_BEGIN

namespace simt {

constexpr int kBM = 64, kBN = 64, kBK = 16;
constexpr int kThreads = 256;  // 16 × 16 threads of 4 × 4 outputs; a multiple of 64
constexpr int kTx = kBN / 4;   // threads along n
// Rows of 64 floats padded to 68: a thread's four rows (or columns) stay one aligned float4
// (68 · 4 bytes is a multiple of 16), and the transposing stores of x and w (16 lanes with the
// same m, consecutive k) are 2-way bank conflicts instead of 16-way.
constexpr int kPad = 4;

// WKn: w is stored [K, N] (element (k, n) at w[k · N + n]) instead of [N, K].
template <class X, class W, bool WKn>
__global__ void __launch_bounds__(kThreads) gemm_simt_kernel(const GemmShape p, const Epilogue ep) {
  alignas(16) __shared__ float xs[kBK][kBM + kPad];  // xs[k][m]
  alignas(16) __shared__ float ws[kBK][kBN + kPad];  // ws[k][n]
  const int tid = int(threadIdx.x), tx = tid % kTx, ty = tid / kTx;
  const int64_t m0 = int64_t(blockIdx.x) * kBM;

  // Columns of the product: for swiglu its 2N-wide form (gemm.cuh), whose groups of 16 columns
  // are four threads' worth (tx = 4i … 4i + 3): the gate sums of 8 outputs in the first two, their
  // up sums in the other two.
  constexpr int kLoads = kBM * kBK / kThreads;  // elements of each operand a thread loads per slice
  const int64_t cols = !WKn && ep.swiglu ? swiglu_cols(p.N) : p.N;
  for (int64_t n0 = int64_t(blockIdx.y) * kBN; n0 < cols; n0 += int64_t(gridDim.y) * kBN)
    for (int64_t b = blockIdx.z; b < p.batches; b += gridDim.z) {
      const X* x = static_cast<const X*>(p.x) + b * p.x_batch;
      const W* w = static_cast<const W*>(p.w) + b * p.w_batch;
      // The rows of a [N, K] w behind this thread's loads (the same columns at every slice); −1: none.
      int64_t w_row[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) w_row[i] = WKn ? -1 : product_w_row(n0 + (tid + i * kThreads) / kBK, p.N, ep.swiglu);
      float acc[4][4] = {};
      for (int64_t k0 = 0; k0 < p.K; k0 += kBK) {
        // 64 × 16 elements of each operand, 4 per thread; consecutive threads read consecutive k
        // (consecutive n for a [K, N] w), so global reads coalesce along the stored rows.
#pragma unroll
        for (int i = 0; i < kLoads; ++i) {
          const int e = tid + i * kThreads;
          const int r = e / kBK, c = e % kBK;
          const int64_t m = m0 + r, k = k0 + c;
          xs[c][r] = m < p.M && k < p.K ? to_float(x[m * p.K + k]) : 0.0f;
          if constexpr (WKn) {
            const int kk = e / kBN, nn = e % kBN;
            ws[kk][nn] = k0 + kk < p.K && n0 + nn < p.N ? to_float(w[(k0 + kk) * p.N + n0 + nn]) : 0.0f;
          } else {
            ws[c][r] = w_row[i] >= 0 && k < p.K ? to_float(w[w_row[i] * p.K + k]) : 0.0f;
          }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
          const float4 xv = *reinterpret_cast<const float4*>(&xs[kk][ty * 4]);
          const float4 wv = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
          const float xr[4] = {xv.x, xv.y, xv.z, xv.w}, wr[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xr[i], wr[j], acc[i][j]);
        }
        __syncthreads();  // the next slice overwrites xs and ws
      }
      // One rolled loop around one copy of the epilogue (picking acc[e / 4][e % 4] by compare
      // and select keeps acc in registers): the epilogue's dtype branches are code, not time.
#pragma unroll 1
      for (int e = 0; e < 16; ++e) {
        float v = 0.0f;
#pragma unroll
        for (int q = 0; q < 16; ++q)
          if (q == e) v = acc[q / 4][q % 4];
        const int64_t m = m0 + ty * 4 + e / 4, n = n0 + tx * 4 + e % 4;
        if (!WKn && ep.swiglu) {
          // Thread tx ^ 2 (lane ^ 2, the same warp whatever its width) holds the other sum of the
          // same outputs: the gate-half threads take the up sums and store. Every lane shuffles.
          const float up = shfl_xor(v, 2);
          const int64_t j = swiglu_out_col(n);
          if (tx % 4 < 2 && m < p.M && j < p.N) ep.store(b * p.M + m, j, v, up);
          continue;
        }
        if (m < p.M && n < p.N) ep.store(b * p.M + m, n, v);
      }
    }
}

}  // namespace simt

template <class X, class W, bool WKn>
void launch_gemm_simt(GpuStream& s, const GemmShape& p, const Epilogue& ep) {
  using namespace simt;
  const int64_t cols = WKn ? p.N : product_shape(p, ep).N;
  const dim3 grid(unsigned(ceil_div(p.M, kBM)), unsigned(std::min(ceil_div(cols, kBN), kMaxGridYZ)),
                  unsigned(std::min(p.batches, kMaxGridYZ)));
  gemm_simt_kernel<X, W, WKn><<<grid, kThreads, 0, s.handle()>>>(p, ep);
  DING_GPU_CHECK_LAUNCH("gemm_simt_kernel");
}

DING_GPU_END
