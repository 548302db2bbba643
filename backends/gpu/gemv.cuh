// The few-rows matmul core (decode, M ≤ kGemvMaxRows): out = epilogue(norm(x)[M, K] · w[N, K]ᵀ).
// At ~1 FLOP per weight byte the roofline is memory bandwidth, so the kernel is a weight
// stream, built so that the stream never pauses between the layer's kernels:
//  - Each warp owns kRowsPerWarp rows of w over one slice of K and walks them with 16-byte loads,
//    every lane keeping kUnroll × kRowsPerWarp loads in flight before it touches them; x (a few
//    KB) comes through L1 and is reused for all of the warp's rows. Sums are f32. For swiglu the
//    warp's two rows are one output's gate row j and up row N + j, so the epilogue pairs the two
//    sums with one shuffle.
//  - Few rows (N small against the SM count) leave too few loads in flight: then the warps of a
//    block split K into `slices` and add their sums through shared memory in slice order — one
//    launch, deterministic.
//  - Chained launch (vendor.h, sm_90): the block asks L2 for its rows of w, then waits for the
//    previous kernel (which wrote x). So the weights stream in while the previous kernel and the
//    launch gap run, and the loop after the wait reads them from L2.
//  - The optional norm prologue (ops::MatmulNorm): each block normalises the M rows of x into
//    shared memory (f32 statistics, two passes; norm(x) rounded to x's dtype, as the unfused norm
//    op's output would be) and the product reads them from there. Nothing writes them to memory.
#pragma once
#include <algorithm>
#include <type_traits>

#include "check.h"
#include "ding/ops/matmul.h"
#include "gemm.cuh"
#include "reduce.cuh"
#include "stream.h"

DING_GPU_BEGIN

// Rows of x (per batch) up to which matmul streams w through the GEMV core.
inline constexpr int64_t kGemvMaxRows = 8;

