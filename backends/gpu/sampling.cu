// Sampling on the GPU: one block per row of logits (blocks loop over rows; 1024 threads, 512
// for sample). Every choice compares (value, index) pairs as one 64-bit key (select.cuh), so
// ties go to the lower index exactly as in the reference, -0 ties +0, and NaN ranks below every
// number (argmax: except a NaN first element, which the reference's scan never leaves).
//   argmax, count_nonfinite: a block max of the pairs, a block sum of the counts; where the rows
//           alone do not fill the device (a decode step's few rows over a vocabulary of 50k–150k)
//           each row is cut into parts, a block per part, and a second launch folds the parts'
//           results in order (RowParts): one block walking Llama-3's 128256 logits was a chain
//           of ~30 dependent rounds of loads, 32 µs for argmax and 14 µs for count_nonfinite
//           (ncu, H200), against one round per part.
//   top_k:  radix select of the k best pairs (8 bits a pass, warp-aggregated histograms), then a
//           bitonic sort of those k in shared memory (tiles of 4096; longer strides in scratch).
//   sample: the sorted prefix of the order that the filters and the draw need, then a walk over
//           it in double precision with the reference's formulas: the support's top_k pairs, or
//           (no top_k) every token down to a band below the maximum that is sure to hold the
//           top_p cut, the min_p cut or the draw; if the walk still ends past the band, it
//           repeats on the whole vocabulary. Only the softmax denominator's tail beyond the band
//           comes from f32 exps (relative error ~1e-7 of the tail's share).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <string>

#include "check.h"
#include "elements.cuh"
#include "kernels.h"
#include "reduce.cuh"
#include "select.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 1024;
// sample's block: 512 threads with room for 128 registers a thread (launch bounds (512, 1)): its
// double-precision walk needs ~80 and spilled at 1024 threads' 64 (-Xptxas -v, sm_90).
constexpr int kSampleThreads = 512;
constexpr int kBands = 256;  // sample's bands below the maximum: 1/8 nat each, the last open
constexpr int kUnroll = 4;   // elements a thread loads at once in a pass over a row

// v[u] = x[i + u·stride] (0 past V): the loads issued together, so that each thread keeps
// kUnroll in flight; a pass over a row by one block is bound by memory latency.
template <class T>
__device__ inline void load_row_batch(float (&v)[kUnroll], const T* x, int64_t V, int64_t i, int64_t stride) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) v[u] = i + u * stride < V ? to_float(x[i + u * stride]) : 0.0f;
}

// The pair argmax compares: as order_pair, except that a NaN first element wins, since the
// reference's scan (x[v] > x[best], best = 0) never leaves index 0 when x[0] is NaN.
__device__ inline uint64_t argmax_pair(float v, int64_t i) {
  return (i == 0 && v != v) ? ~uint64_t(0) : order_pair(v, uint32_t(i));
}

// How a pass over rows of N elements is cut: part p of a row is elements [p·span, (p + 1)·span)
// (span ≥ N for one part) and takes block (p, ·) of the grid (blocks loop over rows in y). parts == 1: a block per row, its
// result the output; else each part's result goes to scratch [B, parts], folded by a second launch.
struct RowParts {
  int64_t parts = 1, span = 0;
};

// Block (p, ·)'s part of a row: the pairs of elements [begin, end) of x's row, argmax's fold.
template <class T>
__device__ uint64_t best_pair(const T* x, int64_t begin, int64_t end) {
  uint64_t best = 0;  // below every pair: threads past the end add nothing
  for (int64_t first = begin + threadIdx.x; first < end; first += kUnroll * int64_t(blockDim.x)) {
    float v[kUnroll];
    load_row_batch(v, x, end, first, blockDim.x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + u * int64_t(blockDim.x);
      const uint64_t pair = i < end ? argmax_pair(v[u], i) : 0;
      best = pair > best ? pair : best;
    }
  }
  return best;
}

