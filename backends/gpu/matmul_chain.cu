// matmul_chain on the GPU: the chain's products chunk by chunk of A0's rows (ops/matmul.h), each
// product on one of the matmul cores of matmul.cu.
//   Tensor cores (gemm_mma.cuh): 16-bit chains (every factor bf16, or every factor f16, so the
//     intermediates are that dtype too, ops::matmul_chain_intermediate_dtype) on sm_80+, for the
//     products whose inner size K is a multiple of 8. The core computes x · wᵀ with w [N, K]
//     row-major, but a factor A_i is [K, N]: factors 1..n are transposed once per call into the
//     scratch's staging (they are small next to A0 and every chunk re-reads them from cache).
//   SIMT (gemm_simt.cuh): everything else (f32 or mixed chains, odd K, HIP), reading the [K, N]
//     factors as they are, the intermediates in the scratch's dtype.
// The chunk size comes from the front end (the device's last-level cache, Caps::llc_bytes = the
// L2): a chunk's two intermediates stay in L2 between the product that writes them and the one
// that reads them, instead of a round trip through memory for the whole product.
#include <algorithm>
#include <type_traits>

#include "check.h"
#include "elements.cuh"
#include "gemm.cuh"
#include "gemm_mma.cuh"
#include "gemm_simt.cuh"
#include "kernels.h"
#include "matmul_cores.h"
#include "stream.h"

DING_GPU_BEGIN

namespace {

constexpr int kTransposeTile = 32, kTransposeRows = 8;

// out [N, K] = fᵀ for f [K, N], both row-major: 32 × 32 tiles through shared memory, so the reads
// of f and the writes of out both run along rows; the tile's rows are padded by one element so
// the column reads of the tile do not all hit one bank. Tiles beyond the grid's y loop (K / 32 >
// 65535 rows of tiles) are taken by the loop.
template <class T>
__global__ void transpose_kernel(T* out, const T* f, int64_t K, int64_t N) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int64_t n0 = int64_t(blockIdx.x) * kTransposeTile;
  for (int64_t k0 = int64_t(blockIdx.y) * kTransposeTile; k0 < K; k0 += int64_t(gridDim.y) * kTransposeTile) {
    for (int r = int(threadIdx.y); r < kTransposeTile; r += kTransposeRows) {
      const int64_t k = k0 + r, n = n0 + threadIdx.x;
      if (k < K && n < N) tile[r][threadIdx.x] = f[k * N + n];
    }
    __syncthreads();
    for (int r = int(threadIdx.y); r < kTransposeTile; r += kTransposeRows) {
      const int64_t n = n0 + r, k = k0 + threadIdx.x;
      if (n < N && k < K) out[n * K + k] = tile[threadIdx.x][r];
    }
    __syncthreads();  // the tile is refilled by the next iteration
  }
}

template <class T>
void launch_transpose(GpuStream& s, void* out, const Tensor& f) {
  const int64_t K = f.dim(0), N = f.dim(1);
  const dim3 grid(unsigned(ceil_div(N, kTransposeTile)), unsigned(std::min(ceil_div(K, kTransposeTile), kMaxGridYZ)));
  transpose_kernel<T><<<grid, dim3(kTransposeTile, kTransposeRows), 0, s.handle()>>>(static_cast<T*>(out),
                                                                                      static_cast<const T*>(f.data), K, N);
  DING_GPU_CHECK_LAUNCH("transpose_kernel");
}

// One product of the chain: x [M, K] (src_dtype) · f [K, N] through the epilogue. w_nk: f
// transposed to [N, K] in the staging when the tensor cores take this product, else null.
void launch_product(GpuStream& s, GemmShape p, const Epilogue& ep, DType src_dtype, const Tensor& f, const void* w_nk) {
#if defined(DING_GPU_NVIDIA)
  if (w_nk && src_dtype == f.dtype) {
    GemmShape tc = p;
    tc.w = w_nk;
    if (gemm_mma_fits(s.props(), tc)) {
      const bool done = with_float_type(f.dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, float>) {
          return false;
        } else {
          launch_gemm_mma<T>(s, tc, ep);
          return true;
        }
      });
      if (done) return;
    }
  }
#else
  (void)w_nk;
#endif
  with_float_type(src_dtype, [&](auto x_tag) {
    with_float_type(f.dtype, [&](auto w_tag) { launch_gemm_simt<decltype(x_tag), decltype(w_tag), true>(s, p, ep); });
  });
}

// Rows per chunk for the products that run chunk by chunk (2 … n): at most the front end's
// chunk_rows (what the slots and L2 hold), rounded down to whole 128-row tiles and chosen so that
// those products run whole waves of 128 × 128 tiles. A chunk is a separate launch, so a chunk
// whose tiles end just past a wave pays a nearly empty wave each time: at d_model 768 the L2's
// 8533 rows gave the 1024-wide product 536 tiles, 4.06 waves on 132 SMs, i.e. 5 (the same rows
// whole are 23.8 waves, i.e. 24), and chunking lost to the whole product. The cost counts each
// product's waves times its K (a tile's time), over every chunk with the last one's remainder.
int64_t whole_wave_chunk_rows(const Props& props, const ops::MatmulChainArgs& a) {
  constexpr int64_t kTile = 128;
  const int64_t R = a.factors[0].dim(0), most = a.chunk_rows;
  if (a.count <= 2 || most < kTile || props.sm_count <= 0) return most;
  auto cost = [&](int64_t rows) {
    auto waves = [&](int64_t r, int64_t N) { return ceil_div(ceil_div(r, kTile) * ceil_div(N, kTile), props.sm_count); };
    const int64_t full = R / rows, rest = R % rows;
    double total = 0;
    for (int i = 2; i < a.count; ++i) {
      const int64_t K = a.factors[i].dim(0), N = a.factors[i].dim(1);
      total += double(K) * double(full * waves(rows, N) + (rest ? waves(rest, N) : 0));
    }
    return total;
  };
  int64_t best = most;
  double best_cost = cost(most);
  for (int64_t rows = most / kTile * kTile; rows >= std::max(kTile, most / 2); rows -= kTile) {
    const double c = cost(rows);
    if (c < best_cost) best = rows, best_cost = c;
  }
  return best;
}

}  // namespace

