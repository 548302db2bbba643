// attention_decode on the GPU: flash-decoding (split the keys, merge the splits' softmax states)
// in a single launch, the cross-split merge included.
//
// Block (b, kv head, head block, split): up to HPB query heads of one kv head's group over the
// split's keys [split·chunk, min(seq_len, (split + 1)·chunk)), so every K/V row loaded serves all
// of those heads. A key is scored by a group of `lanes` lanes (a power of two ≥ D/8, ≤ 32), each
// lane holding 8 elements of q per head and 8 of the row (one 16-byte load for f16/bf16, two for
// f32), so K and V rows are read whole and contiguous. A key group takes U keys per step and
// issues all their K/V loads before any math; the next step's U keys are loaded into a second set
// of registers before this step's math (double buffering), so a warp keeps 2·U rows per key group
// in flight while it computes. A step's U keys fold into the online softmax as one batch (one
// rescale, no data-dependent branch). Each key group keeps its own (m, l, acc) per head; they are
// merged by shuffles inside a warp, then across warps through shared memory in one pass, and
// written as the output (one split) or as the split's partial state.
//
// Splits are many and short (a few steps each; enough blocks for every SM to hold several), so a
// block's loads go out at once and its serial chain is short: the latency of a short context is a
// few memory round trips, and a long one keeps enough bytes in flight to stream at bandwidth.
//
// With several splits, the block of a (b, kv head, head block) group that arrives last (an atomic
// ticket per group) merges the partials of the splits that have keys. Its threads split the work
// by (head, element quad, subset of splits), load m, l and acc of a batch of splits together (no
// dependent second load), fold them in split order, then combine the subsets in a fixed order: the
// same arithmetic whichever block finishes last, so results are deterministic. It resets the
// ticket to 0 for the next call, so a recorded graph replays without a reset of its own.
//
// The split count depends on the cache capacity S, the batch, the heads and the device only,
// never on the lengths: they live on the device and grow between replays of a recorded decode
// step. The kernel is a chained launch (vendor.h): its index math overlaps the previous kernel
// (the QKV product in a decode step), and it waits for that kernel before reading anything.
//
// The op's k_new and v_new (the current token's key and value): the blocks whose split holds
// position seq_lens − 1 read that key from them rather than from the cache, and the first head
// block of each kv head stores them into the cache. A decode step then has no kv_append launch
// between the QKV product and attention (one kernel boundary, ~3–5 µs, less per layer).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "attention.cuh"
#include "check.h"
#include "kernels.h"
#include "reduce.cuh"