// out[b] = the index of row b's best pair; with several parts, part_best[b, p] = part p's best pair.
template <class T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(int32_t* out, uint64_t* part_best, const T* logits, int64_t B,
                                                          int64_t V, RowParts rp) {
  __shared__ uint64_t shared[32];
  const int64_t begin = int64_t(blockIdx.x) * rp.span, end = std::min(V, begin + rp.span);
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {  // uniform over the block: the barriers below
    const uint64_t best = block_max_u64(best_pair(logits + b * V, begin, end), shared);
    if (threadIdx.x != 0) continue;
    if (rp.parts == 1)
      out[b] = int32_t(pair_index(best));
    else
      part_best[b * rp.parts + blockIdx.x] = best;
  }
}

// out[b] = the index of the best of row b's part_best (a block per row).
__global__ void __launch_bounds__(kThreads) argmax_parts_kernel(int32_t* out, const uint64_t* part_best, int64_t B,
                                                                int64_t parts) {
  __shared__ uint64_t shared[32];
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    uint64_t best = 0;
    for (int64_t p = threadIdx.x; p < parts; p += blockDim.x) {
      const uint64_t pair = part_best[b * parts + p];
      best = pair > best ? pair : best;
    }
    best = block_max_u64(best, shared);
    if (threadIdx.x == 0) out[b] = int32_t(pair_index(best));
  }
}

// Per row, the NaN and ±Inf among its N values (load_row_batch's zeros past the end count as
// finite); with several parts, part_count[b, p] = part p's count.
template <class T>
__global__ void __launch_bounds__(kThreads) count_nonfinite_kernel(int32_t* out, int32_t* part_count, const T* x,
                                                                   int64_t B, int64_t N, RowParts rp) {
  __shared__ int shared[32];
  const int64_t begin = int64_t(blockIdx.x) * rp.span, end = std::min(N, begin + rp.span);
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {  // uniform over the block: the barriers below
    const T* row = x + b * N;
    int count = 0;
    for (int64_t first = begin + threadIdx.x; first < end; first += kUnroll * int64_t(blockDim.x)) {
      float v[kUnroll];
      load_row_batch(v, row, end, first, blockDim.x);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) count += isfinite(v[u]) ? 0 : 1;
    }
    count = block_sum_ordered(count, shared);
    if (threadIdx.x != 0) continue;
    if (rp.parts == 1)
      out[b] = count;
    else
      part_count[b * rp.parts + blockIdx.x] = count;
  }
}

// out[b] = the sum of row b's part_count (a block per row).
__global__ void __launch_bounds__(kThreads) count_parts_kernel(int32_t* out, const int32_t* part_count, int64_t B,
                                                               int64_t parts) {
  __shared__ int shared[32];
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    int count = 0;
    for (int64_t p = threadIdx.x; p < parts; p += blockDim.x) count += part_count[b * parts + p];
    count = block_sum_ordered(count, shared);
    if (threadIdx.x == 0) out[b] = count;
  }
}

struct SelectShared {
  int hist[256];
  int count;
  int digit;
  int before;
};

