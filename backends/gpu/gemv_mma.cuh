// The few-rows matmul core on tensor cores (NVIDIA sm_80+, x and w both bf16 or both f16):
// out = epilogue(norm(x)[M, K] · w[N, K]ᵀ) for M ≤ 8, as one m16n8k16 product per 16 rows of w,
// 16 of K and all M rows of x (the n8 side; rows ≥ M are zero).
//
// Why tensor cores for a memory-bound product: on the FMA path every 16-bit weight costs a
// widening and an FMA per row of x, which at HBM3 rates leaves the SMs issue-bound (the f32
// GEMV, with half the elements per byte, ran at 96 % of copy bandwidth where bf16 ran at 67 %).
// mma.sync takes the 16-bit operands as loaded, and batch 8 costs what batch 1 does.
//
// Loads stay 16 bytes wide: a product over k does not care in which order k is summed, so each
// lane feeds the mma fragments from 8 contiguous elements of its row of w and the same 8 of x.
// Lane (g, q) = (lane / 4, lane % 4) loads elements [32c + 8q, 32c + 8q + 8) of w rows g and g + 8
// and of x row g; fragment k positions 2q, 2q + 1, 2q + 8, 2q + 9 of the first mma take its
// elements 0–3, those of the second mma elements 4–7. A and B use the same map, so each mma sums
// 16 distinct elements of k, and the two cover the lane group's 32.
//
// Block: 16 rows of w; its 8 or 16 warps take interleaved 32-element chunks of K and add their partial
// tiles through shared memory in warp order (deterministic). The prologue (L2 prefetch before
// the chained-launch wait, the staged norm(x)) is the FMA core's, gemv.cuh.
#pragma once
#include "gemm_mma.cuh"
#include "gemv.cuh"

namespace ding::gpu {

namespace gemv {

constexpr int kMmaRows = 16;        // rows of w per block: the mma's m
constexpr int kMmaChunk = 32;       // elements of K per lane group and step: 4 lanes × 8
constexpr int kMmaUnroll = 4;       // chunks per warp loaded before the mmas use them

// Warps: per block, each over its share of K: 8, or 16 where K is long (more loads in flight for
// the few blocks a short, wide matrix has).
template <class T, bool Normed, int Warps>
__global__ void __launch_bounds__(Warps * 32) gemv_mma_kernel(const Params a) {
#if defined(DING_GPU_NVIDIA_MMA)
  const GemmShape& p = a.p;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * kMmaRows;
  if (a.prefetch_bytes && threadIdx.x == 0) {
    const T* tile = static_cast<const T*>(p.w) + int64_t(blockIdx.z) * p.w_batch + n0 * p.K;
    const int64_t left = (p.N - n0) * p.K * int64_t(sizeof(T));
    prefetch_to_l2(tile, uint32_t(std::min<int64_t>(left, a.prefetch_bytes)));
  }
  wait_for_prior_kernels();
  release_dependents();

  __shared__ float4 partial[Warps][32];
  extern __shared__ __align__(16) unsigned char staged_rows[];  // Normed: norm(x), [M, K]
  const int64_t chunks = (p.K + kMmaChunk - 1) / kMmaChunk;
  const bool row_lo = n0 + g < p.N, row_hi = n0 + g + 8 < p.N;

  for (int64_t b = blockIdx.z; b < p.batches; b += gridDim.z) {
    const T* x = static_cast<const T*>(p.x) + b * p.x_batch;
    const T* w = static_cast<const T*>(p.w) + b * p.w_batch + n0 * p.K;
    if constexpr (Normed) {
      T* staged = reinterpret_cast<T*>(staged_rows);
      for (int m = warp; m < p.M; m += Warps) normalize_row<T, 8>(x + m * p.K, staged + m * p.K, p.K, a.norm);
      __syncthreads();
      x = staged;
    }
    const bool x_row = g < p.M;
    // kMmaUnroll chunks per step, the next step's loads issued before this step's mmas: every
    // warp keeps two steps of w in flight however long K is.
    struct Step {
      uint4 lo[kMmaUnroll], hi[kMmaUnroll], xv[kMmaUnroll];
    };
    const int64_t stride = int64_t(Warps) * kMmaUnroll;
    auto load = [&](Step& st, int64_t c0) {
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        const int64_t k = (c0 + int64_t(u) * Warps) * kMmaChunk + q * 8;
        const bool in = k < p.K;  // K % 8 == 0: a lane's 8 elements are all in or all out
        st.lo[u] = in && row_lo ? *reinterpret_cast<const uint4*>(w + g * p.K + k) : make_uint4(0, 0, 0, 0);
        st.hi[u] = in && row_hi ? *reinterpret_cast<const uint4*>(w + (g + 8) * p.K + k) : make_uint4(0, 0, 0, 0);
        st.xv[u] = in && x_row ? *reinterpret_cast<const uint4*>(x + g * p.K + k) : make_uint4(0, 0, 0, 0);
      }
    };
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Step cur;
    load(cur, warp);
    for (int64_t c0 = warp; c0 < chunks; c0 += stride) {
      Step next;
      if (c0 + stride < chunks) load(next, c0 + stride);
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        mma::mma_16816<T>(d, {cur.lo[u].x, cur.hi[u].x, cur.lo[u].y, cur.hi[u].y}, {cur.xv[u].x, cur.xv[u].y});
        mma::mma_16816<T>(d, {cur.lo[u].z, cur.hi[u].z, cur.lo[u].w, cur.hi[u].w}, {cur.xv[u].z, cur.xv[u].w});
      }
      cur = next;
    }
    // d: rows g and g + 8 of the tile, x rows 2q and 2q + 1. Warps add up in order.
    partial[warp][lane] = make_float4(d[0], d[1], d[2], d[3]);
    __syncthreads();
    if (warp == 0) {
      float4 sum = partial[0][lane];
      for (int w2 = 1; w2 < Warps; ++w2) {
        const float4 v = partial[w2][lane];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int m = 2 * q;
      const int64_t row = b * p.M;
      if (row_lo && m < p.M) a.ep.store(row + m, n0 + g, sum.x);
      if (row_lo && m + 1 < p.M) a.ep.store(row + m + 1, n0 + g, sum.y);
      if (row_hi && m < p.M) a.ep.store(row + m, n0 + g + 8, sum.z);
      if (row_hi && m + 1 < p.M) a.ep.store(row + m + 1, n0 + g + 8, sum.w);
    }
    __syncthreads();  // partial and the staged rows are rewritten by the next batch
  }
#endif
}

}  // namespace gemv