namespace ding::gpu {
namespace {

using namespace attn;

constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxLanes = 32;  // lanes per key: 8 elements each, so D ≤ 256
constexpr int kMaxSplits = 1024;
// Tickets, one per (b, kv head, head block) group while it has several splits. Several splits
// only pay while the groups do not fill the device on their own (a few thousand at most); a
// launch with more groups runs one split each and needs no ticket.
constexpr int kTicketSlots = 8192;
// The merging block reads splits · heads · D partial floats from L2 after every other split of
// its group is done, so that read is the launch's tail: at most this many (64 KB) per group.
constexpr int64_t kMergeFloats = 16384;

// Zero at module load; every merge leaves its slot at zero again.
__device__ unsigned int decode_tickets[kTicketSlots];

// Per variant: U (keys per key group and step; each costs two slices of 4 registers for f16/bf16,
// 8 for f32, twice over for the double buffer) and the blocks per SM the register cap is set
// for. 4 blocks cap registers at 128: one head's q and acc (16) beside 2·U keys (64 registers);
// 2 or 4 heads (32 or 64 registers of q and acc) take the 168 of 3 blocks, with U = 2 (16-bit
// U = 4 spilled there: ptxas -v, sm_90).
template <class KV, int HPB>
struct DecodeConfig {
  static constexpr int kKeysInFlight = sizeof(KV) == 2 && HPB == 1 ? 4 : 2;
  static constexpr int kBlocksPerSm = HPB >= 2 ? 3 : 4;
  // Splits whose m, l and acc one merging thread loads before it uses any of them: 16 where the
  // 168-register cap has room (a GQA group of 4 at D = 128 merges 32 splits per thread; f32
  // caches spilled with 16 on sm_89).
  static constexpr int kMergeBatch = HPB >= 2 && sizeof(KV) == 2 ? 16 : 8;
};

struct DecodeShape {
  int64_t H, S, Hkv, group;  // S: cache capacity
  int D;
  int heads;        // query heads per block (≤ HPB)
  int head_blocks;  // blocks per kv head: ceil(group / heads)
  int splits;
  int64_t chunk;    // keys per split
  int lanes;        // lanes per key
};

// The current token's key and value (attention_decode's k_new and v_new, rows of the QKV
// product) when the op appends them: k == nullptr otherwise. Same element type as the cache.
template <class KV>
struct NewKv {
  const KV* k = nullptr;
  const KV* v = nullptr;
  int64_t k_b = 0, k_h = 0, v_b = 0, v_h = 0;  // strides of [B, Hkv, D]
};

// The splits' partial states: acc [B, H, splits, D] (first in the scratch, so 16-byte aligned
// rows when D % 4 == 0), m and l [B, H, splits].
struct Partials {
  float* acc;
  float* m;
  float* l;
};

// Elements [e0, e0 + 8) of a cache row as raw 32-bit words: one 16-byte word (4 registers) for
// f16/bf16, two (8 registers) for f32; widened to f32 only when used, so the 2·U rows in flight
// stay packed (an array of 16-bit elements would take a register each).
template <class T>
struct Slice8 {
  static constexpr int kRegs = int(sizeof(T)) * 2;
  uint32_t w[kRegs];
  __device__ float operator[](int c) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(w[c]);
    } else {
      return to_float(T{uint16_t(w[c / 2] >> (16 * (c % 2)))});
    }
  }
};

template <class T>
__device__ inline uint32_t element_bits(T x) {
  if constexpr (sizeof(T) == 4) return __float_as_uint(x);
  else return x.bits;
}

// `at` points at element e0 of a row. `vec`: D is a multiple of 8 and the row start 16-byte
// aligned, so the slice is whole aligned words (or wholly past D, which the caller skips).
// Otherwise element by element, zero from D on.
template <class T>
__device__ inline Slice8<T> load_slice8(const T* at, int e0, int D, bool vec) {
  Slice8<T> x;
  if (vec) {
#pragma unroll
    for (int q = 0; q < Slice8<T>::kRegs / 4; ++q) {
      const uint4 word = *reinterpret_cast<const uint4*>(at + q * (16 / int(sizeof(T))));
      x.w[4 * q] = word.x, x.w[4 * q + 1] = word.y, x.w[4 * q + 2] = word.z, x.w[4 * q + 3] = word.w;
    }
    return x;
  }
#pragma unroll
  for (int r = 0; r < Slice8<T>::kRegs; ++r) x.w[r] = 0;
  constexpr int kPerReg = 4 / int(sizeof(T));
#pragma unroll
  for (int c = 0; c < 8; ++c)
    if (e0 + c < D) x.w[c / kPerReg] |= element_bits(at[c]) << (32 / kPerReg * (c % kPerReg));
  return x;
}

template <class T>
__device__ inline Slice8<T> zero_slice8() {
  Slice8<T> x;
#pragma unroll
  for (int r = 0; r < Slice8<T>::kRegs; ++r) x.w[r] = 0;  // +0 in every float format
  return x;
}

// Loads of partials other blocks wrote during this launch: from L2, never from a possibly stale
// L1 line (this SM may have read the same scratch in the previous call). NVIDIA: a .cg load,
// whole quads at once; elsewhere volatile scalar loads.
__device__ inline float load_partial(const float* p) {
#if defined(DING_GPU_NVIDIA_MMA)
  float x;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(x) : "l"(p) : "memory");
  return x;
#else
  return *static_cast<const volatile float*>(p);
#endif
}

// W consecutive floats from p (16-byte aligned when W == 4).
template <int W>
__device__ inline void load_partials(float (&x)[W], const float* p) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr bool kQuadLoad = W == 4;
#else
  constexpr bool kQuadLoad = false;
