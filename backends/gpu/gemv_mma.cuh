// The few-rows matmul core on tensor cores (NVIDIA sm_80+, x and w both bf16 or both f16):
// out = epilogue(norm(x)[M, K] · w[N, K]ᵀ) for M ≤ 8, as m16n8k16 products over 16 rows of w
// (a tile), 16 of K and all M rows of x (the n8 side; rows ≥ M are zero).
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
// Work split: one wave of blocks, each over an equal run of rows of w (±1 row). A decode step's
// matrices are 100 to 400 tiles of 16 rows; one tile per block left a quarter of a 132-SM device
// idle (100 tiles) or ran 2.3 and 3.03 waves (300 and 400 tiles), the last nearly empty. A
// block's rows are contiguous in memory and cut into tiles of 16 (the last one short; rows past
// the run are neither loaded nor stored). Its units (tile, 32-element chunk of K), numbered tile
// by tile, go to its warps in turn (warp w takes units w, w + 8, ...), so all warps stream the
// same bytes and each keeps its ring of units in flight across tile boundaries. A warp
// leaves its sum for each tile in shared memory; after one barrier the block adds the 8 warps'
// sums of each tile in warp order and stores it. Nothing crosses blocks: no global scratch, and
// the result does not depend on timing.
//
// Loads in flight: a decode GEMV is a few microseconds of transfer, so what bounds it is how many
// bytes each SM keeps requested (Little's law: ~1 µs of loaded latency × 3 TB/s ≈ 25 KB per SM on
// H100 HBM3, an estimate). Registers cap that (a double-buffered step in registers held, by count,
// ~24 KB per SM; ncu: 27 % of DRAM bandwidth, long-scoreboard stalls dominating), so the units
// travel through a ring in shared memory instead:
// each thread keeps `Depth` units in flight with cp.async (16 bytes global → shared, no register
// held) and reads back only what it copied itself, so the ring needs no barrier. Depth and blocks
// per SM are chosen per product for the most bytes in flight that fit the SM's shared memory
// (H100: 2 blocks × 12 units × 8 KB = 192 KB per SM; an RTX 4090's 100 KB gives less, and needs less).
// x itself is staged in shared memory by the whole block first (normalised or copied): read from
// L2 at each unit, it made every unit a dependent L2 round trip (ncu, MLP down: 41 % of the stalls
// on L1TEX, 21 µs; staged: 14.7 µs). Where the staged rows do not fit (batch 8 over Llama-8B's
// K = 14336: 229 KB) and there is no norm to fuse, x is read from L2 after all (StagedX false):
// slower than staged, far faster than the FMA GEMV that took those products before (ding-bench,
// H100: 0.224 ms for 8 × 4096 × 14336, 18 % of bandwidth).
//
// swiglu: a tile is 8 outputs, its rows g the gate rows j of w and its rows g + 8 the up rows
// N + j of the same outputs, so the lane that holds row g's sum holds row g + 8's too (d0/d2,
// d1/d3 of the mma) and the epilogue combines them where they are. Blocks are dealt runs of
// outputs instead of rows; the loads, the ring and the sums are as above.
//
// L2 fetch size: a lane group copies 64 bytes of a row and the block's 8 warps 512 contiguous
// bytes of it, so each copy asks L2 to fetch the 128 bytes around it (cp.async ... L2::128B):
// half as many DRAM requests, each twice as long. On the H100 that took the Llama-8B gate/up
// product from 79 % to 89 % of copy bandwidth and its decode step from 6.52 to 5.93 ms
// (docs/PERFORMANCE.md); 256 bytes measured the same or slightly slower.
//
// 8-bit weights (i8, E4M3 with row scales; ops/matmul.h): the same stream, each lane's 16 bytes then
// 16 elements of its row (a unit is 64 of K). Each row of x is staged times a power of two 2^s that
// puts its largest magnitude in [2^14, 2^15) (to_scaled_f16, to_int16_planes), and the epilogue
// multiplies each sum by its row's scale and 2^-s of its x row.
//   E4M3: widened in registers to f16, which holds every E4M3 value exactly (the conversion
//     instruction on sm_89+; elsewhere its bits moved into an f16's, the value times 2^-8, undone in
//     the epilogue), then four f16 × f16 mmas against x staged as f16 (exact for a bf16 x).
//   i8: no widening at all. x is rounded to integers (|·| < 2^15; within 2^-15 of the row's largest
//     magnitude, as the CPU rounds it to int16), split into a signed high and an unsigned low byte,
//     and four integer mmas (m16n8k32) multiply the bytes of w as loaded by both: exact int32 sums,
//     256 · high + low. Widening i8 to f16 took 40 of the loop's ~118 instructions per unit (counted
//     in the SASS), while the SMs issued 0.62 instructions per scheduler-cycle at 76 % of copy
//     bandwidth (ncu; docs/PERFORMANCE.md).
// On the FMA path the same weights cost a widening and an FMA per element and row of x (H100,
// Llama-8B shape: 37 % of the int8 roofline, docs/PERFORMANCE.md).
//
// The prologue: weights (and the norm's parameters) are never written by a kernel of the step, so
// before waiting for the previous kernel (chained launch, vendor.h) each thread copies the first
// units of its ring (MmaRows::early_units, half the ring by default). After the wait the block's
// copies of x go out, then the rest of the ring's, and x is normalised in place (normalize_rows)
// once its copies have landed. x's copies ahead of the rest: issued after the whole ring they
// queued behind it (ncu, an earlier layout: 23 % of the stall samples on staging x), and the
// prologue started late. H200, Llama-8B's decode products (ding-bench ops): the o and down
// products 4–7 % faster, 8-bit and bf16; the decode step the same within its noise for 2 to 8
// units before the wait, 6 % slower for none (docs/PERFORMANCE.md).
// A segmented product (a mixture's experts) knows which weights it reads only from the offsets:
// it finds its batch and fills its ring before the wait only where they were written two or more
// kernels back (the experts' down product, the routing two ops before it:
// Params::segment_offsets_settled), else after it.
#pragma once
#include <iterator>