// Writes the m best pairs of x[0, V) (1 ≤ m ≤ V) to keys[0, m) in no particular order. Radix
// select from the top digit down, counting only the pairs that share the digits chosen so far,
// until the bucket that holds the m-th best is taken whole: pairs are distinct, so by the last
// digit at the latest. Digits of the complemented index at or above index_bits are all ones for
// every index < V and are skipped.
template <class T>
__device__ void select_best(const T* x, int64_t V, int index_bits, int m, uint64_t* keys, SelectShared& sh) {
  const int64_t warp_first = int64_t(threadIdx.x) / warp_size() * warp_size();
  const int lane = lane_id();
  uint64_t prefix = 0, mask = 0;
  int remaining = m;  // of the best, still to take from the pairs matching prefix
  for (int shift = 56; shift >= 0; shift -= 8) {
    if (shift < 32 && shift >= index_bits) continue;
    for (int bin = threadIdx.x; bin < 256; bin += blockDim.x) sh.hist[bin] = 0;
    __syncthreads();
    // Whole warps step together (the histogram votes); lanes past V vote inactive.
    for (int64_t first = warp_first; first < V; first += kUnroll * int64_t(blockDim.x)) {
      float v[kUnroll];
      load_row_batch(v, x, V, first + lane, blockDim.x);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = first + lane + u * int64_t(blockDim.x);
        const uint64_t pair = order_pair(v[u], uint32_t(i));
        warp_histogram_add<8>(sh.hist, uint32_t(pair >> shift) & 255u, i < V && (pair & mask) == prefix);
      }
    }
    __syncthreads();
    if (threadIdx.x < warp_size()) {
      int before = 0;
      const int digit = warp_first_reaching<int>(remaining, true, [&](int bin) { return sh.hist[bin]; }, before);
      if (threadIdx.x == 0) sh.digit = digit, sh.before = before;
    }
    __syncthreads();
    // digit ≥ 0 always: the pairs matching prefix are at least `remaining`.
    const int digit = sh.digit < 0 ? 0 : sh.digit, in_bucket = sh.hist[digit];
    remaining -= sh.digit < 0 ? 0 : sh.before;
    prefix |= uint64_t(digit) << shift;
    mask |= uint64_t(255) << shift;
    __syncthreads();  // every thread has read sh before the next pass clears it
    if (in_bucket == remaining) break;
  }
  // The chosen digits are the top bits of the m-th best pair: take every pair at or above them.
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  for (int64_t first = warp_first; first < V; first += kUnroll * int64_t(blockDim.x)) {
    float v[kUnroll];
    load_row_batch(v, x, V, first + lane, blockDim.x);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = first + lane + u * int64_t(blockDim.x);
      const uint64_t pair = order_pair(v[u], uint32_t(i));
      const bool take = i < V && (pair & mask) >= prefix;
      const int slot = warp_append(&sh.count, take);
      if (take && slot < m) keys[slot] = pair;
    }
  }
  __syncthreads();
}

// keys[m, n) = 0 (below every pair), then keys[0, n) sorted descending; n = next power of 2.
__device__ void sort_pairs(uint64_t* keys, int64_t m, int64_t n, uint64_t* tile) {
  for (int64_t i = m + threadIdx.x; i < n; i += blockDim.x) keys[i] = 0;
  __syncthreads();
  block_sort_descending(keys, n, tile);
}

__device__ inline int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

template <class T>
__global__ void __launch_bounds__(kThreads) top_k_kernel(float* values, int32_t* indices, const T* logits, int64_t B,
                                                         int64_t V, int k, int index_bits, uint64_t* scratch,
                                                         int64_t key_cap) {
  __shared__ SelectShared sh;
  __shared__ uint64_t tile[kSortTile];
  uint64_t* keys = scratch + blockIdx.x * key_cap;  // key_cap = the power of two ≥ k
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T* x = logits + b * V;
    select_best(x, V, index_bits, k, keys, sh);
    sort_pairs(keys, k, key_cap, tile);
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      const int64_t i = pair_index(keys[j]) < V ? int64_t(pair_index(keys[j])) : V - 1;
      indices[b * k + j] = int32_t(i);
      values[b * k + j] = to_float(x[i]);  // the logit itself (keeps -0 and NaN payloads)
    }
    __syncthreads();  // keys read before the next row overwrites them
  }
}

struct SampleShared {
  SelectShared select;
  uint64_t tile[kSortTile];
  double sums[32];
  float maxima[32];
  int band;
  int first_top_p, first_min_p, first_draw;
};