namespace gemv {

constexpr int kThreads = 256;    // a multiple of 64: whole warps on either vendor
constexpr int kRowsPerWarp = 2;  // rows of w per warp: x loads are reused this many times
constexpr int kUnroll = 4;       // vectors per row and lane loaded before the FMAs use them

// The prologue's parameters; weight and bias have x's element type (the fused path's condition).
struct Norm {
  bool center = false;        // layer_norm: subtract the mean (and add bias); rms_norm: not
  const void* weight = nullptr;
  const void* bias = nullptr;  // null: none
  float eps = 0.0f;
};

struct Params {
  GemmShape p;
  Epilogue ep;
  Norm norm;                 // used by the Normed instances only
  int slices = 1;            // warps sharing one row group, each over k_slice elements of K
  int64_t k_slice = 0;       // a multiple of the vector width
  uint32_t prefetch_bytes = 0;  // of w per block row tile, asked of L2 before the wait; 0: none
  // Segmented (gemv_mma only; moe_matmul): batch b is row tile b of the segments (row_tiles.cuh),
  // its rows of x and out those of the tile, its w the segment's (w + segment · w_batch) and its
  // M the tile's rows. Null: batch b is batch b of x, w and out.
  const int32_t* segment_offsets = nullptr;  // [segments + 1]
  int segments = 0, segment_rows = 0;        // E and P (the offsets' range)
  // The offsets were written two or more kernels back (ops::MoeMatmulArgs::offsets_from_earlier_op),
  // so they, and the weights they select, may be read before the wait (vendor.h).
  bool segment_offsets_settled = false;
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

// The elements of x a thread's norm prologue copies and rewrites: chunks tid, tid + kThreads, ...
// of every row (Vec elements each, at most 16 bytes: the alignment launch_gemv checked for x; a
// Vec-element run of x may be wider than that when x is f32 and w 16-bit).
template <class X, int Vec>
constexpr int kNormChunk = int(Vec * sizeof(X)) > 16 ? 16 / int(sizeof(X)) : Vec;

// The norm's weight and bias (constants of the model) for the thread's chunks, asked into L1
// before the chained-launch wait, so the prologue's last pass does not wait on L2.
template <class X, int Vec>
__device__ inline void prefetch_norm_params(const Norm& norm, int64_t K) {
  constexpr int kChunk = kNormChunk<X, Vec>;
  for (int64_t v = threadIdx.x; v < K / kChunk; v += kThreads) {
    prefetch_to_l1(static_cast<const X*>(norm.weight) + v * kChunk);
    if (norm.bias) prefetch_to_l1(static_cast<const X*>(norm.bias) + v * kChunk);
  }
}

// The norm prologue for the rows [M, K] of x (Rows ≥ M, a compile-time bound), by the whole block,
// into `staged` (shared memory) rounded to X. It runs between the wait for the previous kernel
// and the first weight load, so its length is the product's: each thread copies its own chunks
// of every row, adds their sums as it goes, and rewrites only what it copied, so only the rows'
// statistics cross threads, one barrier each (rms_norm: Σx² from the copying pass, one barrier;
// layer_norm: the mean, then Σ(x − mean)² from shared memory, no cancellation: two). Sums in f32,
// the warps' added in warp order (deterministic). red: [2][Rows][kThreads / 32] floats.
template <class X, int Vec, int Rows>
__device__ inline void normalize_rows(const X* x, X* staged, int M, int64_t K, const Norm& norm, float* red) {
  constexpr int kChunk = kNormChunk<X, Vec>;
  // kBatch loads per thread issued before any store: the compiler cannot move a load of x above
  // a store to `staged` (both generic pointers), so interleaving them would serialise the loads,
  // one memory latency each.
  constexpr int kBatch = 4;
  using Chunk = Pack<X, kChunk>;
  const int tid = int(threadIdx.x), lane = tid % warp_size(), warp = tid / warp_size();
  const int warps = kThreads / warp_size();
  const int64_t chunks = K / kChunk;
  // Each row's total of the threads' parts v[m], in every thread.
  auto rows_total = [&](float (&v)[Rows], float* space) {
#pragma unroll
    for (int m = 0; m < Rows; ++m)
      if (m < M) {
        const float s = warp_sum(v[m]);
        if (lane == 0) space[m * warps + warp] = s;
      }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < Rows; ++m) {
      float total = 0.0f;
      for (int w = 0; m < M && w < warps; ++w) total += space[m * warps + w];
      v[m] = total;
    }
  };
  float sum[Rows] = {}, square[Rows] = {};  // Σx (layer_norm), Σx² (rms_norm)
  for (int64_t v0 = tid; v0 < chunks; v0 += int64_t(kBatch) * kThreads)
#pragma unroll
    for (int m = 0; m < Rows; ++m) {
      if (m >= M) break;
      Chunk pk[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int64_t v = v0 + int64_t(i) * kThreads;
        if (v < chunks) pk[i] = *reinterpret_cast<const Chunk*>(x + m * K + v * kChunk);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int64_t v = v0 + int64_t(i) * kThreads;
        if (v >= chunks) break;
        *reinterpret_cast<Chunk*>(staged + m * K + v * kChunk) = pk[i];
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const float f = to_float(pk[i].v[e]);
          sum[m] += f;
          square[m] = fmaf(f, f, square[m]);
        }
      }
    }
  float mean[Rows] = {};
  if (norm.center) {
    rows_total(sum, red);
#pragma unroll
    for (int m = 0; m < Rows; ++m) {
      mean[m] = sum[m] / float(K);
      square[m] = 0.0f;
    }
    // Each thread reads back only the chunks it wrote: no barrier between the passes.
    for (int64_t v = tid; v < chunks; v += kThreads)
#pragma unroll
      for (int m = 0; m < Rows; ++m)
        if (m < M)
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            const float d = to_float(staged[m * K + v * kChunk + e]) - mean[m];
            square[m] = fmaf(d, d, square[m]);
          }
  }
  rows_total(square, red + Rows * warps);
  float rstd[Rows];
