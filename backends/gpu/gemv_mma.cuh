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
// puts its largest magnitude in [2^14, 2^15) (prepare_staged_rows), and the epilogue
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
// units of its ring (MmaRows::early_units, half the ring by default) and asks for its part of the
// norm's parameters (ask_norm_params). After the wait the block's copies of x go out, then the
// rest of the ring's, and each thread normalises (and, for 8-bit w, rescales) the vectors of x it
// copied once they have landed (prepare_staged_rows). x's copies ahead of the rest: issued after
// the whole ring they queued behind it (ncu, an earlier layout: 23 % of the stall samples on
// staging x), and the prologue started late. H200, Llama-8B's decode products (ding-bench ops):
// the o and down products 4–7 % faster, 8-bit and bf16; the decode step the same within its noise
// for 2 to 8 units before the wait, 6 % slower for none (docs/PERFORMANCE.md).
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
constexpr int kMaxRows = 8;    // rows of x a GEMV takes (the mma's n)
// Shared memory a block holds beside its dynamic share: the driver's reserve (1 KB, sm_80+) and
// the kernel's static red_mean, red_square, red_peak and x_scale.
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
  size_t sums_bytes = 0;    // the warps' tile sums [tile][warp][g][x_pairs] float4, then the ring
  bool staged_x = true;     // false: x read from global memory (L2) at each unit, staged_bytes 0
  int early_units = 0;      // ring slots filled before the chained-launch wait; the rest after x's
                            // copies are issued (launch_mma)
  int l2_fetch = 128;       // bytes L2 fetches around each copy of w: 0 (the copy's own), 128 or 256
  bool evict_first = true;  // w's copies evicted from L2 first (l2_stream_policy)
};

// A launch of the core: the row split, the ring depth (units in flight per thread) and the grid.
struct MmaPlan {
  MmaRows rows;
  int depth = 0;  // 0: the core cannot take the product
  int64_t blocks = 0;
  size_t shared_bytes = 0;
};

#if defined(DING_GPU_NVIDIA_MMA)
// A lane's 16 bytes of an E4M3 row as 8 f16x2 words, elements 2i and 2i + 1 in word i, each the
// value over kWidenedE4m3Unit.
__device__ inline void widen_e4m3_row16(const uint4& v, uint32_t (&out)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) widen_e4m3x4(words[i], out[2 * i], out[2 * i + 1]);
}
#endif

// s for a row whose largest magnitude has the bits `peak` (row_peak): from its exponent field e,
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

// ---- The staged rows' prologue: x as the mma takes it ------------------------------------------
// It sits between x's copies landing and the first mma, while the ring's early units wait in
// shared memory, so every pass and barrier in it lengthens the whole GEMV. Hence each thread works
// on the vectors of x it copied into shared memory itself: once its own copies have landed it
// reads and rewrites them with no barrier, and only the rows' statistics cross threads, one
// barrier each (rms_norm: one; layer_norm: two; an 8-bit w's peak: one more). Its loops are not
// unrolled over the rows: the code runs once per block, so its length costs instruction fetches
// on the critical path (a form unrolled over 8 rows measured far slower: docs/PERFORMANCE.md).
// Row m of x goes to warps [m · wpr, (m + 1) · wpr), wpr = 8 / M rounded up to a power of two (all
// 8 for one row): its 16-byte vector v by lane (warp % wpr) · 32 + lane, v = that, + 32 · wpr, ...
// (a warp's copies 512 contiguous bytes).
struct RowShare {
  int m;      // the thread's row of x
  bool mine;  // m < M: warps past the rows have none
  int first;  // its first vector of the row
  int step;   // vectors between its vectors
  int wpr;    // warps per row
};
__device__ inline RowShare row_share(int M) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int wpr = M == 1 ? 8 : M == 2 ? 4 : M <= 4 ? 2 : 1;
  return {warp / wpr, warp / wpr < M, (warp % wpr) * 32 + lane, 32 * wpr, wpr};
}

// Vector v (8 elements) of a norm parameter, through the read-only path.
template <class T>
__device__ inline Pack<T, 8> param_vector(const void* param, int v) {
  const uint4 raw = __ldg(static_cast<const uint4*>(param) + v);
  return *reinterpret_cast<const Pack<T, 8>*>(&raw);
}