// The sampled position in keys[0, m), the first m pairs of the order (sorted), out of a support
// of `support` tokens whose softmax denominator beyond the m is `rest`; -1 if the decision lies
// past the m (only when m < support). With z = value / temperature, as the reference:
//   w_i = exp(z_i − z_0), S = Σ w, p_i = w_i / S, c_i = Σ_{i' ≤ i} p_i'
//   n = the least i + 1 with c_i ≥ top_p (top_p < 1), then the least i ≥ 1 below n with
//   p_i < min_p · p_0 (min_p > 0); token = the least i < n with c_i > u · c_{n-1}, else n − 1.
// `w` holds m doubles: first the w_i, then the c_i.
__device__ int64_t walk(const uint64_t* keys, int64_t m, int64_t support, double rest, const ops::SampleParams& params,
                        float u, double* w, SampleShared& sh) {
  const double temperature = params.temperature;
  const double z_max = double(pair_value(keys[0])) / temperature;
  double part = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const double wi = exp(double(pair_value(keys[i])) / temperature - z_max);
    w[i] = wi;
    part += wi;
  }
  const double S = block_sum_ordered(part, sh.sums) + rest;  // its barriers publish w
  const double min_p_bound = double(params.min_p) * (w[0] / S);
  if (threadIdx.x == 0) sh.first_top_p = sh.first_min_p = sh.first_draw = INT_MAX;
  __syncthreads();  // also: every thread has read w[0] before thread 0 turns it into c_0

  // c_i in chunks of one element per thread, until the chunk that holds a cut.
  double carry = 0;
  for (int64_t first = 0; first < m; first += blockDim.x) {
    const int64_t i = first + threadIdx.x;
    const double p = i < m ? w[i] / S : 0.0;
    double chunk_total;
    const double c = carry + block_inclusive_scan(p, sh.sums, chunk_total);
    if (i < m) {
      w[i] = c;
      if (params.top_p < 1 && c >= double(params.top_p)) atomicMin(&sh.first_top_p, int(i));
      if (params.min_p > 0 && i >= 1 && p < min_p_bound) atomicMin(&sh.first_min_p, int(i));
    }
    carry += chunk_total;
    __syncthreads();
    // Every later i is past n. The next chunk's scan begins with a barrier, so no thread lowers
    // a first_* again before every thread has read them here.
    if (sh.first_top_p != INT_MAX || sh.first_min_p != INT_MAX) break;
  }
  const bool top_p_cut = sh.first_top_p != INT_MAX, min_p_cut = sh.first_min_p != INT_MAX;
  const bool filtered = params.top_p < 1 || params.min_p > 0;
  if (filtered && !top_p_cut && !min_p_cut && m < support) return -1;  // the cut lies further on
  int64_t n = top_p_cut ? int64_t(sh.first_top_p) + 1 : support;
  if (min_p_cut && sh.first_min_p < n) n = sh.first_min_p;
  // n ≤ m here, except unfiltered with m < support: then the kept mass is the whole support's, 1.
  const double kept = n <= m ? w[n - 1] : 1.0;
  const double target = double(u) * kept;
  const int64_t end = n < m ? n : m;
  for (int64_t first = 0; first < end; first += blockDim.x) {
    const int64_t i = first + threadIdx.x;
    if (i < end && w[i] > target) atomicMin(&sh.first_draw, int(i));
    __syncthreads();
    const bool drawn = sh.first_draw != INT_MAX;
    __syncthreads();  // every thread has read first_draw before the next chunk may lower it
    if (drawn) break;
  }
  const int64_t chosen = sh.first_draw != INT_MAX ? int64_t(sh.first_draw) : n <= m ? n - 1 : -1;
  __syncthreads();  // sh read by all before a later walk resets it
  return chosen;
}

// The band of a token d = (x_max − x) / temperature nats below the maximum: floor(8 d), the last
// band open-ended (and NaN's). Monotone in x, so every band boundary is a prefix of the order.
__device__ inline int band_of(float d) {
  const float scaled = d * 8.0f;
  return !(scaled < float(kBands - 1)) ? kBands - 1 : scaled > 0.0f ? int(scaled) : 0;
}

// Adds v to the compensated f32 sum (sum, c): summation error ~1 ulp however many terms.
__device__ inline void kahan_add(float& sum, float& c, float v) {
  const float y = v - c, t = sum + y;
  c = (t - sum) - y;
  sum = t;
}