#include "gemm_mma.cuh"
#include "gemv.cuh"
#include "narrow_operands.cuh"
#include "row_tiles.cuh"

DING_GPU_BEGIN

namespace gemv {

constexpr int kMmaRows = 16;   // rows of w per tile: the mma's m
constexpr int kMmaChunk = 32;  // elements of K per unit: 4 lanes × 8
constexpr int kMmaWarps = 8;   // per block
constexpr int kMmaThreads = kMmaWarps * 32;
// Registers are capped so that two blocks fit an SM (the step's working set is small: the ring
// holds the loads in flight).
constexpr int kMmaMaxBlocksPerSm = 2;
// One ring slot of the block: each thread's 16 bytes of rows g and g + 8 of one unit.
constexpr size_t kMmaSlotBytes = size_t(kMmaThreads) * 2 * sizeof(uint4);
// Shared memory a block holds beside its dynamic share: the driver's reserve (1 KB, sm_80+) and
// the kernel's static `red`, `x_scale` and `peak_bits`.
constexpr size_t kSharedReservedPerBlock = 1024 + 128;

// How the rows of w are dealt to the blocks: block i takes `base` rows, one more if i < extra,
// from row i · base + min(i, extra), of every batch. For swiglu these are output columns: the
// block's gate rows, and the up rows N further.
struct MmaRows {
  int base = 0, extra = 0;
  int tile_cols = kMmaRows;  // outputs per tile: 16, or 8 for swiglu (tile rows 8–15 are the up rows)
  int hi_rows = 8;           // outputs between a lane's two rows g and g + 8: 8, or 0 for swiglu
  int64_t hi_offset = 0;     // elements from a lane's row g of w to its row g + 8: 8·K, or N·K for swiglu
  int chunks = 0;      // per tile: ceil(K / unit_k)
  int unit_k = kMmaChunk;  // elements of K per unit: 32 (16-bit w), 64 (8-bit w): 16 bytes per lane
  int x_pairs = 0;     // ceil(M / 2): the lanes (q < x_pairs) whose sums hold rows of x
  size_t staged_bytes = 0;  // x [M, K] (Normed: norm(x)) first in shared memory, rows x_stride apart
  int x_stride = 0;         // elements from a staged row of x to the next: K rounded up to unit_k,
                            // the rest zero, so a unit's loads of x need no bounds check
  size_t params_bytes = 0;  // Normed: the norm's weight [K] and bias [K], after x
  size_t sums_bytes = 0;    // the warps' tile sums [tile][warp][g][x_pairs] float4, then the ring
  bool staged_x = true;     // false: x read from global memory (L2) at each unit, staged_bytes 0
  int early_units = 0;      // ring slots filled before the chained-launch wait; the rest after x's
                            // copies are issued (launch_mma)
  int l2_fetch = 128;       // bytes L2 fetches around each copy of w: 0 (the copy's own), 128 or 256
};

// A launch of the core: the row split, the ring depth (units in flight per thread) and the grid.
struct MmaPlan {
  MmaRows rows;
  int depth = 0;  // 0: the core cannot take the product
  int64_t blocks = 0;
  size_t shared_bytes = 0;
};

// norm(x) in place over the staged rows [M, K] of x (`stride` elements apart) by the whole block:
// row m by the warps [m · wpr, (m + 1) · wpr), wpr = 8 / M rounded up to a power of two (all 8 for
// one row), in 16-byte vectors (one warp per row with 2-byte parameter loads cost ~1 µs per normed
// GEMV at batch 1 under ncu, 0.41 ms per decode step at batch 8: PERFORMANCE.md). Statistics in
// f32, two passes over the row (no cancellation); a thread writes back only the vectors it read,
// and the warps' partial sums add in warp order. `gamma` and `beta` (null: rms_norm) are in
// shared memory already; `red` holds kMmaWarps floats.
template <class T>
__device__ void normalize_rows(T* rows, int stride, const T* gamma, const T* beta, int M, int K, const Norm& norm,
                               float* red) {
  using Vec = Pack<T, 8>;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int wpr = M == 1 ? 8 : M == 2 ? 4 : M <= 4 ? 2 : 1;
  const int m = warp / wpr;
  const bool mine = m < M;
  const int vectors = K / 8, step = 32 * wpr, first = (warp % wpr) * 32 + lane;
  Vec* row = reinterpret_cast<Vec*>(rows + int64_t(m) * stride);
  // Over the row's warps, the same total in every lane; uniform over the block (two barriers).
  auto row_total = [&](float part) {
    part = warp_sum(part);
    if (lane == 0) red[warp] = part;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; mine && i < wpr; ++i) total += red[m * wpr + i];
    __syncthreads();
    return total;
  };
  float mean = 0.0f;
  if (norm.center) {
    float sum = 0.0f;
    for (int v = first; mine && v < vectors; v += step) {
      const Vec pk = row[v];
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += to_float(pk.v[e]);
    }
    mean = row_total(sum) / float(K);
  }
  float q = 0.0f;  // Σ(x − mean)²; rms_norm: Σx²
  for (int v = first; mine && v < vectors; v += step) {
    const Vec pk = row[v];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float d = to_float(pk.v[e]) - mean;
      q += d * d;
    }
  }
  const float rstd = 1.0f / sqrtf(row_total(q) / float(K) + norm.eps);
  for (int v = first; mine && v < vectors; v += step) {
    const Vec pk = row[v], gv = reinterpret_cast<const Vec*>(gamma)[v];
    Vec bv{};
    if (beta) bv = reinterpret_cast<const Vec*>(beta)[v];
    Vec o;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      o.v[e] = from_float<T>((to_float(pk.v[e]) - mean) * rstd * to_float(gv.v[e]) + (beta ? to_float(bv.v[e]) : 0.0f));
    row[v] = o;
  }
}