// Chunk c of A0's rows (cr of them): A0[c]·A1 → slot 1; ·A2 → slot 0; …; the last product lands
// in out[c] in out's dtype. A product never writes the slot it reads.
void matmul_chain(Stream& stream, const ops::MatmulChainArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const Tensor& first = a.factors[0];
  const int64_t R = first.dim(0), chunk_rows = whole_wave_chunk_rows(s.props(), a), out_cols = a.out.dim(1);
  if (R == 0 || out_cols == 0) return;
  const DType inter = a.scratch.dtype;
  const int64_t inter_size = int64_t(dtype_size(inter));
  const int64_t slot_elements = ops::matmul_chain_slot_elements(a, a.chunk_rows);  // as the front end sized them
  char* const scratch = static_cast<char*>(a.scratch.data);
  void* const slot[2] = {scratch, scratch + slot_elements * inter_size};

  // The products the tensor cores take, each with its factor staged as [N, K]. The probe's x is
  // the product's first chunk; later chunks of A0 start K · rows elements further, still 16-byte
  // aligned when K is a multiple of 8 (which the probe checks), and the slots do not move.
  const void* w_nk[ops::kMaxChainFactors] = {};
#if defined(DING_GPU_NVIDIA)
  if (inter != DType::f32) {
    char* const staging = scratch + 2 * slot_elements * inter_size;
    for (int i = 1; i < a.count; ++i) {
      const Tensor& f = a.factors[i];
      GemmShape probe;
      probe.x = i == 1 ? first.data : slot[(i - 1) % 2];
      probe.w = staging + ops::matmul_chain_staging_offset(a, i) * inter_size;
      probe.K = f.dim(0);
      if (f.numel() == 0 || !gemm_mma_fits(s.props(), probe)) continue;
      with_float_type(inter, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (!std::is_same_v<T, float>) launch_transpose<T>(s, const_cast<void*>(probe.w), f);
      });
      w_nk[i] = probe.w;
    }
  }
#endif

  // Product `i` over rows [r0, r0 + rows): x is A0's rows or the intermediate `src` (rows from
  // its start); out is out's rows for the last product, else slot i % 2.
  auto product = [&](int i, int64_t r0, int64_t rows, const void* src, DType src_dtype) {
    const Tensor& f = a.factors[i];
    GemmShape p;
    p.x = src;
    p.w = f.data;
    p.M = rows;
    p.K = f.dim(0);
    p.N = f.dim(1);
    Epilogue ep;
    ep.ld = p.N;
    if (i + 1 == a.count) {
      ep.out = static_cast<char*>(a.out.data) + r0 * out_cols * int64_t(dtype_size(a.out.dtype));
      ep.out_dtype = a.out.dtype;
    } else {
      ep.out = slot[i % 2];
      ep.out_dtype = inter;
    }
    if (p.N > 0) launch_product(s, p, ep, src_dtype, f, w_nk[i]);
  };
  auto a0_rows = [&](int64_t r0) {
    return static_cast<const void*>(static_cast<const char*>(first.data) + r0 * first.dim(1) * int64_t(dtype_size(first.dtype)));
  };

  // Product 1 reads A0 from memory whatever the schedule, and where its output is narrow (W_E·W_V:
  // 64 columns) one chunk of rows gives it too few tiles to fill the GPU (4096 rows × 64 columns
  // are 64 tiles for 132 SMs). So it runs over as many chunks at once as slot 1 holds (the whole
  // of W_E·W_V, 6.4 MB, for the vocabulary), and products 2… chunk by chunk from there. Safe while
  // no later product writes slot 1 before those chunks are consumed: chains of at most three
  // products (the third, if any, writes out). A single product (two factors) needs no slot at all.
  const int64_t first_cols = std::max<int64_t>(a.factors[1].dim(1), 1);
  const int64_t group_rows = a.count == 2   ? R
                             : a.count <= 4 ? std::max<int64_t>(1, slot_elements / (chunk_rows * first_cols)) * chunk_rows
                                            : chunk_rows;
  for (int64_t g0 = 0; g0 < R; g0 += group_rows) {
    const int64_t gr = std::min(group_rows, R - g0);
    product(1, g0, gr, a0_rows(g0), first.dtype);
    for (int64_t r0 = g0; r0 < g0 + gr && a.count > 2; r0 += chunk_rows) {
      const int64_t cr = std::min(chunk_rows, g0 + gr - r0);
      // This chunk's rows of product 1's output: A product never writes the slot it reads.
      const void* src = static_cast<const char*>(slot[1]) + (r0 - g0) * first_cols * inter_size;
      for (int i = 2; i < a.count; ++i) {
        product(i, r0, cr, src, inter);
        src = slot[i % 2];
      }
    }
  }
}

DING_GPU_END