// The norm's parameters are constants of the model, so the kernel asks for them before the
// chained-launch wait: the weight's vector for the thread's first vector of x into a register
// (the prologue finds it there), its other vectors of the weight and the bias into L1.
template <class T>
__device__ inline Pack<T, 8> ask_norm_params(const Norm& norm, int M, int K) {
  const RowShare r = row_share(M);
  Pack<T, 8> first{};
  if (!r.mine) return first;
  for (int v = r.first; v < K / 8; v += r.step) {
    if (v == r.first) first = param_vector<T>(norm.weight, v);
    else prefetch_to_l1(static_cast<const Pack<T, 8>*>(norm.weight) + v);
    if (norm.bias) prefetch_to_l1(static_cast<const Pack<T, 8>*>(norm.bias) + v);
  }
  return first;
}

// The total over the row's warps of each thread's part, the same in every thread of the row; the
// warps' sums in warp order (deterministic). One barrier; `red` [kMmaWarps] is not written again
// before the caller's next barrier.
__device__ inline float row_total(float part, const RowShare& r, float* red) {
  part = warp_sum(part);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = part;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; r.mine && i < r.wpr; ++i) total += red[r.m * r.wpr + i];
  return total;
}

// The same for the largest magnitude, as 16-bit patterns with the sign cleared (which order as the
// magnitudes do, bf16 and f16 alike; NaN above Inf).
__device__ inline unsigned row_peak(unsigned part, const RowShare& r, unsigned* red) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) part = max(part, shfl_xor(part, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = part;
  __syncthreads();
  unsigned peak = 0;
  for (int i = 0; r.mine && i < r.wpr; ++i) peak = max(peak, red[r.m * r.wpr + i]);
  return peak;
}

__device__ inline unsigned vector_peak(const uint4& q) {
  const auto magnitudes = [](uint32_t word) { return max(word & 0x7FFFu, (word >> 16) & 0x7FFFu); };
  return max(max(magnitudes(q.x), magnitudes(q.y)), max(magnitudes(q.z), magnitudes(q.w)));
}

// A vector of 8 X values times `factor`, as f16 (exact: a power of two, in f16's range).
template <class X>
__device__ inline uint4 scaled_f16(const uint4& q, float factor) {
  const auto scaled = [factor](uint32_t word) {
    const float2 f = pair_to_float2<X>(word);
    const __half2 h = __floats2half2_rn(f.x * factor, f.y * factor);
    return *reinterpret_cast<const uint32_t*>(&h);
  };
  return make_uint4(scaled(q.x), scaled(q.y), scaled(q.z), scaled(q.w));
}

// A vector of 8 X values times `factor`, rounded to integers, as their 8 high bytes (hi) and their
// 8 low bytes (lo). round(v · 2^s) is in the low 16 bits of the float v · 2^s + 1.5 · 2^23, two's
// complement (one rounding: v · 2^s is exact); the low bytes of 4 elements go into one word and
// their high bytes into another.
template <class X>
__device__ inline void int16_bytes(const uint4& q, float factor, uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const float2 f0 = pair_to_float2<X>(words[2 * t]), f1 = pair_to_float2<X>(words[2 * t + 1]);
    const uint32_t e0 = __float_as_uint(fmaf(f0.x, factor, 12582912.0f)), e1 = __float_as_uint(fmaf(f0.y, factor, 12582912.0f));
    const uint32_t e2 = __float_as_uint(fmaf(f1.x, factor, 12582912.0f)), e3 = __float_as_uint(fmaf(f1.y, factor, 12582912.0f));
    const uint32_t p01 = __byte_perm(e0, e1, 0x5140), p23 = __byte_perm(e2, e3, 0x5140);  // lo0 lo1 hi0 hi1
    lo[t] = __byte_perm(p01, p23, 0x5410);
    hi[t] = __byte_perm(p01, p23, 0x7632);
  }
}