#if defined(DING_GPU_NVIDIA_MMA)
// A lane's 16 bytes of an E4M3 row as 8 f16x2 words, elements 2i and 2i + 1 in word i, each the
// value over kWidenedE4m3Unit.
__device__ inline void widen_e4m3_row16(const uint4& v, uint32_t (&out)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) widen_e4m3x4(words[i], out[2 * i], out[2 * i + 1]);
}
#endif

// With 8-bit w the staged rows [M, K] of x (`stride` elements apart, rounded as X) are rewritten in
// place as the mma takes them, each row times a power of two 2^s that puts its largest magnitude
// in [2^14, 2^15), and 2^-s goes to x_scale[m] for the epilogue:
//   E4M3 w: f16 (to_scaled_f16; an f16 row is taken as it is, s = 0), exact for a bf16 x (8
//     significant bits, f16's 11) down to 2^-31 of the row's largest value;
//   i8 w: the integers round(x · 2^s), |·| ≤ 2^15 − 16, each split as 256 · hi + lo with hi a signed
//     and lo an unsigned byte (to_int16_planes), for the integer mma: each element within 2^-15 of
//     its row's largest magnitude, as the CPU backend rounds x to int16 (ops/matmul.h).
// A row holding Inf or NaN gets a NaN x_scale, so its sums are NaN as the products would make them.
// By the whole block, between barriers the caller places: peak_bits[m] is zeroed before the rows
// are staged, find_peaks runs after, then (a barrier later) the rewrite.
// The peaks are 16-bit patterns with the sign cleared, which order as the magnitudes do (bf16 and
// f16 alike), so one integer max per element and one shared atomic per thread and row find them.
template <class X>
__device__ void find_peaks(const void* staged, int stride, int M, int K, unsigned* peak_bits) {
  const uint4* rows = static_cast<const uint4*>(staged);
  const int vectors = K / 8;  // K % 16 == 0 for 8-bit w
  for (int m = 0; m < M; ++m) {
    unsigned peak = 0;
    for (int v = int(threadIdx.x); v < vectors; v += kMmaThreads) {
      const uint4 q = rows[m * (stride / 8) + v];
      const auto magnitudes = [](uint32_t word) { return max(word & 0x7FFFu, (word >> 16) & 0x7FFFu); };
      peak = max(max(peak, max(magnitudes(q.x), magnitudes(q.y))), max(magnitudes(q.z), magnitudes(q.w)));
    }
    if (peak) atomicMax(peak_bits + m, peak);
  }
}

// s for a row whose largest magnitude has the bits `peak` (find_peaks): from its exponent field e,
// the peak is below 2^(e − 126) in bf16 and 2^(e − 14) in f16, so 2^(141 − e), or 2^(29 − e),
// takes it to [2^14, 2^15). 0 for a row of zeros.
template <class X>
__device__ inline int peak_shift(unsigned peak) {
  const int shift = std::is_same_v<X, ding::f16> ? 29 - int(peak >> 10) : 141 - int(peak >> 7);
  return peak ? max(-126, min(126, shift)) : 0;
}
template <class X>
__device__ inline bool peak_finite(unsigned peak) {
  return peak < (std::is_same_v<X, ding::f16> ? 0x7C00u : 0x7F80u);
}
__device__ inline float power_of_two(int e) { return __uint_as_float(unsigned(127 + e) << 23); }

// A word's two X values (the low one first) as floats.
template <class X>
__device__ inline float2 pair_to_float2(uint32_t word) {
  if constexpr (std::is_same_v<X, ding::f16>)
    return __half22float2(*reinterpret_cast<const __half2*>(&word));
  else
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xFFFF0000u));
}

template <class X>
__device__ void to_scaled_f16(void* staged, int stride, int M, int K, const unsigned* peak_bits, float* x_scale) {
  if constexpr (std::is_same_v<X, ding::f16>) {
    if (threadIdx.x < 8) x_scale[threadIdx.x] = 1.0f;
  } else {
    uint4* rows = static_cast<uint4*>(staged);
    const int vectors = K / 8;
    for (int m = 0; m < M; ++m) {
      const int shift = peak_shift<X>(peak_bits[m]);
      const float factor = power_of_two(shift);
      if (threadIdx.x == 0) x_scale[m] = peak_finite<X>(peak_bits[m]) ? power_of_two(-shift) : __int_as_float(0x7FC00000);
      for (int v = int(threadIdx.x); v < vectors; v += kMmaThreads) {
        const uint4 q = rows[m * (stride / 8) + v];
        const auto scaled = [factor](uint32_t word) {
          const float2 f = pair_to_float2<X>(word);
          const __half2 h = __floats2half2_rn(f.x * factor, f.y * factor);
          return *reinterpret_cast<const uint32_t*>(&h);
        };
        rows[m * (stride / 8) + v] = make_uint4(scaled(q.x), scaled(q.y), scaled(q.z), scaled(q.w));
      }
    }
  }
}