#endif
  if constexpr (kQuadLoad) {
#if defined(DING_GPU_NVIDIA_MMA)
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
                 : "l"(p)
                 : "memory");
#endif
  } else {
#pragma unroll
    for (int c = 0; c < W; ++c) x[c] = load_partial(p + c);
  }
}

// The last block of a group merges its splits 0 .. used - 1 into the output. Work items are
// (head g, element group of W, subset `sub` of the splits: sub, sub + P, ...); with P > 1 every
// item fits in one pass of the block and the P subsets are combined through shared memory.
template <int W, int kMergeBatch>
__device__ void merge_splits(Operand out, Partials part, const DecodeShape& sh, int64_t b, int64_t h0, int heads,
                             int used, float* merge_m, float* merge_l, float (*merge_o)[4]) {
  const int Q = sh.D / W;  // element groups per row
  const int P = max(1, kDecodeThreads / (heads * Q));
  const int items = heads * Q * P;
  for (int item = threadIdx.x; item < items; item += kDecodeThreads) {
    const int qd = item % Q, sub = (item / Q) % P, g = item / (Q * P);
    const int64_t first = (b * sh.H + h0 + g) * sh.splits;
    const float* acc = part.acc + first * sh.D + qd * W;
    float m_run = -INFINITY, l_run = 0.0f, o[W];
#pragma unroll
    for (int c = 0; c < W; ++c) o[c] = 0.0f;
    for (int s0 = sub; s0 < used; s0 += P * kMergeBatch) {
      // A batch's loads all go out before its math.
      float a[kMergeBatch][W], ms[kMergeBatch], ls[kMergeBatch];
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        const int s = s0 + i * P;
        if (s < used) {
          load_partials<W>(a[i], acc + int64_t(s) * sh.D);
          ms[i] = load_partial(part.m + first + s);
          ls[i] = load_partial(part.l + first + s);
        } else {
#pragma unroll
          for (int c = 0; c < W; ++c) a[i][c] = 0.0f;
          ms[i] = -INFINITY;
          ls[i] = 0.0f;
        }
      }
      float m_new = m_run;
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) m_new = fmaxf(m_new, ms[i]);
      const float alpha = exp_from(m_run, m_new);
      l_run *= alpha;
#pragma unroll
      for (int c = 0; c < W; ++c) o[c] *= alpha;
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) {
        const float w = exp_from(ms[i], m_new);
        l_run = fmaf(w, ls[i], l_run);
#pragma unroll
        for (int c = 0; c < W; ++c) o[c] = fmaf(w, a[i][c], o[c]);
      }
      m_run = m_new;
    }
    if (P == 1) {  // the item holds every split
      const float inv = 1.0f / l_run;
      with_element_type(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        T* row = static_cast<T*>(out.data) + out.at.at(b, 0, h0 + g) + qd * W;
#pragma unroll
        for (int c = 0; c < W; ++c) row[c] = from_float<T>(o[c] * inv);
      });
    } else {
      merge_m[item] = m_run;
      merge_l[item] = l_run;
#pragma unroll
      for (int c = 0; c < W; ++c) merge_o[item][c] = o[c];
    }
  }
  if (P == 1) return;  // uniform over the block
  __syncthreads();
  // Subsets in order 0 .. P - 1; subset 0 holds split 0, so m_all is finite.
  for (int t = threadIdx.x; t < heads * Q; t += kDecodeThreads) {
    const int g = t / Q, qd = t % Q;
    const int base = g * Q * P + qd;
    float m_all = -INFINITY;
    for (int sub = 0; sub < P; ++sub) m_all = fmaxf(m_all, merge_m[base + sub * Q]);
    float l_all = 0.0f, o[W];
#pragma unroll
    for (int c = 0; c < W; ++c) o[c] = 0.0f;
    for (int sub = 0; sub < P; ++sub) {
      const int item = base + sub * Q;
      const float w = exp_from(merge_m[item], m_all);
      l_all = fmaf(w, merge_l[item], l_all);
#pragma unroll
      for (int c = 0; c < W; ++c) o[c] = fmaf(w, merge_o[item][c], o[c]);
    }
    const float inv = 1.0f / l_all;
    with_element_type(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* row = static_cast<T*>(out.data) + out.at.at(b, 0, h0 + g) + qd * W;
#pragma unroll
      for (int c = 0; c < W; ++c) row[c] = from_float<T>(o[c] * inv);
    });
  }
}