// Whether the tensor-core GEMV takes the product: 16-bit x and w of one type, 16-byte rows.
template <class X, class W>
bool gemv_mma_fits(const Props& props, const GemmShape& p) {
  return std::is_same_v<X, W> && !std::is_same_v<X, float> && props.has_mma_sync() && p.K % 8 == 0 &&
         aligned_to(p.x, 16) && aligned_to(p.w, 16);
}

template <class T>
void launch_gemv_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm) {
  using namespace gemv;
  const bool normed = norm.kind != ops::NormKind::none;
  Params a{p, ep, {}, 1, p.K, 0};
  if (normed) a.norm = {norm.kind == ops::NormKind::layer_norm, norm.weight.data, norm.bias.data, norm.eps};
  const bool chained = gemv_chained(s);
  if (chained && gemv_prefetch(s)) a.prefetch_bytes = uint32_t(std::min<int64_t>(kMmaRows * p.K * int64_t(sizeof(T)), int64_t(1) << 30));
  const dim3 grid(unsigned(ceil_div(p.N, kMmaRows)), 1, unsigned(std::min(p.batches, kMaxGridYZ)));
  const size_t staged = normed ? size_t(p.M * p.K) * sizeof(T) : 0;
  auto launch = [&](auto normed_tag, auto warps_tag) {
    constexpr int kWarps = decltype(warps_tag)::value;
    DING_GPU_CHECK(launch_chained(chained, gemv_mma_kernel<T, decltype(normed_tag)::value, kWarps>, grid,
                                  dim3(kWarps * 32), staged, s.handle(), a));
  };
  // 16 warps once each of 8 would take more than 8 chunks (K > 2048).
  auto with_warps = [&](auto normed_tag) {
    if (p.K > 8 * 8 * kMmaChunk)
      launch(normed_tag, std::integral_constant<int, 16>{});
    else
      launch(normed_tag, std::integral_constant<int, 8>{});
  };
  if (normed)
    with_warps(std::true_type{});
  else
    with_warps(std::false_type{});
  DING_GPU_CHECK_LAUNCH("gemv_mma_kernel");
}

}  // namespace ding::gpu