// Each group of 16 elements (32 bytes) becomes its 16 high bytes, then its 16 low bytes.
template <class X>
__device__ void to_int16_planes(void* staged, int stride, int M, int K, const unsigned* peak_bits, float* x_scale) {
  uint4* rows = static_cast<uint4*>(staged);
  const int groups = K / 16;  // K % 16 == 0 for 8-bit w
  for (int m = 0; m < M; ++m) {
    const int shift = peak_shift<X>(peak_bits[m]);
    const float factor = power_of_two(shift);
    if (threadIdx.x == 0) x_scale[m] = peak_finite<X>(peak_bits[m]) ? power_of_two(-shift) : __int_as_float(0x7FC00000);
    for (int j = int(threadIdx.x); j < groups; j += kMmaThreads) {
      uint4* group = rows + m * (stride / 8) + 2 * j;
      const uint4 a = group[0], b = group[1];
      const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      // round(v · 2^s) in the low 16 bits of the float v · 2^s + 1.5 · 2^23, two's complement (one
      // rounding: v · 2^s is exact); then the low bytes of 4 elements gathered into one word and
      // their high bytes into another.
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float2 f0 = pair_to_float2<X>(words[2 * t]), f1 = pair_to_float2<X>(words[2 * t + 1]);
        const uint32_t e0 = __float_as_uint(fmaf(f0.x, factor, 12582912.0f)), e1 = __float_as_uint(fmaf(f0.y, factor, 12582912.0f));
        const uint32_t e2 = __float_as_uint(fmaf(f1.x, factor, 12582912.0f)), e3 = __float_as_uint(fmaf(f1.y, factor, 12582912.0f));
        const uint32_t p01 = __byte_perm(e0, e1, 0x5140), p23 = __byte_perm(e2, e3, 0x5140);  // lo0 lo1 hi0 hi1
        lo[t] = __byte_perm(p01, p23, 0x5410);
        hi[t] = __byte_perm(p01, p23, 0x7632);
      }
      group[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      group[1] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
}

template <class T, class W, bool Normed, int Depth, bool StagedX>
__global__ void __launch_bounds__(kMmaThreads, kMmaMaxBlocksPerSm) gemv_mma_kernel(const Params a, const MmaRows rs) {
  static_assert(StagedX || !Normed, "the norm prologue writes the staged rows");
  // 8-bit w: x staged as scaled f16 (E4M3 w, widened to f16) or as int16 byte planes (i8 w, an
  // integer mma).
  constexpr bool kNarrow = sizeof(W) == 1;
  static_assert(StagedX || !kNarrow, "8-bit weights multiply the staged rows of x");
  static_assert(kNarrow || std::is_same_v<T, W>, "16-bit x and w of one type");
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr bool kIntegerMma = std::is_same_v<W, int8_t>;
  using MmaT = std::conditional_t<kNarrow, ding::f16, T>;  // the staged x's elements (i8 w: 2 bytes each)
  constexpr int kLaneK = kNarrow ? 16 : 8;                 // elements of K per lane and unit
  const GemmShape& p = a.p;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  const int block = int(blockIdx.x);
  const int64_t r0 = int64_t(block) * rs.base + min(block, rs.extra);
  const int rows = rs.base + (block < rs.extra ? 1 : 0);
  const int tiles = (rows + rs.tile_cols - 1) / rs.tile_cols;

  extern __shared__ __align__(16) unsigned char shared[];
  T* staged = reinterpret_cast<T*>(shared);
  T* gamma = reinterpret_cast<T*>(shared + rs.staged_bytes);
  T* beta = a.norm.bias ? gamma + p.K : nullptr;
  float4* sums = reinterpret_cast<float4*>(shared + rs.staged_bytes + rs.params_bytes);
  uint4* ring = reinterpret_cast<uint4*>(shared + rs.staged_bytes + rs.params_bytes + rs.sums_bytes);
  __shared__ float red[kMmaWarps];
  __shared__ float x_scale[8];        // 8-bit w: 2^-s of each staged row of x
  __shared__ unsigned peak_bits[8];  // 8-bit w: each staged row's largest magnitude, as 16-bit patterns (find_peaks)
  auto sum_at = [&](int tile, int w) { return sums + ((tile * kMmaWarps + w) * 8 + g) * rs.x_pairs + q; };
  // Slot s of this thread: rows g and g + 8 of a unit, each array lane-contiguous (no bank conflicts).
  auto slot_lo = [&](int s) { return ring + s * kMmaThreads + tid; };
  auto slot_hi = [&](int s) { return ring + (Depth + s) * kMmaThreads + tid; };

  // This warp's units in order: w, w + 8, ... of the block's (tile, chunk) sequence. The copies
  // run Depth units ahead of the mmas, so their cursor carries the lane's element of K and row of
  // the block with it: a unit costs no division and no 64-bit product (mma_plan keeps a block's
  // run of w below 2^31 elements), and moving on costs two additions and a comparison.
  const int K = int(p.K);
  struct Cursor {
    int tile, chunk;
    int k;    // the lane's first element of K in the unit: unit_k · chunk + kLaneK · q
    int row;  // the lane's row g of the unit's tile, from the block's first row: tile_cols · tile + g
  };
  auto advance = [&](Cursor& c) {
    c.chunk += kMmaWarps, c.k += kMmaWarps * rs.unit_k;
    while (c.chunk >= rs.chunks) c.chunk -= rs.chunks, c.k -= rs.chunks * rs.unit_k, ++c.tile, c.row += rs.tile_cols;
  };
  // The unit's rows g and g + 8 of the block's run `w`, into slot s: one commit group per unit,
  // empty past the block's last tile so that the group count stays in step with the units.
  // l2_fetch: rs.l2_fetch, a compile-time constant in the main loop (cp_async_16's choice folds).
  auto issue = [&](int s, const Cursor& c, const W* w, int l2_fetch) {
    if (c.tile < tiles) {
      const bool in = c.k < K;  // K % kLaneK == 0: a lane's elements are all in or all out
      const bool lo = in && c.row < rows, hi = in && c.row + rs.hi_rows < rows;
      const W* src = w + (c.row * K + c.k);
      // Rows or columns past the block's: 16 zero bytes, read from nowhere (w is a valid address).
      cp_async_16(smem_address(slot_lo(s)), lo ? src : w, lo ? 16 : 0, l2_fetch);
      cp_async_16(smem_address(slot_hi(s)), hi ? src + rs.hi_offset : w, hi ? 16 : 0, l2_fetch);
    }
    cp_async_commit();
  };
  // The batch's operands: its x rows, the block's run of its w, its first row of out.
  struct Batch {
    const T* x;
    const W* w;
    int64_t out_row;
    int M;  // 0: a segmented batch past the last tile
    int64_t w_row;  // 8-bit w: the batch's first row of w, where its row scales start
  };
  const bool segmented = a.segment_offsets != nullptr;
  auto batch_at = [&](int64_t b) {
    const T* const x = static_cast<const T*>(p.x);
    const W* const w = static_cast<const W*>(p.w) + r0 * p.K;
    const int64_t w_rows = p.w_batch / p.K;
    if (!segmented) return Batch{x + b * p.x_batch, w + b * p.w_batch, b * p.M, int(p.M), b * w_rows};
    const RowTile t = find_row_tile(a.segment_offsets, a.segments, a.segment_rows, b);
    return Batch{x + int64_t(t.begin) * p.K, w + int64_t(t.segment) * p.w_batch, t.begin, t.rows, t.segment * w_rows};
  };
  Batch batch{};
  // Row g of x (staged, or this batch's in global memory) from element k: 8 elements (one uint4),
  // or 16 (two) for 8-bit w. Lanes g ≥ M read row M − 1: they fill the mma's columns ≥ M, which
  // are never stored.
  const MmaT* x_row = nullptr;
  auto x_at = [&](int k, int part) {
    const uint4* at = reinterpret_cast<const uint4*>(x_row + k + 8 * part);
    if constexpr (StagedX) return *at;  // past K: the staged row's zero tail
    return k < K ? *at : make_uint4(0, 0, 0, 0);
  };

  // Unit `warp` of the sequence: tile 0's chunk `warp`, moved on to a later tile if chunks < 8.
  Cursor first{0, warp - kMmaWarps, (warp - kMmaWarps) * rs.unit_k + q * kLaneK, g};
  advance(first);
  // Units from cursor c into ring slots [from, to) of the run's first Depth; returns the cursor of
  // the next to issue.
  auto fill = [&](Cursor c, const W* w, int from, int to) {
    for (int s = from; s < to; ++s, advance(c)) issue(s, c, w, rs.l2_fetch);
    return c;
  };
  // The norm's parameters (constants of the model) as the first group, before the ring's.
  if constexpr (Normed) {
    for (int v = tid; v < K / 8; v += kMmaThreads) {
      cp_async_16(smem_address(gamma + 8 * v), static_cast<const T*>(a.norm.weight) + 8 * v, 16);
      if (beta) cp_async_16(smem_address(beta + 8 * v), static_cast<const T*>(a.norm.bias) + 8 * v, 16);
    }
    cp_async_commit();
  }
  const int64_t b0 = blockIdx.z;
  Cursor ahead = first;
  int filled = 0;  // slots of the batch's first Depth units issued
  // Which segment a batch reads is known only from the offsets: a segmented block finds its first
  // batch before the wait only where they were written two or more kernels back.
  const bool early = (!segmented || a.segment_offsets_settled) && b0 < p.batches;
  if (early) {
    batch = batch_at(b0);
    if (batch.M > 0) {
      filled = rs.early_units;  // ≤ Depth (launch_mma)
      ahead = fill(first, batch.w, 0, filled);
    }
  }
  wait_for_prior_kernels();
  release_dependents();

  // The batch loop is uniform across the block, so the barriers inside it are reached by all.
  for (int64_t b = b0; b < p.batches; b += gridDim.z) {
    if (b != b0 || !early) {
      batch = batch_at(b);
      ahead = first, filled = 0;
    }
    if (batch.M == 0) break;  // a segmented batch past the last tile, as is every later b (the same for the block)
    const W* const w = batch.w;
    // x [M, K] into shared memory (normalised there): read from there at every unit, it costs no
    // L2 round trip in the chain wait → mma → refill. Its copies go out before the rest of the
    // ring's, as one group, so that they do not queue behind them.
    const T* const x = batch.x;
    if constexpr (StagedX) {
      const int vectors = K / 8;  // K % 8 == 0, x 16-byte aligned (gemv_mma_fits)
      for (int m = 0; m < batch.M; ++m)
        for (int v = tid; v < vectors; v += kMmaThreads)
          cp_async_16(smem_address(staged + m * rs.x_stride + 8 * v), x + int64_t(m) * K + 8 * v, 16);
      cp_async_commit();
    }
    ahead = fill(ahead, w, filled, Depth);
    if constexpr (StagedX) {
      cp_async_wait_for<Depth>(Depth - filled);  // x's group, and the older ones (the norm's parameters)
      const int tail = (rs.x_stride - K) / 8;    // vectors of zeros after each row
      if (tid < batch.M * tail)
        reinterpret_cast<uint4*>(staged + (tid / tail) * rs.x_stride + K)[tid % tail] = make_uint4(0, 0, 0, 0);
      if (kNarrow && tid < 8) peak_bits[tid] = 0;  // read and rewritten only after the barriers below
      __syncthreads();  // every thread's copies
      if constexpr (Normed) normalize_rows(staged, rs.x_stride, gamma, beta, batch.M, K, a.norm, red);
    }
    x_row = StagedX ? reinterpret_cast<const MmaT*>(staged) + min(g, batch.M - 1) * rs.x_stride
                    : reinterpret_cast<const MmaT*>(x) + int64_t(min(g, batch.M - 1)) * K;
    __syncthreads();
    if constexpr (kNarrow) {
      if constexpr (kIntegerMma || !std::is_same_v<T, ding::f16>) find_peaks<T>(staged, rs.x_stride, batch.M, K, peak_bits);
      __syncthreads();
      if constexpr (kIntegerMma)
        to_int16_planes<T>(staged, rs.x_stride, batch.M, K, peak_bits, x_scale);
      else
        to_scaled_f16<T>(staged, rs.x_stride, batch.M, K, peak_bits, x_scale);
      __syncthreads();
    }

    // The units in order, tile by tile: the warp's chunks of a tile are chunk, chunk + 8, ... below
    // `chunks`, and what is left past the end starts the next tile. Every warp leaves a sum for
    // every tile of the block (zero where it had no unit in it). The mmas of a unit accumulate in
    // two chains (d0, d1; i8 w: the high and the low plane's exact int32 sums, hi_sums and lo_sums), halving
    // the chain of dependent mmas.
    // Unit u sits in slot u % Depth; Depth - 1 younger groups may still be in flight when it is
    // used (x's group, committed after the first early_units, makes the units before it wait for
    // one unit more: waiting longer is safe). A thread reads back only what it copied itself,
    // so no barrier; its refill of the slot is issued after the mmas that consumed the slot.
    auto stream = [&](auto l2_fetch) {
      int s = 0, chunk = warp;
      for (int tile = 0; tile < tiles; ++tile, chunk -= rs.chunks) {
        float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        [[maybe_unused]] int hi_sums[4] = {0, 0, 0, 0}, lo_sums[4] = {0, 0, 0, 0};  // i8 w
        for (; chunk < rs.chunks; chunk += kMmaWarps) {
          cp_async_wait<Depth - 1>();
          const int k = chunk * rs.unit_k + q * kLaneK;
          const uint4 lo = *slot_lo(s), hi = *slot_hi(s);  // w rows g and g + 8
          const uint4 xv = x_at(k, 0);
          if constexpr (kIntegerMma) {
            // xv: the 16 elements' high bytes, xw: their low bytes; word i of w and of x hold the
            // same 4 elements of K.
            const uint4 xw = x_at(k, 1);
            mma_16832_s8<int8_t>(hi_sums, {lo.x, hi.x, lo.y, hi.y}, xv.x, xv.y);
            mma_16832_s8<uint8_t>(lo_sums, {lo.x, hi.x, lo.y, hi.y}, xw.x, xw.y);
            mma_16832_s8<int8_t>(hi_sums, {lo.z, hi.z, lo.w, hi.w}, xv.z, xv.w);
            mma_16832_s8<uint8_t>(lo_sums, {lo.z, hi.z, lo.w, hi.w}, xw.z, xw.w);
          } else if constexpr (kNarrow) {
            uint32_t wl[8], wh[8];
            widen_e4m3_row16(lo, wl);
            widen_e4m3_row16(hi, wh);
            const uint4 xw = x_at(k, 1);
            mma_16816<MmaT>(d0, {wl[0], wh[0], wl[1], wh[1]}, {xv.x, xv.y});
            mma_16816<MmaT>(d1, {wl[2], wh[2], wl[3], wh[3]}, {xv.z, xv.w});
            mma_16816<MmaT>(d0, {wl[4], wh[4], wl[5], wh[5]}, {xw.x, xw.y});
            mma_16816<MmaT>(d1, {wl[6], wh[6], wl[7], wh[7]}, {xw.z, xw.w});
          } else {
            mma_16816<MmaT>(d0, {lo.x, hi.x, lo.y, hi.y}, {xv.x, xv.y});
            mma_16816<MmaT>(d1, {lo.z, hi.z, lo.w, hi.w}, {xv.z, xv.w});
          }
          issue(s, ahead, w, l2_fetch);
          advance(ahead);
          s = s + 1 == Depth ? 0 : s + 1;
        }
        if constexpr (kIntegerMma) {
#pragma unroll
          for (int i = 0; i < 4; ++i) d0[i] = 256.0f * float(hi_sums[i]) + float(lo_sums[i]);
        }
        if (q < rs.x_pairs) *sum_at(tile, warp) = make_float4(d0[0] + d1[0], d0[1] + d1[1], d0[2] + d1[2], d0[3] + d1[3]);
      }
    };
    // The fetch size is uniform over the launch: one loop per size, no choice per copy.
    if (rs.l2_fetch == 128)
      stream(std::integral_constant<int, 128>{});
    else if (rs.l2_fetch == 256)
      stream(std::integral_constant<int, 256>{});
    else
      stream(std::integral_constant<int, 0>{});
    cp_async_wait<0>();  // only empty groups remain: nothing lands in the ring after this batch
    __syncthreads();

    // Tile t by warp t % 8: the warps' sums in warp order; d holds rows g and g + 8 of the
    // tile, x rows 2q and 2q + 1.
    for (int t = warp; t < tiles; t += kMmaWarps) {
      if (q >= rs.x_pairs) continue;
      float4 sum = *sum_at(t, 0);
#pragma unroll
      for (int w = 1; w < kMmaWarps; ++w) {
        const float4 v = *sum_at(t, w);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int row = t * rs.tile_cols + g, m = 2 * q, M = batch.M;
      const int64_t out_row = batch.out_row, n = r0 + row;
      if constexpr (kNarrow) {
        // Each row's scale (and the widened E4M3 values' unit), each x row's 2^-s; rows past the
        // block's are not stored.
        const float unit = std::is_same_v<W, ding::f8e4m3> ? kWidenedE4m3Unit : 1.0f;
        const float* const scale = p.w_scales + batch.w_row;
        const float lo = row < rows ? scale[n] * unit : 0.0f;
        const float hi = row < rows ? scale[a.ep.swiglu ? p.N + n : n + 8 < p.N ? n + 8 : n] * unit : 0.0f;
        const float x0 = m < M ? x_scale[m] : 0.0f, x1 = m + 1 < M ? x_scale[m + 1] : 0.0f;
        sum.x *= lo * x0, sum.y *= lo * x1, sum.z *= hi * x0, sum.w *= hi * x1;
      }
      if (a.ep.swiglu) {  // rows g + 8 of the tile are the up rows of rows g
        if (row < rows && m < M) a.ep.store(out_row + m, n, sum.x, sum.z);
        if (row < rows && m + 1 < M) a.ep.store(out_row + m + 1, n, sum.y, sum.w);
        continue;
      }
      if (row < rows && m < M) a.ep.store(out_row + m, n, sum.x);
      if (row < rows && m + 1 < M) a.ep.store(out_row + m + 1, n, sum.y);
      if (row + 8 < rows && m < M) a.ep.store(out_row + m, n + 8, sum.z);
      if (row + 8 < rows && m + 1 < M) a.ep.store(out_row + m + 1, n + 8, sum.w);
    }
    __syncthreads();  // the sums and the staged rows are rewritten by the next batch
  }
#endif
}

// The ring depths the core is built for (units in flight per thread).
constexpr int kMmaDepths[] = {12, 8, 4};

// The launch for a product: the most bytes in flight per SM (blocks per SM × ring depth) whose
// shared memory fits, over one wave of blocks; if even the shallowest ring over one wave does not
// fit (many tiles per block: long products at batch 8), more blocks of fewer rows. depth == 0:
// the core cannot take it (the staged rows alone overflow).
// narrow: 8-bit w (64 elements of K per unit).
inline MmaPlan mma_plan(const Props& props, const GemmShape& p, bool normed, bool swiglu, bool staged_x, bool narrow) {
  MmaPlan plan;
  MmaRows& r = plan.rows;
  r.staged_x = staged_x;
  r.tile_cols = swiglu ? kMmaRows / 2 : kMmaRows;
  r.hi_rows = swiglu ? 0 : kMmaRows / 2;
  r.hi_offset = swiglu ? p.N * p.K : kMmaRows / 2 * p.K;
  r.unit_k = narrow ? 2 * kMmaChunk : kMmaChunk;
  r.chunks = int(ceil_div(p.K, r.unit_k));
  r.x_pairs = int(ceil_div(p.M, 2));
  r.x_stride = int(r.chunks) * r.unit_k;
  r.staged_bytes = staged_x ? size_t(p.M) * size_t(r.x_stride) * 2 : 0;  // 16-bit x
  r.params_bytes = normed ? size_t(p.K) * 2 * 2 : 0;  // K % 8 == 0: 16-byte multiples
  const size_t fixed_bytes = r.staged_bytes + r.params_bytes;
  const size_t per_tile = size_t(kMmaWarps) * 8 * size_t(r.x_pairs) * sizeof(float4);
  const int64_t batches = std::min(p.batches, kMaxGridYZ);
  auto budget = [&](int per_sm) {
    return std::min(props.shared_per_block_optin, props.shared_per_sm / per_sm - kSharedReservedPerBlock);
  };
  // The tile sums of a block when the rows are dealt to `blocks` (its share rounded up).
  auto sums_bytes = [&](int64_t blocks) { return size_t(ceil_div(ceil_div(p.N, blocks), r.tile_cols)) * per_tile; };
  auto take = [&](int64_t blocks, int depth) {
    r.base = int(p.N / blocks);
    r.extra = int(p.N % blocks);
    r.sums_bytes = sums_bytes(blocks);
    plan.depth = depth;
    plan.blocks = blocks;
    plan.shared_bytes = fixed_bytes + r.sums_bytes + size_t(depth) * kMmaSlotBytes;
  };
  // Blocks of one batch in a wave of per_sm blocks per SM, the wave spread over the batches.
  auto wave = [&](int per_sm) {
    return std::min(p.N, std::max<int64_t>(1, int64_t(props.sm_count) * per_sm / batches));
  };
  // (blocks per SM, depth) by bytes in flight per SM, most first.
  int best_per_sm = 0, best_depth = 0;
  for (int per_sm = kMmaMaxBlocksPerSm; per_sm >= 1; --per_sm)
    for (int depth : kMmaDepths) {
      const size_t bytes = fixed_bytes + sums_bytes(wave(per_sm)) + size_t(depth) * kMmaSlotBytes;
      if (bytes <= budget(per_sm) && per_sm * depth > best_per_sm * best_depth) best_per_sm = per_sm, best_depth = depth;
    }
  if (best_depth) {
    take(wave(best_per_sm), best_depth);
  } else {
    const int shallow = kMmaDepths[std::size(kMmaDepths) - 1];
    const size_t fixed = fixed_bytes + size_t(shallow) * kMmaSlotBytes;
    if (fixed + per_tile > budget(1)) return plan;
    const int64_t max_tiles = int64_t((budget(1) - fixed) / per_tile);
    take(std::max(wave(1), ceil_div(p.N, max_tiles * r.tile_cols)), shallow);
  }
  // The kernel's element offsets within a block's run of w are 32-bit: its rows, plus the last
  // tile's overhang, times K.
  if ((ceil_div(p.N, plan.blocks) + r.tile_cols) * p.K >= (int64_t(1) << 31)) return MmaPlan{};
  return plan;
}

// Staged x where it fits, else x from L2 (no norm to fuse there: the caller stages norm(x) apart;
// 8-bit w needs the staged f16 rows).
inline MmaPlan mma_plan(const Props& props, const GemmShape& p, bool normed, bool swiglu, bool narrow = false) {
  const MmaPlan staged = mma_plan(props, p, normed, swiglu, true, narrow);
  return staged.depth > 0 || normed || narrow ? staged : mma_plan(props, p, normed, swiglu, false, false);
}

}  // namespace gemv

// The operands the core reads: 16-bit x, and w of x's type or 8 bits (with row scales; K a
// multiple of 16), 16-byte rows, mma.sync on the device. i8 w: K ≤ 2^19, so that a warp's int32
// sum over its part of a tile (≤ K/8 + 64 products, each |i8 · u8| ≤ 128 · 255) cannot overflow.
template <class X, class W>
bool gemv_mma_operands_fit(const Props& props, const GemmShape& p) {
  constexpr bool narrow = sizeof(W) == 1;
  return (std::is_same_v<X, W> || narrow) && !std::is_same_v<X, float> && props.has_mma_sync() &&
         p.K % (narrow ? 16 : 8) == 0 && aligned_to(p.x, 16) && aligned_to(p.w, 16) && p.N < (int64_t(1) << 31) &&
         (!narrow || p.w_scales != nullptr) && (!std::is_same_v<W, int8_t> || p.K <= (int64_t(1) << 19));
}

// Whether the tensor-core GEMV takes the product: its operands, and the staged rows of x (and the
// norm's parameters), the ring and one tile's sums within a block's shared memory.
template <class X, class W>
bool gemv_mma_fits(const Props& props, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm) {
  const bool normed = norm.kind != ops::NormKind::none;
  if (!gemv_mma_operands_fit<X, W>(props, p)) return false;
  // The norm's parameters are copied to shared memory in 16-byte pieces.
  if (normed && !(aligned_to(norm.weight.data, 16) && (!norm.bias.defined() || aligned_to(norm.bias.data, 16))))
    return false;
  return gemv::mma_plan(props, p, normed, ep.swiglu, sizeof(W) == 1).depth > 0;
}

namespace gemv {

// The core's launch for the product a describes (its norm's weight non-null: normed): x of type T,
// w of T or 8 bits.
template <class T, class W = T>
void launch_mma(GpuStream& s, const Params& a) {
  const GemmShape& p = a.p;
  const Epilogue& ep = a.ep;
  const bool normed = a.norm.weight != nullptr;
  MmaPlan plan = mma_plan(s.props(), p, normed, ep.swiglu, sizeof(W) == 1);
  if (const int fetch = s.matmul_tuning().gemv_l2_fetch; fetch == 0 || fetch == 128 || fetch == 256) plan.rows.l2_fetch = fetch;
  const int early = s.matmul_tuning().gemv_early_units;
  plan.rows.early_units = early >= 0 ? std::min(early, plan.depth) : plan.depth / 2;
  const bool chained = gemv_chained(s);
  const dim3 grid(unsigned(plan.blocks), 1, unsigned(std::min(p.batches, kMaxGridYZ)));
  auto launch = [&](auto normed_tag, auto depth_tag) {
    constexpr bool kNormed = decltype(normed_tag)::value;
    constexpr int kDepth = decltype(depth_tag)::value;
    // 8-bit w always stages x (mma_plan), so its instances never read x from L2.
    const auto kernel = !kNormed && !plan.rows.staged_x
                            ? gemv_mma_kernel<T, W, false, kDepth, sizeof(W) == 1>
                            : gemv_mma_kernel<T, W, kNormed, kDepth, true>;
    if (plan.shared_bytes > 48 * 1024)
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(plan.shared_bytes)));
    DING_GPU_CHECK(launch_chained(chained, kernel, grid, dim3(kMmaThreads), plan.shared_bytes, s.handle(), a, plan.rows));
  };
  auto with_depth = [&](auto normed_tag) {
    static_assert(std::size(kMmaDepths) == 3);
    switch (plan.depth) {
      case kMmaDepths[0]: launch(normed_tag, std::integral_constant<int, kMmaDepths[0]>{}); break;
      case kMmaDepths[1]: launch(normed_tag, std::integral_constant<int, kMmaDepths[1]>{}); break;
      default: launch(normed_tag, std::integral_constant<int, kMmaDepths[2]>{}); break;
    }
  };
  if (normed)
    with_depth(std::true_type{});
  else
    with_depth(std::false_type{});
  DING_GPU_CHECK_LAUNCH("gemv_mma_kernel");
}

}  // namespace gemv