#pragma unroll
  for (int m = 0; m < Rows; ++m) rstd[m] = 1.0f / sqrtf(square[m] / float(K) + norm.eps);
  const X* g = static_cast<const X*>(norm.weight);
  const X* beta = static_cast<const X*>(norm.bias);
  for (int64_t v = tid; v < chunks; v += kThreads)
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      const int64_t k = v * kChunk + e;
      const float gk = to_float(g[k]), bk = beta ? to_float(beta[k]) : 0.0f;
#pragma unroll
      for (int m = 0; m < Rows; ++m)
        if (m < M) staged[m * K + k] = from_float<X>((to_float(staged[m * K + k]) - mean[m]) * rstd[m] * gk + bk);
    }
}

// Rows: a compile-time bound on M (1, 2, 4 or 8) so the sums live in registers; rows ≥ M are
// skipped at run time. Vec: elements per load (16 bytes of W, or 1 for rows that are not
// 16-byte aligned). Normed: x passes through the norm prologue.
template <class X, class W, int Rows, int Vec, bool Normed>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const Params a) {
  const GemmShape& p = a.p;
  const int lane = int(threadIdx.x) % warp_size(), warp = int(threadIdx.x) / warp_size();
  const int groups = int(blockDim.x) / warp_size() / a.slices;  // row groups per block
  const int group = warp / a.slices, slice = warp % a.slices;
  // A row group is kRowsPerWarp output columns, or for swiglu one output column whose two rows
  // are its gate row n0 and its up row N + n0 (row_step apart).
  const bool swiglu = a.ep.swiglu;
  const int cols = swiglu ? 1 : kRowsPerWarp;
  const int64_t row_step = swiglu ? p.N : 1;
  const int64_t tile_col0 = int64_t(blockIdx.x) * groups * cols;
  const int64_t n0 = tile_col0 + int64_t(group) * cols;

  // Weights are never written by a kernel of the step: safe to fetch before the wait. swiglu's
  // block reads two runs of rows, its gate rows and its up rows.
  if (a.prefetch_bytes && threadIdx.x == 0) {
    const W* tile = static_cast<const W*>(p.w) + int64_t(blockIdx.z) * p.w_batch + tile_col0 * p.K;
    const int64_t left = (p.N - tile_col0) * p.K * int64_t(sizeof(W));
    const uint32_t bytes = uint32_t(std::min<int64_t>(left, a.prefetch_bytes));
    prefetch_to_l2(tile, bytes);
    if (swiglu) prefetch_to_l2(tile + p.N * p.K, bytes);
  }
  if constexpr (Normed) prefetch_norm_params<X, Vec>(a.norm, p.K);
  wait_for_prior_kernels();
  release_dependents();  // after the wait: at most one kernel runs ahead, so L2 holds its prefetch

  const int64_t k_begin = int64_t(slice) * a.k_slice;
  const int64_t k_end = k_begin + a.k_slice < p.K ? k_begin + a.k_slice : p.K;
  // A lane's loads start Vec-aligned: k_begin, K (Vec > 1) and k_slice are multiples of Vec, so
  // k < k_end implies k + Vec ≤ k_end.
  constexpr int64_t kStep = int64_t(Vec) * warp_size();
  bool row_ok[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) row_ok[r] = (swiglu ? n0 : n0 + r) < p.N;

  __shared__ float partial[kThreads / 32][Rows * kRowsPerWarp];  // a warp's sums, when K is split
  extern __shared__ __align__(16) unsigned char staged_rows[];     // Normed: norm(x), [M, K]
  __shared__ float norm_red[Normed ? 2 * Rows * kThreads / 32 : 1];  // Normed: the rows' statistics

  // The batch loop is uniform across the block, so the barriers inside it are reached by all.
  for (int64_t b = blockIdx.z; b < p.batches; b += gridDim.z) {
    const X* x = static_cast<const X*>(p.x) + b * p.x_batch;
    const W* w = static_cast<const W*>(p.w) + b * p.w_batch + n0 * p.K;
    if constexpr (Normed) {
      // The product then reads norm(x) from shared memory.
      X* staged = reinterpret_cast<X*>(staged_rows);
      normalize_rows<X, Vec, Rows>(x, staged, int(p.M), p.K, a.norm, norm_red);
      __syncthreads();
      x = staged;
    }
    float acc[Rows][kRowsPerWarp] = {};
    for (int64_t k0 = k_begin + int64_t(lane) * Vec; k0 < k_end && row_ok[0]; k0 += kStep * kUnroll) {
      Pack<W, Vec> wv[kUnroll][kRowsPerWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * kStep;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          if (k < k_end && row_ok[r])
            wv[u][r] = *reinterpret_cast<const Pack<W, Vec>*>(w + r * row_step * p.K + k);
          else
            wv[u][r] = Pack<W, Vec>{};
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k = k0 + u * kStep;
        if (k >= k_end) break;
        float wf[kRowsPerWarp][Vec];  // widened once, used by every row of x
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) widen(wv[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < Rows; ++m) {
          if (m >= p.M) break;
          float xv[Vec];
          load_floats<X, Vec>(x + m * p.K + k, xv);
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int e = 0; e < Vec; ++e) acc[m][r] = fmaf(xv[e], wf[r][e], acc[m][r]);
        }
      }
    }
    // Every lane ends with every sum; lane m · kRowsPerWarp + r (< 16 ≤ warp size) keeps one, so
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
    const bool owner = lane < Rows * kRowsPerWarp;
    if (a.slices > 1) {
      // Slices of a row group add up in slice order: the same sum on every run.
      if (owner) partial[warp][lane] = mine;
      __syncthreads();
      if (slice == 0 && owner) {
        mine = 0.0f;
        for (int s = 0; s < a.slices; ++s) mine += partial[warp + s][lane];
      }
      __syncthreads();  // partial is rewritten by the next batch
    }
    // A quantized w: each row's whole sum times the row's scale (lane m · kRowsPerWarp + r holds
    // the sum of row r of its group, the gate or up row for swiglu).
    if (p.w_scales && owner && (swiglu ? n0 : n0 + r) < p.N)
      mine *= p.w_scales[(p.w_batch ? b * (p.w_batch / p.K) : 0) + n0 + r * row_step];
    if (swiglu) {
      // Lane m · 2 + 1 holds row m's up sum; every lane shuffles, lane m · 2 stores.
      static_assert(kRowsPerWarp == 2, "swiglu pairs a gate row and an up row per warp");
      const float up = shfl_xor(mine, 1);
      if (slice == 0 && owner && r == 0 && m < p.M && n0 < p.N) a.ep.store(b * p.M + m, n0, mine, up);
    } else if (slice == 0 && owner && m < p.M && n0 + r < p.N) {
      a.ep.store(b * p.M + m, n0 + r, mine);
    }
    if constexpr (Normed) __syncthreads();  // the staged rows are rewritten by the next batch
  }
}

}  // namespace gemv