// The smallest band that surely holds what sample's walk needs without top_k, from the count
// of tokens per band and S ≈ Σ exp(−d) (f32 exps): mass at least F·S with margin (F = top_p, or
// u when nothing is filtered), bounding a band's mass below by count · e^{−(b+1)/8}; or, for
// min_p, a non-empty band wholly below min_p · p_0 (b ≥ 8·ln(1/min_p) + 1/8, in whole bands).
// Run by one warp. kBands − 1 (everything) when no smaller band is sure.
__device__ int choose_band(const int* count, double S, const ops::SampleParams& params, float u) {
  int band = kBands - 1;
  if (params.top_p < 1 || params.min_p <= 0) {
    const double F = params.top_p < 1 ? double(params.top_p) : double(u);
    double before = 0;
    const int b = warp_first_reaching<double>(F * S * (1 + 1e-4), false, [&](int bin) {
      return bin < kBands - 1 ? double(count[bin]) * double(expf(-0.125f * float(bin + 1))) : 0.0;
    }, before);
    if (b >= 0) band = b;
  }
  if (params.min_p > 0) {
    const float failing = floorf(-logf(params.min_p) * 8.0f) + 2.0f;
    const int first_failing = failing < float(kBands - 1) ? int(failing) : kBands - 1;
    int before = 0;
    const int b = warp_first_reaching<int>(1, false, [&](int bin) { return bin >= first_failing ? count[bin] : 0; }, before);
    if (b >= 0 && b < band) band = b;
  }
  return band;
}

template <class T>
__global__ void __launch_bounds__(kSampleThreads, 1) sample_kernel(int32_t* out, const T* logits, const float* uniforms,
                                                          int64_t uniform_stride, int64_t B, int64_t V,
                                                          ops::SampleParams params, int index_bits,
                                                          uint64_t* key_scratch, int64_t key_cap,
                                                          double* mass_scratch, int64_t mass_cap) {
  __shared__ SampleShared sh;
  uint64_t* keys = key_scratch + blockIdx.x * key_cap;  // key_cap: a power of two ≥ the support
  double* w = mass_scratch + blockIdx.x * mass_cap;      // mass_cap: the support
  const int64_t warp_first = int64_t(threadIdx.x) / warp_size() * warp_size();
  const int lane = lane_id();
  const bool use_top_k = params.top_k > 0 && params.top_k < V;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T* x = logits + b * V;
    const float u = uniforms[b * uniform_stride];
    int64_t chosen = -1;
    if (use_top_k) {
      const int m = int(params.top_k);
      select_best(x, V, index_bits, m, keys, sh.select);
      sort_pairs(keys, m, pow2_at_least(m), sh.tile);
      chosen = walk(keys, m, m, 0.0, params, u, w, sh);
    } else {
      float local_max = -FLT_MAX;  // fmaxf passes over NaN, as the order ranks it last
      for (int64_t first = threadIdx.x; first < V; first += kUnroll * int64_t(blockDim.x)) {
        float v[kUnroll];
        load_row_batch(v, x, V, first, blockDim.x);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (first + u * int64_t(blockDim.x) < V) local_max = fmaxf(local_max, v[u]);
      }
      const float x_max = block_max(local_max, sh.maxima);
      for (int bin = threadIdx.x; bin < kBands; bin += blockDim.x) sh.select.hist[bin] = 0;
      __syncthreads();
      float sum = 0, c = 0;
      for (int64_t first = warp_first; first < V; first += kUnroll * int64_t(blockDim.x)) {
        float v[kUnroll];
        load_row_batch(v, x, V, first + lane, blockDim.x);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const bool in = first + lane + u * int64_t(blockDim.x) < V;
          const float d = (x_max - v[u]) / params.temperature;
          if (in) kahan_add(sum, c, expf(-d));
          warp_histogram_add<8>(sh.select.hist, uint32_t(band_of(d)), in);
        }
      }
      const double S_estimate = block_sum_ordered(double(sum) - double(c), sh.sums);  // barriers: hist done
      if (threadIdx.x < warp_size()) {
        const int band = choose_band(sh.select.hist, S_estimate, params, u);
        if (threadIdx.x == 0) sh.band = band;
      }
      __syncthreads();
      const int first_band = sh.band;
      for (int attempt = 0; attempt < 2 && chosen < 0; ++attempt) {
        // Candidates: every token in the bands up to `band` (a prefix of the order); the
        // denominator's rest, the tokens below, in compensated f32.
        const int band = attempt == 0 ? first_band : kBands - 1;
        if (threadIdx.x == 0) sh.select.count = 0;
        __syncthreads();
        float rest = 0, rest_c = 0;
        for (int64_t first = warp_first; first < V; first += kUnroll * int64_t(blockDim.x)) {
          float v[kUnroll];
          load_row_batch(v, x, V, first + lane, blockDim.x);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t i = first + lane + u * int64_t(blockDim.x);
            const float d = (x_max - v[u]) / params.temperature;
            const bool take = i < V && band_of(d) <= band;
            const int slot = warp_append(&sh.select.count, take);
            if (take && slot < key_cap) keys[slot] = order_pair(v[u], uint32_t(i));
            if (i < V && !take) kahan_add(rest, rest_c, expf(-d));
          }
        }
        const double S_rest = block_sum_ordered(double(rest) - double(rest_c), sh.sums);  // barriers: count done
        const int64_t m = sh.select.count < key_cap ? sh.select.count : key_cap;
        sort_pairs(keys, m, pow2_at_least(m), sh.tile);
        chosen = walk(keys, m, V, S_rest, params, u, w, sh);
      }
    }
    if (threadIdx.x == 0) {
      const uint32_t token = pair_index(keys[chosen >= 0 ? chosen : 0]);
      out[b] = int32_t(token < V ? token : V - 1);
    }
    __syncthreads();  // keys read before the next row overwrites them
  }
}