template <class KV, int HPB>
__global__ void __launch_bounds__(kDecodeThreads,
                                  launch_min_blocks(kDecodeThreads, DecodeConfig<KV, HPB>::kBlocksPerSm))
    attention_decode_kernel(Operand out, Operand q, const KV* k, Strides3 ks, const KV* v, Strides3 vs, bool kv_vec,
                            const int32_t* seq_lens, DecodeShape sh, float scale, Partials part, NewKv<KV> fresh,
                            KV* k_cache, KV* v_cache) {
  constexpr int kWarps = kDecodeThreads / warp_size();
  constexpr int U = DecodeConfig<KV, HPB>::kKeysInFlight;
  static_assert(HPB <= 4, "q and acc of more heads do not fit the register budget");
  __shared__ float red_m[kWarps][HPB], red_l[kWarps][HPB];
  __shared__ float red_acc[kWarps][HPB][8 * kDecodeMaxLanes];
  __shared__ float merge_m[kDecodeThreads], merge_l[kDecodeThreads], merge_o[kDecodeThreads][4];
  __shared__ bool merges;

  int64_t idx = blockIdx.x;
  // Head blocks of one kv head and split are neighbours in launch order: the second reads the
  // K/V rows the first brought into L2.
  const int hb = int(idx % sh.head_blocks);
  idx /= sh.head_blocks;
  const int split = int(idx % sh.splits);
  idx /= sh.splits;
  const int64_t kv_head = idx % sh.Hkv, b = idx / sh.Hkv;
  const int64_t group_id = (b * sh.Hkv + kv_head) * sh.head_blocks + hb;
  const int64_t h0 = kv_head * sh.group + int64_t(hb) * sh.heads;
  const int heads = int(min(int64_t(sh.heads), sh.group - int64_t(hb) * sh.heads));
  const int D = sh.D;
  const int lanes = sh.lanes;
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int key_lane = lane % lanes, e0 = 8 * key_lane;
  const int groups_per_warp = warp_size() / lanes;
  const int key_group = warp * groups_per_warp + lane / lanes, key_groups = kWarps * groups_per_warp;
  const KV* k_head = k + b * ks.b + kv_head * ks.h + e0;
  const KV* v_head = v + b * vs.b + kv_head * vs.h + e0;

  // q, seq_lens and the caches come from earlier kernels of the step.
  wait_for_prior_kernels();
  release_dependents();

  // q first, then the length: both loads are in flight together.
  float qr[HPB][8];
  with_element_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
#pragma unroll
    for (int g = 0; g < HPB; ++g) {
      const T* row = static_cast<const T*>(q.data) + q.at.at(b, 0, h0 + min(g, heads - 1));
#pragma unroll
      for (int c = 0; c < 8; ++c) qr[g][c] = g < heads && e0 + c < D ? scale * to_float(row[e0 + c]) : 0.0f;
    }
  });
  // The length lives on the device: clamp it, never trust it (a host backend would raise).
  const int64_t raw_len = seq_lens[b];
  const int64_t len = min(max(raw_len, int64_t(1)), sh.S);
  const int64_t begin = int64_t(split) * sh.chunk, end = min(len, begin + sh.chunk);
  // The appended position len − 1 is read from the new rows, never from the cache, so no block
  // waits for another's write; kv_append's rule for a length that does not fit: write nothing.
  const bool appends = fresh.k && raw_len >= 1 && raw_len <= sh.S;
  const int64_t fresh_j = appends ? len - 1 : -1;
  const KV* k_fresh = appends ? fresh.k + b * fresh.k_b + kv_head * fresh.k_h + e0 : nullptr;
  const KV* v_fresh = appends ? fresh.v + b * fresh.v_b + kv_head * fresh.v_h + e0 : nullptr;

  if (begin < end) {  // uniform over the block; split 0 always has keys
    // The split holding the new position stores it (the first head block of the kv head):
    // whole 16-byte pieces, as the fused path requires kv_vec.
    if (fresh_j >= begin && fresh_j < end && hb == 0) {
      KV* k_row = k_cache + b * ks.b + kv_head * ks.h + fresh_j * ks.t;
      KV* v_row = v_cache + b * vs.b + kv_head * vs.h + fresh_j * vs.t;
      const KV* k_in = k_fresh - e0;  // the lane's pointers carry its e0
      const KV* v_in = v_fresh - e0;
      for (int i = int(threadIdx.x); i < D * int(sizeof(KV)) / 16; i += kDecodeThreads) {
        reinterpret_cast<uint4*>(k_row)[i] = reinterpret_cast<const uint4*>(k_in)[i];
        reinterpret_cast<uint4*>(v_row)[i] = reinterpret_cast<const uint4*>(v_in)[i];
      }
    }
    float m_run[HPB], l_run[HPB], acc[HPB][8];
#pragma unroll
    for (int g = 0; g < HPB; ++g) {
      m_run[g] = -INFINITY;
      l_run[g] = 0.0f;
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[g][c] = 0.0f;
    }

    // Step keys: key group kg takes keys j0 + kg + u·key_groups (u < U) of the step at j0.
    // Every lane runs the same number of steps (the shuffles need the whole warp); a key past
    // `end` loads nothing and leaves the state alone.
    const int64_t step_keys = int64_t(U) * key_groups;
    const int steps = int((end - begin + step_keys - 1) / step_keys);
    auto load_step = [&](Slice8<KV>(&kx)[U], Slice8<KV>(&vx)[U], int64_t j0) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + key_group + int64_t(u) * key_groups;
        if (j < end && e0 < D) {
          kx[u] = load_slice8(j == fresh_j ? k_fresh : k_head + j * ks.t, e0, D, kv_vec);
          vx[u] = load_slice8(j == fresh_j ? v_fresh : v_head + j * vs.t, e0, D, kv_vec);
        } else {
          kx[u] = vx[u] = zero_slice8<KV>();
        }
      }
    };
    // The U keys as one batch of the online softmax: one rescale per batch, no branches.
    auto fold_step = [&](const Slice8<KV>(&kx)[U], const Slice8<KV>(&vx)[U], int64_t j0) {
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
        float score[U], batch_max = m_run[g];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float s = 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) s = fmaf(qr[g][c], kx[u][c], s);
          // A butterfly over the key group (unrolled; the level test is uniform over the warp):
          // every lane of the group ends with the same bits.