// W: T, or an 8-bit weight (int8_t, ding::f8e4m3) whose row scales are p.w_scales.
template <class T, class W>
void launch_gemv_mma(GpuStream& s, const GemmShape& p, const Epilogue& ep, const ops::MatmulNorm& norm) {
  gemv::Params a{p, ep, {}, 1, p.K, 0};
  if (norm.kind != ops::NormKind::none)
    a.norm = {norm.kind == ops::NormKind::layer_norm, norm.weight.data, norm.bias.data, norm.eps};
  gemv::launch_mma<T, W>(s, a);
}

// Whether the tensor-core GEMV takes a segmented product (launch_gemv_mma_segments): as for
// gemv_mma_fits, with p.M = min(P, kSegmentTileRows), the most rows a tile has.
template <class X, class W>
bool gemv_mma_segments_fit(const Props& props, const GemmShape& p, bool swiglu) {
  return gemv_mma_operands_fit<X, W>(props, p) && gemv::mma_plan(props, p, false, swiglu, sizeof(W) == 1).depth > 0;
}

// out[rows of tile b] = epilogue(x[rows of tile b] · w[segment of tile b]ᵀ) for the row tiles of
// the segments (row_tiles.cuh): p.batches = max_row_tiles(P, E), p.M = min(P, kSegmentTileRows),
// p.w_batch the elements between segments' w; x and out rows as the offsets place them. W: T, or
// 8 bits with p.w_scales, every segment's rows in order. offsets_settled: written two or more
// kernels back (gemv::Params::segment_offsets_settled).
template <class T, class W>
void launch_gemv_mma_segments(GpuStream& s, const GemmShape& p, const Epilogue& ep, const int32_t* offsets, int E,
                              int P, bool offsets_settled) {
  gemv::Params a{p, ep, {}, 1, p.K, 0};
  a.segment_offsets = offsets;
  a.segments = E;
  a.segment_rows = P;
  a.segment_offsets_settled = offsets_settled && s.matmul_tuning().gemv_early_segments;
  gemv::launch_mma<T, W>(s, a);
}

DING_GPU_END