int index_bits(int64_t V) {
  int bits = 0;
  while ((int64_t(1) << bits) < V) ++bits;  // bits of V − 1
  return bits;
}

int64_t pow2_at_least_host(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Blocks loop over rows, at most as many as fit on the device at once (`per_sm` each), so the
// per-block scratch stays bounded whatever B is.
unsigned row_grid(const GpuStream& s, int64_t B, int per_sm) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(B, int64_t(per_sm) * s.props().sm_count)));
}

void check_vocabulary(const char* op, int64_t V) {
  if (V >= (int64_t(1) << 31))
    throw Error(ErrorCode::invalid_argument, std::string(op) + " on the GPU: V = " + std::to_string(V) +
                                                 " does not fit the 31-bit token ids of the i32 outputs");
}

// Parts of whole rounds of loads (kThreads · kUnroll elements), as many as bring B rows to two
// blocks per SM; one where the rows alone do that.
RowParts row_parts(const GpuStream& s, int64_t B, int64_t N) {
  constexpr int64_t kRound = int64_t(kThreads) * kUnroll;
  const int64_t wanted = std::max<int64_t>(1, 2 * int64_t(s.props().sm_count) / std::max<int64_t>(B, 1));
  const int64_t parts = std::min(wanted, std::max<int64_t>(1, ceil_div(N, kRound)));
  RowParts rp;
  rp.span = ceil_div(ceil_div(N, parts), kRound) * kRound;
  rp.parts = ceil_div(N, rp.span);
  return rp;
}

// The first launch's grid: a block per part, rows in y (looped past the limit of a grid's y).
dim3 parts_grid(const GpuStream& s, const RowParts& rp, int64_t B) {
  if (rp.parts == 1) return dim3(1, row_grid(s, B, 2));
  return dim3(unsigned(rp.parts), unsigned(std::min<int64_t>(B, kMaxGridYZ)));
}

void launch_argmax(GpuStream& s, int32_t* out, const Tensor& logits) {
  const int64_t B = logits.dim(0), V = logits.dim(1);
  const RowParts rp = row_parts(s, B, V);
  uint64_t* part_best = rp.parts > 1 ? static_cast<uint64_t*>(s.scratch(sizeof(uint64_t) * size_t(B * rp.parts))) : nullptr;
  with_float_type(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    argmax_kernel<T><<<parts_grid(s, rp, B), kThreads, 0, s.handle()>>>(out, part_best, static_cast<const T*>(logits.data),
                                                                         B, V, rp);
  });
  DING_GPU_CHECK_LAUNCH("argmax_kernel");
  if (rp.parts == 1) return;
  argmax_parts_kernel<<<row_grid(s, B, 2), kThreads, 0, s.handle()>>>(out, part_best, B, rp.parts);
  DING_GPU_CHECK_LAUNCH("argmax_parts_kernel");
}

}  // namespace