#pragma unroll
          for (int lane_mask = kDecodeMaxLanes / 2; lane_mask > 0; lane_mask /= 2)
            if (lane_mask < lanes) s += shfl_xor(s, lane_mask);
          score[u] = j0 + key_group + int64_t(u) * key_groups < end ? s : -INFINITY;
          batch_max = fmaxf(batch_max, score[u]);
        }
        // A key group with no key yet and none in this step has batch_max = m_run = -inf:
        // alpha and every p are 0, so its state stays (0, 0, -inf).
        const float alpha = exp_from(m_run[g], batch_max);
        l_run[g] *= alpha;
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[g][c] *= alpha;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float p = exp_from(score[u], batch_max);
          l_run[g] += p;
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[g][c] = fmaf(p, vx[u][c], acc[g][c]);
        }
        m_run[g] = batch_max;
      }
    };
    // Double buffering: step s + 1's loads go out before step s's math.
    Slice8<KV> ka[U], va[U], kb[U], vb[U];
    int64_t j0 = begin;
    load_step(ka, va, j0);
    for (int s = 0; s < steps; s += 2) {
      if (s + 1 < steps) load_step(kb, vb, j0 + step_keys);
      fold_step(ka, va, j0);
      if (s + 1 == steps) break;
      if (s + 2 < steps) load_step(ka, va, j0 + 2 * step_keys);
      fold_step(kb, vb, j0 + step_keys);
      j0 += 2 * step_keys;
    }

    // Merge the key groups of each warp: lanes `lanes`, 2·lanes, … apart hold the same elements.
    for (int lane_mask = lanes; lane_mask < warp_size(); lane_mask *= 2) {
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
        const float m_other = shfl_xor(m_run[g], lane_mask), l_other = shfl_xor(l_run[g], lane_mask);
        const float m_new = fmaxf(m_run[g], m_other);
        const float w_self = exp_from(m_run[g], m_new), w_other = exp_from(m_other, m_new);
        l_run[g] = l_run[g] * w_self + l_other * w_other;
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[g][c] = acc[g][c] * w_self + shfl_xor(acc[g][c], lane_mask) * w_other;
        m_run[g] = m_new;
      }
    }
    // ... then the warps, through shared memory: key group 0 of each warp publishes its state,
    // and each output element combines the warps' states on its own (one barrier).
    if (lane < lanes) {
#pragma unroll
      for (int g = 0; g < HPB; ++g) {
#pragma unroll
        for (int c = 0; c < 8; ++c) red_acc[warp][g][e0 + c] = acc[g][c];
        if (lane == 0) red_m[warp][g] = m_run[g], red_l[warp][g] = l_run[g];
      }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < heads * D; t += kDecodeThreads) {
      const int g = t / D, d = t % D;
      float m_all = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w][g]);
      float l_all = 0.0f, o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float wt = exp_from(red_m[w][g], m_all);  // 0 for a warp that saw no key
        l_all += wt * red_l[w][g];
        o += wt * red_acc[w][g][d];
      }
      if (sh.splits == 1) {
        with_element_type(out.dtype, [&](auto tag) {
          using T = decltype(tag);
          static_cast<T*>(out.data)[out.at.at(b, 0, h0 + g) + d] = from_float<T>(o * (1.0f / l_all));
        });
      } else {
        const int64_t state = (b * sh.H + h0 + g) * sh.splits + split;
        part.acc[state * D + d] = o;
        if (d == 0) part.m[state] = m_all, part.l[state] = l_all;
      }
    }
  }
  if (sh.splits == 1) return;

  // Arrive: this block's partial (if any) is visible device-wide before its ticket counts.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(&decode_tickets[group_id], 1u);
    merges = ticket == unsigned(sh.splits - 1);
    // Every split of the group has arrived: nobody touches the slot again in this launch.
    if (merges) atomicExch(&decode_tickets[group_id], 0u);
  }
  __syncthreads();
  if (!merges) return;
  __threadfence();  // the partial loads below stay after the ticket

  // Splits 0 .. used - 1 have keys; the others wrote nothing.
  const int used = int((len + sh.chunk - 1) / sh.chunk);
  constexpr int kBatch = DecodeConfig<KV, HPB>::kMergeBatch;
  if (D % 4 == 0) merge_splits<4, kBatch>(out, part, sh, b, h0, heads, used, merge_m, merge_l, merge_o);
  else merge_splits<1, kBatch>(out, part, sh, b, h0, heads, used, merge_m, merge_l, merge_o);
}

}  // namespace

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  const int64_t B = a.q.dim(0), H = a.q.dim(1), D = a.q.dim(2);
  const int64_t S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2), group = H / Hkv;
  if (B * H * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const float scale = ops::attention_scale(a.params, D);
  const Operand out = operand(a.out, strides_bhd(a.out)), q = operand(a.q, strides_bhd(a.q));
  const int32_t* seq_lens = static_cast<const int32_t*>(a.seq_lens.data);
  const bool kv_vec = D % 8 == 0 && rows_aligned(a.k_cache, 16 / int64_t(dtype_size(a.k_cache.dtype))) &&
                      rows_aligned(a.v_cache, 16 / int64_t(dtype_size(a.v_cache.dtype)));
  const bool flash = D <= 8 * kDecodeMaxLanes && a.k_cache.dtype == a.v_cache.dtype;  // else launch_rows
  // The new rows are read by the decode kernel itself where they are the cache's type and whole
  // 16-byte pieces; otherwise a kv_append launch (start = seq_lens − 1) goes first.
  const bool fresh_in_kernel = a.k_new.defined() && flash && kv_vec && a.k_new.dtype == a.k_cache.dtype &&
                               a.v_new.dtype == a.k_cache.dtype && rows_aligned(a.k_new, 16 / int64_t(dtype_size(a.k_new.dtype))) &&
                               rows_aligned(a.v_new, 16 / int64_t(dtype_size(a.v_new.dtype)));
  if (a.k_new.defined() && !fresh_in_kernel) launch_kv_append(s, ops::decode_append(a, a.seq_lens), -1);
  if (!flash) {
    launch_rows(s, out, q, a.k_cache, strides3(a.k_cache), a.v_cache, strides3(a.v_cache),
                RowShape{B, 1, S, H, group, int(D), false, seq_lens}, scale);
    return;
  }

  DecodeShape sh{};
  sh.H = H, sh.S = S, sh.Hkv = Hkv, sh.group = group, sh.D = int(D);
  // Heads per block: the group's heads (3 rounded up to 4, the extra slot idle), at most 4 so
  // that q and acc stay in registers (8 heads cost 240 registers and ran at half the
  // bandwidth); larger groups take several blocks per kv head.
  const int hpb = group > 2 ? 4 : int(group);
  sh.heads = hpb;
  sh.head_blocks = int(ceil_div(group, hpb));
  sh.lanes = 1;
  while (8 * sh.lanes < D) sh.lanes *= 2;
  const bool chained = s.props().has_chained_launch();

  with_float_type(a.k_cache.dtype, [&](auto kv_tag) {
    using KV = decltype(kv_tag);
    auto launch = [&](auto hpb_tag) {
      constexpr int HPB = decltype(hpb_tag)::value;
      using Config = DecodeConfig<KV, HPB>;
      // Splits from shapes and the device only: enough blocks to fill every SM at the
      // occupancy the kernel is built for (all resident: no second wave's tail), fewer where
      // the merge would read more than kMergeFloats per group. Chunks are whole multiples of
      // the key groups, so every key group of a full split gets the same number of keys.
      const int64_t groups = B * Hkv * sh.head_blocks;
      const int64_t key_groups = kDecodeThreads / sh.lanes;
      const int64_t resident = int64_t(Config::kBlocksPerSm) * s.props().sm_count;
      int64_t splits = groups > kTicketSlots ? 1 : std::max<int64_t>(1, resident / groups);
      splits = std::min(splits, std::max<int64_t>(1, kMergeFloats / (int64_t(HPB) * D)));
      splits = std::min<int64_t>(splits, kMaxSplits);
      sh.chunk = ceil_div(ceil_div(S, splits), key_groups) * key_groups;
      sh.splits = int(ceil_div(S, sh.chunk));  // no split starts past S; never more than `splits`

      NewKv<KV> fresh;
      if (fresh_in_kernel)
        fresh = {static_cast<const KV*>(a.k_new.data), static_cast<const KV*>(a.v_new.data), a.k_new.strides[0],
                 a.k_new.strides[1], a.v_new.strides[0], a.v_new.strides[1]};
      Partials part{nullptr, nullptr, nullptr};
      if (sh.splits > 1) {
        const int64_t states = B * H * sh.splits;
        float* scratch = static_cast<float*>(s.scratch(sizeof(float) * size_t(states * (D + 2))));
        part = {scratch, scratch + states * D, scratch + states * (D + 1)};
      }
      DING_GPU_CHECK(launch_chained(chained, attention_decode_kernel<KV, HPB>, dim3(unsigned(groups * sh.splits)),
                                    dim3(kDecodeThreads), 0, s.handle(), out, q,
                                    static_cast<const KV*>(a.k_cache.data), strides3(a.k_cache),
                                    static_cast<const KV*>(a.v_cache.data), strides3(a.v_cache), kv_vec, seq_lens, sh,
                                    scale, part, fresh, static_cast<KV*>(a.k_cache.data),
                                    static_cast<KV*>(a.v_cache.data)));
    };
    switch (hpb) {
      case 4: launch(std::integral_constant<int, 4>{}); break;
      case 2: launch(std::integral_constant<int, 2>{}); break;
      default: launch(std::integral_constant<int, 1>{}); break;
    }
  });
}

}  // namespace ding::gpu