// Shared memory a block may take without opting in: the staged rows of norm(x) must fit it.
inline constexpr int64_t kGemvStagedBytes = 48 * 1024;

// Whether the norm prologue can run inside the GEMV: its parameters have x's dtype, and the M
// normalised rows fit the block's shared memory.
inline bool gemv_fuses(const ops::MatmulNorm& norm, DType x, int64_t M, int64_t K) {
  return norm.kind == ops::NormKind::none ||
         (norm.weight.dtype == x && (!norm.bias.defined() || norm.bias.dtype == x) &&
          M * K * int64_t(dtype_size(x)) <= kGemvStagedBytes);
}

// Chained launch and L2 prefetch for the decode GEMVs, unless switched off for a measurement
// (MatmulTuning, stream.h).
inline bool gemv_chained(GpuStream& s) { return s.matmul_tuning().gemv_chained && s.props().has_chained_launch(); }
inline bool gemv_prefetch(GpuStream& s) { return s.matmul_tuning().gemv_prefetch; }

template <class X, class W>
void launch_gemv(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm) {
  using namespace gemv;
  // 16 bytes of W per load; x (and the norm's parameters) then need the same count of elements
  // at their own width.
  constexpr int kVec = kPack16<W>;
  const size_t x_align = std::min<size_t>(16, kVec * sizeof(X));
  const bool normed = norm.kind != ops::NormKind::none;
  const bool vec = p.K % kVec == 0 && aligned_to(p.x, x_align) && aligned_to(p.w, 16);
  const int warps = kThreads / s.props().warp_size;

  Params a{p, ep, {}, 1, p.K, 0};
  if (normed) a.norm = {norm.kind == ops::NormKind::layer_norm, norm.weight.data, norm.bias.data, norm.eps};
  // Split K inside the block while the row groups alone give fewer than ~16 warps per SM (too
  // few loads in flight to cover memory latency), keeping ≥ 2 vectors per lane per slice.
  const int cols = ep.swiglu ? 1 : kRowsPerWarp;  // output columns per row group (gemv_kernel)
  const int64_t row_groups = ceil_div(p.N, cols) * p.batches;
  const int64_t wanted_warps = 16 * int64_t(s.props().sm_count);
  const int64_t unit = vec ? kVec : 1;
  while (a.slices < warps && row_groups * a.slices < wanted_warps && p.K / (2 * a.slices) >= 2 * unit * s.props().warp_size)
    a.slices *= 2;
  a.k_slice = ceil_div(ceil_div(p.K, a.slices), unit) * unit;

  const int64_t cols_per_block = int64_t(warps / a.slices) * cols;
  const bool chained = gemv_chained(s);
  // The bulk prefetch takes 16-byte multiples, which whole vector rows are (swiglu: per half).
  if (chained && vec && gemv_prefetch(s)) a.prefetch_bytes = uint32_t(std::min<int64_t>(cols_per_block * p.K * int64_t(sizeof(W)), int64_t(1) << 30));
  const dim3 grid(unsigned(ceil_div(p.N, cols_per_block)), 1, unsigned(std::min(p.batches, kMaxGridYZ)));

  auto launch = [&](auto rows_tag, auto vec_tag, auto normed_tag) {
    constexpr int kRows = decltype(rows_tag)::value, kV = decltype(vec_tag)::value;
    constexpr bool kNormed = decltype(normed_tag)::value;
    const size_t staged = kNormed ? size_t(p.M * p.K) * sizeof(X) : 0;
    DING_GPU_CHECK(launch_chained(chained, gemv_kernel<X, W, kRows, kV, kNormed>, grid, dim3(kThreads), staged, s.handle(), a));
  };
  auto with_norm = [&](auto rows_tag, auto vec_tag) {
    if (normed)
      launch(rows_tag, vec_tag, std::true_type{});
    else
      launch(rows_tag, vec_tag, std::false_type{});
  };
  auto with_rows = [&](auto vec_tag) {
    if (p.M <= 1) with_norm(std::integral_constant<int, 1>{}, vec_tag);
    else if (p.M <= 2) with_norm(std::integral_constant<int, 2>{}, vec_tag);
    else if (p.M <= 4) with_norm(std::integral_constant<int, 4>{}, vec_tag);
    else with_norm(std::integral_constant<int, 8>{}, vec_tag);
  };
  // Rows that are not 16-byte aligned (K·size not a multiple of 16, or an offset view) are rare:
  // one scalar instance, with the full 8-row bound, serves them all.
  if (vec)
    with_rows(std::integral_constant<int, kVec>{});
  else
    with_norm(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{});
  DING_GPU_CHECK_LAUNCH("gemv_kernel");
}

DING_GPU_END