// The staged rows [M, K] of x (`stride` elements apart), each thread on its own vectors once its
// own copies have landed; the caller's barrier then publishes them to the mmas.
//  Normed: norm(x) in place, rounded to T: statistics in f32, two passes for layer_norm (the mean,
//    then Σ(x − mean)²: no cancellation), (x − mean) · rstd · weight (+ bias) per element.
//    weight_first: the weight's vector for the thread's first vector (ask_norm_params).
//  8-bit w: each row times a power of two 2^s that puts its largest magnitude in [2^14, 2^15),
//    2^-s into x_scale[m] for the epilogue:
//    E4M3 w: f16, exact for a bf16 x (8 significant bits, f16's 11) down to 2^-31 of the row's
//      largest value; an f16 row is taken as it is (s = 0);
//    i8 w: the integers round(x · 2^s), |·| ≤ 2^15 − 16, each split as 256 · hi + lo with hi a
//      signed and lo an unsigned byte, for the integer mma: each element within 2^-15 of its row's
//      largest magnitude, as the CPU backend rounds x to int16 (ops/matmul.h). A group of 16
//      elements (two vectors, those of lanes 2i and 2i + 1) becomes its 16 high bytes, then its 16
//      low bytes: each lane of the pair stores one of the two, taking the other's half by a shuffle.
//    A row holding Inf or NaN gets a NaN x_scale, so its sums are NaN as the products would make them.
// red_mean, red_square, red_peak: kMmaWarps each.
template <class T, class W, bool Normed>
__device__ void prepare_staged_rows(T* staged, int stride, int M, int K, const Norm& norm,
                                    const Pack<T, 8>& weight_first, float* red_mean, float* red_square,
                                    unsigned* red_peak, float* x_scale) {
  constexpr bool kNarrow = sizeof(W) == 1, kIntegerMma = std::is_same_v<W, int8_t>;
  constexpr bool kScaled = kNarrow && (kIntegerMma || !std::is_same_v<T, ding::f16>);  // s from the row's peak
  using Vec = Pack<T, 8>;
  const RowShare r = row_share(M);
  const int vectors = r.mine ? K / 8 : 0;
  Vec* const row = reinterpret_cast<Vec*>(staged + r.m * stride);
  unsigned peak = 0;
  if constexpr (Normed) {
    float mean = 0.0f;
    if (norm.center) {
      float sum = 0.0f;
      for (int v = r.first; v < vectors; v += r.step) {
        const Vec x = row[v];
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += to_float(x.v[e]);
      }
      mean = row_total(sum, r, red_mean) / float(K);
    }
    float square = 0.0f;
    for (int v = r.first; v < vectors; v += r.step) {
      const Vec x = row[v];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float d = to_float(x.v[e]) - mean;
        square += d * d;
      }
    }
    const float rstd = 1.0f / sqrtf(row_total(square, r, red_square) / float(K) + norm.eps);
    for (int v = r.first; v < vectors; v += r.step) {
      const Vec gv = v == r.first ? weight_first : param_vector<T>(norm.weight, v);
      const Vec bv = norm.bias ? param_vector<T>(norm.bias, v) : Vec{};
      const Vec x = row[v];
      Vec o;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        o.v[e] = from_float<T>((to_float(x.v[e]) - mean) * rstd * to_float(gv.v[e]) +
                               (norm.bias ? to_float(bv.v[e]) : 0.0f));
      row[v] = o;
      if constexpr (kScaled) peak = max(peak, vector_peak(*reinterpret_cast<const uint4*>(&o)));
    }
  } else if constexpr (kScaled) {
    for (int v = r.first; v < vectors; v += r.step)
      peak = max(peak, vector_peak(*reinterpret_cast<const uint4*>(&row[v])));
  }
  if constexpr (kNarrow) {
    if constexpr (!kScaled) {
      if (threadIdx.x < kMaxRows) x_scale[threadIdx.x] = 1.0f;
    } else {
      peak = row_peak(peak, r, red_peak);
      const int shift = peak_shift<T>(peak);
      const float factor = power_of_two(shift);
      if (r.mine && r.first == 0)
        x_scale[r.m] = peak_finite<T>(peak) ? power_of_two(-shift) : __int_as_float(0x7FC00000);
      uint4* const vecs = reinterpret_cast<uint4*>(row);
      if constexpr (kIntegerMma) {
        // Every lane of the warp through each round (the pair's shuffle); K % 16 == 0, so both
        // lanes of a pair are in or out together.
        const bool odd = threadIdx.x % 2;
        for (int v0 = r.first - int(threadIdx.x % 32); v0 < vectors; v0 += r.step) {
          const int v = v0 + int(threadIdx.x % 32);
          uint32_t hi[2] = {0, 0}, lo[2] = {0, 0};
          if (v < vectors) int16_bytes<T>(vecs[v], factor, hi, lo);
          const uint32_t other0 = shfl_xor(odd ? hi[0] : lo[0], 1), other1 = shfl_xor(odd ? hi[1] : lo[1], 1);
          if (v < vectors)
            vecs[v] = odd ? make_uint4(other0, other1, lo[0], lo[1]) : make_uint4(hi[0], hi[1], other0, other1);
        }
      } else {
        for (int v = r.first; v < vectors; v += r.step) vecs[v] = scaled_f16<T>(vecs[v], factor);
      }
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
  float4* sums = reinterpret_cast<float4*>(shared + rs.staged_bytes);
  uint4* ring = reinterpret_cast<uint4*>(shared + rs.staged_bytes + rs.sums_bytes);
  // The prologue's row statistics (prepare_staged_rows), one per warp.
  __shared__ float red_mean[kMmaWarps], red_square[kMmaWarps];
  __shared__ unsigned red_peak[kMmaWarps];
  __shared__ float x_scale[kMaxRows];  // 8-bit w: 2^-s of each staged row of x
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
  const uint64_t w_policy = l2_stream_policy(rs.evict_first);
  auto issue = [&](int s, const Cursor& c, const W* w, int l2_fetch) {
    if (c.tile < tiles) {
      const bool in = c.k < K;  // K % kLaneK == 0: a lane's elements are all in or all out
      const bool lo = in && c.row < rows, hi = in && c.row + rs.hi_rows < rows;
      const W* src = w + (c.row * K + c.k);
      // Rows or columns past the block's: 16 zero bytes, read from nowhere (w is a valid address).
      cp_async_16(smem_address(slot_lo(s)), lo ? src : w, lo ? 16 : 0, l2_fetch, w_policy);
      cp_async_16(smem_address(slot_hi(s)), hi ? src + rs.hi_offset : w, hi ? 16 : 0, l2_fetch, w_policy);
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
  // The norm's parameters (constants of the model) into registers, ahead of the wait.
  Pack<T, 8> norm_weight_first{};
  if constexpr (Normed) norm_weight_first = ask_norm_params<T>(a.norm, int(p.M), K);  // never segmented
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
      // The thread's vectors of its row (row_share: prepare_staged_rows rewrites them). K % 8 == 0,
      // x 16-byte aligned (gemv_mma_fits).
      const RowShare r = row_share(batch.M);
      for (int v = r.first; r.mine && v < K / 8; v += r.step)
        cp_async_16(smem_address(staged + r.m * rs.x_stride + 8 * v), x + int64_t(r.m) * K + 8 * v, 16);
      cp_async_commit();
    }
    ahead = fill(ahead, w, filled, Depth);
    if constexpr (StagedX) {
      cp_async_wait_for<Depth>(Depth - filled);  // x's group, and the older ones
      const int tail = (rs.x_stride - K) / 8;    // vectors of zeros after each row
      if (tid < batch.M * tail)
        reinterpret_cast<uint4*>(staged + (tid / tail) * rs.x_stride + K)[tid % tail] = make_uint4(0, 0, 0, 0);
      if constexpr (Normed || kNarrow)
        prepare_staged_rows<T, W, Normed>(staged, rs.x_stride, batch.M, K, a.norm, norm_weight_first, red_mean,
                                          red_square, red_peak, x_scale);
    }
    x_row = StagedX ? reinterpret_cast<const MmaT*>(staged) + min(g, batch.M - 1) * rs.x_stride
                    : reinterpret_cast<const MmaT*>(x) + int64_t(min(g, batch.M - 1)) * K;
    __syncthreads();  // every thread's rows of x

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
// the core cannot take it (the staged rows alone overflow). staged_x: x staged in shared memory
// (MmaRows::staged_x); narrow: 8-bit w (64 elements of K per unit).
inline MmaPlan mma_plan_for_x(const Props& props, const GemmShape& p, bool swiglu, bool staged_x, bool narrow) {
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
  const size_t fixed_bytes = r.staged_bytes;
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
  const MmaPlan staged = mma_plan_for_x(props, p, swiglu, true, narrow);
  return staged.depth > 0 || normed || narrow ? staged : mma_plan_for_x(props, p, swiglu, false, false);
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
  // The norm's parameters are loaded in 16-byte vectors.
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
  plan.rows.evict_first = s.matmul_tuning().gemv_evict_first;
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