void count_nonfinite(Stream& stream, const ops::CountNonfiniteArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const int64_t B = a.x.dim(0), N = a.x.dim(1);
  if (B == 0) return;
  const RowParts rp = row_parts(s, B, N);
  int32_t* part_count = rp.parts > 1 ? static_cast<int32_t*>(s.scratch(sizeof(int32_t) * size_t(B * rp.parts))) : nullptr;
  with_float_type(a.x.dtype, [&](auto tag) {
    using T = decltype(tag);
    count_nonfinite_kernel<T><<<parts_grid(s, rp, B), kThreads, 0, s.handle()>>>(
        a.out.ptr<int32_t>(), part_count, static_cast<const T*>(a.x.data), B, N, rp);
  });
  DING_GPU_CHECK_LAUNCH("count_nonfinite_kernel");
  if (rp.parts == 1) return;
  count_parts_kernel<<<row_grid(s, B, 2), kThreads, 0, s.handle()>>>(a.out.ptr<int32_t>(), part_count, B, rp.parts);
  DING_GPU_CHECK_LAUNCH("count_parts_kernel");
}

void argmax(Stream& stream, const ops::ArgmaxArgs& a) {
  check_vocabulary("argmax", a.logits.dim(1));
  launch_argmax(gpu_stream(stream), a.out.ptr<int32_t>(), a.logits);
}

void top_k(Stream& stream, const ops::TopKArgs& a) {
  const int64_t B = a.logits.dim(0), V = a.logits.dim(1), k = a.values.dim(1);
  check_vocabulary("top_k", V);
  GpuStream& s = gpu_stream(stream);
  const unsigned grid = row_grid(s, B, 2);
  const int64_t key_cap = pow2_at_least_host(k);
  auto* keys = static_cast<uint64_t*>(s.scratch(size_t(grid) * size_t(key_cap) * sizeof(uint64_t)));
  with_float_type(a.logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel<T><<<grid, kThreads, 0, s.handle()>>>(a.values.ptr<float>(), a.indices.ptr<int32_t>(),
                                                       static_cast<const T*>(a.logits.data), B, V, int(k),
                                                       index_bits(V), keys, key_cap);
  });
  DING_GPU_CHECK_LAUNCH("top_k_kernel");
}

void sample(Stream& stream, const ops::SampleArgs& a) {
  const int64_t B = a.logits.dim(0), V = a.logits.dim(1);
  check_vocabulary("sample", V);
  GpuStream& s = gpu_stream(stream);
  if (a.params.temperature == 0) {
    launch_argmax(s, a.out.ptr<int32_t>(), a.logits);
    return;
  }
  const int64_t support = a.params.top_k > 0 && a.params.top_k < V ? a.params.top_k : V;
  const unsigned grid = row_grid(s, B, 1);  // ~80 registers × 512 threads: one block per SM
  const int64_t key_cap = pow2_at_least_host(support), mass_cap = support;
  // One scratch region: each block's sorted pairs, then each block's masses (both 8-byte words).
  auto* keys = static_cast<uint64_t*>(s.scratch(size_t(grid) * size_t(key_cap + mass_cap) * sizeof(uint64_t)));
  auto* masses = reinterpret_cast<double*>(keys + size_t(grid) * size_t(key_cap));
  with_float_type(a.logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    sample_kernel<T><<<grid, kSampleThreads, 0, s.handle()>>>(a.out.ptr<int32_t>(), static_cast<const T*>(a.logits.data),
                                                        a.uniforms.ptr<float>(), a.uniforms.strides[0], B, V, a.params,
                                                        index_bits(V), keys, key_cap, masses, mass_cap);
  });
  DING_GPU_CHECK_LAUNCH("sample_kernel");
}

DING_GPU_END
