// attention_decode on the GPU: flash-decoding (split the keys, merge the splits' softmax states)
// in a single launch, the cross-split merge included.
//
// Block (b, kv head, head block, split): query heads of one kv head's group over the split's keys
// [first + split·chunk, min(seq_len, first + (split + 1)·chunk)), so every K/V row loaded serves
// all of those heads. first is 0, or with a sliding window max(0, seq_len − window): the splits
// then divide the window's keys alone, and a long cache with a short window reads only the
// window. Two kernels do a split's work and end it the same way (the warps' states combined in
// shared memory, then the output or the split's partial):
//   - the tensor-core kernel (NVIDIA sm_80+; 16-bit q, k, v of one dtype, a bf16 output, D = 64
//     or 128; up to 16 heads per block) makes the heads the rows of m16n8k16 tiles: K/V tiles of
//     64 keys come through a cp.async ring, warp w takes keys 16w … 16w + 15 of each tile, and
//     S = Q·Kᵀ, its online softmax and O += P·V are a few mmas per 16 keys (P as 16-bit parts, as
//     in attention_prefill.cu, whose precision argument holds here), with no per-key shuffles;
//   - the SIMT kernel (any float dtypes, D ≤ 256; up to HPB heads per block), below.
//
// SIMT kernel: a key is scored by a group of `lanes` lanes (a power of two ≥ D/8, ≤ 32), each
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
// few memory round trips, and a long one has many bytes in flight. (At 4096 keys the launch still
// reaches only about half the copy bandwidth: a fixed part of ~8 µs — the first round trip, the
// ticket, the merge — sits beside the transfer; docs/PERFORMANCE.md, eighth session.)
//
// With several splits, the block of a (b, kv head, head block) group that arrives last (an atomic
// ticket per group) merges the partials of the splits that have keys. Its threads split the work
// by (head, element quad, subset of splits), load m, l and acc of a batch of splits together (no
// dependent second load), fold them in split order, then combine the subsets in a fixed order: the
// same arithmetic whichever block finishes last, so results are deterministic. It resets the
// ticket to 0 for the next call, so a recorded graph replays without a reset of its own.
//
// The split count depends on the cache capacity S (or the window, where it is shorter), the
// batch, the heads and the device only, never on the lengths: they live on the device and grow
// between replays of a recorded decode step. The kernel is a chained launch (vendor.h): its index
// math overlaps the previous kernel (the QKV product in a decode step), and it waits for that
// kernel before reading q and k_new. Where the op says seq_lens and the cache come from earlier
// ops (cache_from_earlier_op: a decode step's), the tensor-core kernel also reads the lengths,
// builds its rope table and copies its first K/V tiles before that wait, every row but the newest,
// which it copies after.
//
// The op's k_new and v_new (the current token's key and value): the blocks whose split holds
// position seq_lens − 1 read that key from them rather than from the cache, and the first head
// block of each kv head stores them into the cache. A decode step then has no kv_append launch
// between the QKV product and attention (one kernel boundary, ~3–5 µs, less per layer).
//
// The op's rope: the tensor-core kernel rotates q in shared memory once it has landed, the new
// key in the ring tile that holds it, and the copy it stores, from one table of f·cos and f·sin
// per block (rotary.cuh), so a decode step launches no rope kernels. Other paths rotate copies
// of q and k_new first (ops::transformed_first), as they do for the op's qk_norm, which the
// tensor-core kernel applies before rotating.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "attention.cuh"
#include "check.h"
#include "attention_mma.cuh"
#include "cp_async.cuh"
#include "kernels.h"
#include "last_block.cuh"
#include "mma_sync.cuh"
#include "reduce.cuh"
#include "rotary.cuh"

DING_GPU_BEGIN
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
  int64_t window;   // > 0: the query (position seq_len − 1) sees the last `window` keys only
  bool rolling;     // a rolling cache (ops::rolling_cache): lengths past S, key j at slot j mod S
  bool settled;     // seq_lens and every cache row but the newest were written two or more kernels
                    // back (ops::AttentionDecodeArgs::cache_from_earlier_op): readable before the wait
  bool cluster_merge = false;  // (tensor-core kernel) a group's splits are one cluster and merge in
                               // shared memory (merge_in_cluster), not through L2 and a ticket; only
                               // where the grid is at most a block an SM (launch_decode_mma)
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

// Which (b, kv head, head block, split) a block works on. Head blocks of one kv head and split
// are neighbours in launch order: the second reads the K/V rows the first brought into L2.
struct DecodeBlock {
  int hb, split;
  int64_t kv_head, b;
  int64_t group_id;  // (b, kv head, head block): the ticket slot of its splits
  int64_t h0;        // first query head
  int heads;         // query heads of this block (≤ sh.heads)
};

__device__ inline DecodeBlock decode_block(const DecodeShape& sh) {
  // 32-bit: the grid is below 2^31 blocks, and 64-bit divisions are software loops.
  unsigned idx = blockIdx.x;
  DecodeBlock blk;
  blk.hb = int(idx % unsigned(sh.head_blocks));
  idx /= unsigned(sh.head_blocks);
  blk.split = int(idx % unsigned(sh.splits));
  idx /= unsigned(sh.splits);
  blk.kv_head = int64_t(idx % unsigned(sh.Hkv));
  blk.b = int64_t(idx / unsigned(sh.Hkv));
  blk.group_id = (blk.b * sh.Hkv + blk.kv_head) * sh.head_blocks + blk.hb;
  blk.h0 = blk.kv_head * sh.group + int64_t(blk.hb) * sh.heads;
  blk.heads = int(min(int64_t(sh.heads), sh.group - int64_t(blk.hb) * sh.heads));
  return blk;
}

// The keys of a block's split, [begin, end), and where the step's own key sits.
struct DecodeKeys {
  int64_t len;      // seq_lens[b] clamped to [1, S] (rolling: to ≥ 1)
  int64_t first;    // the first key the query sees: 0, or len − window with a window
  int64_t begin, end;
  int64_t fresh_j;  // position len − 1 when the op appends (read from k_new / v_new), else -1
};

// The length lives on the device: clamp it, never trust it (a host backend would raise). The
// appended position len − 1 is read from the new rows, never from the cache, so no block waits
// for another's write; kv_append's rule for a length that does not fit: write nothing.
__device__ inline DecodeKeys decode_keys(const int32_t* seq_lens, const DecodeShape& sh, const DecodeBlock& blk,
                                         bool appends_op) {
  const int64_t raw_len = seq_lens[blk.b];
  DecodeKeys keys;
  keys.len = sh.rolling ? max(raw_len, int64_t(1)) : min(max(raw_len, int64_t(1)), sh.S);
  keys.first = sh.window > 0 ? max(keys.len - sh.window, int64_t(0)) : int64_t(0);
  keys.begin = keys.first + int64_t(blk.split) * sh.chunk;
  keys.end = min(keys.len, keys.begin + sh.chunk);
  keys.fresh_j = appends_op && raw_len >= 1 && (sh.rolling || raw_len <= sh.S) ? keys.len - 1 : -1;
  return keys;
}

// attention_decode's qk_norm in the tensor-core kernel's variant that applies it (weights of its T;
// the other variant ignores them). A row's scale is rms_norm's, x·rstd·w with rstd = 1 / √(mean(x²)
// + eps).
template <class T>
struct QkNormWeights {
  const T* q = nullptr;  // [H·D] (whole) or [D]
  const T* k = nullptr;  // [Hkv·D] or [D]
  float eps = 0.0f;
  bool whole = false;
};

// One row's normalisation: its weights (from the row's first element) and rstd.
template <class T>
struct RowNorm {
  const T* w = nullptr;
  float rstd = 1.0f;
};

// A 16-bit row of D elements from `in` into `out` (the same row, or another) as the op's parts
// would leave it: normalised where Norm (rounded to T, as rms_norm's output), then its
// first R pairs rotated with the block's table cs[i] = (f·cos, f·sin) (rotary.cuh) and rounded
// again. Thread t of `threads` from first_thread takes pairs t, t + threads, … and the elements
// past R likewise, so no element is read after another thread wrote it. Norm is known when
// compiling: a kernel without a norm keeps the rotation's code alone.
template <bool Norm, class T>
__device__ inline void norm_rotate_row(T* out, const T* in, int D, const Rotary& rot, const float2* cs,
                                       const RowNorm<T>& norm, int first_thread, int threads) {
  const int t0 = int(threadIdx.x) - first_thread;
  if (t0 < 0 || t0 >= threads) return;
  auto normed = [&](int64_t e) {
    const float x = to_float(in[e]);
    if constexpr (Norm) return to_float(from_float<T>(x * norm.rstd * to_float(norm.w[e])));
    return x;
  };
  for (int i = t0; i < rot.R / 2; i += threads) {
    const int64_t a = rot.first(i), b = rot.second(i);
    const float x = normed(a), y = normed(b);
    out[a] = from_float<T>(x * cs[i].x - y * cs[i].y);
    out[b] = from_float<T>(x * cs[i].y + y * cs[i].x);
  }
  if (Norm || out != in)
    for (int d = int(rot.R) + t0; d < D; d += threads) out[d] = Norm ? from_float<T>(normed(d)) : in[d];
}

// The split holding the new position stores it (the first head block of the kv head): whole
// 16-byte pieces, as the fused path requires 16-byte rows; the key normalised and rotated when
// the op asks (norm_rotate_row; cs: the block's rope table).
template <bool Norm = false, class KV>
__device__ inline void store_fresh(const NewKv<KV>& fresh, const DecodeShape& sh, const DecodeBlock& blk,
                                   const DecodeKeys& keys, Strides3 ks, Strides3 vs, KV* k_cache, KV* v_cache,
                                   const Rotary& rot = {}, const float2* cs = nullptr, const RowNorm<KV>& norm = {}) {
  const bool stores = keys.fresh_j >= keys.begin && keys.fresh_j < keys.end && blk.hb == 0;  // uniform
  if (!stores) return;
  const int64_t slot = keys.fresh_j % sh.S;
  KV* k_row = k_cache + blk.b * ks.b + blk.kv_head * ks.h + slot * ks.t;
  KV* v_row = v_cache + blk.b * vs.b + blk.kv_head * vs.h + slot * vs.t;
  const KV* k_in = fresh.k + blk.b * fresh.k_b + blk.kv_head * fresh.k_h;
  const KV* v_in = fresh.v + blk.b * fresh.v_b + blk.kv_head * fresh.v_h;
  // A transformed key goes straight from k_new into the cache: the finished row, no read of a
  // half-written one.
  const bool transformed = Norm || rot.R > 0;
  if (transformed) norm_rotate_row<Norm>(k_row, k_in, sh.D, rot, cs, norm, 0, kDecodeThreads);
  for (int i = int(threadIdx.x); i < sh.D * int(sizeof(KV)) / 16; i += kDecodeThreads) {
    if (!transformed) reinterpret_cast<uint4*>(k_row)[i] = reinterpret_cast<const uint4*>(k_in)[i];
    reinterpret_cast<uint4*>(v_row)[i] = reinterpret_cast<const uint4*>(v_in)[i];
  }
}

// rms_norm's rstd = 1 / √(mean(x²) + eps) of one 16-bit row of n elements (16-byte aligned, n a
// multiple of 8) in global memory, by one warp, the loads of up to 2048 elements in flight at once.
template <class T>
__device__ inline float row_rstd(const T* row, int n, float eps) {
  constexpr int kBatch = 8;  // 16-byte loads per lane in flight
  const int lane = int(threadIdx.x) % 32, vectors = n / 8;
  float squares = 0.0f;
  for (int v0 = lane; v0 < vectors; v0 += 32 * kBatch) {
    Pack<T, 8> x[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (v0 + 32 * u < vectors) x[u] = *reinterpret_cast<const Pack<T, 8>*>(row + 8 * (v0 + 32 * u));
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (v0 + 32 * u < vectors) {
        float f[8];
        widen(x[u], f);
#pragma unroll
        for (int c = 0; c < 8; ++c) squares = fmaf(f[c], f[c], squares);
      }
  }
  return 1.0f / sqrtf(warp_sum(squares) / float(n) + eps);
}

// The same of a row staged in shared memory (a head of q), by one warp.
template <class T>
__device__ inline float staged_row_rstd(const T* row, int n, float eps) {
  float squares = 0.0f;
  for (int e = int(threadIdx.x) % 32; e < n; e += 32) squares = fmaf(to_float(row[e]), to_float(row[e]), squares);
  return 1.0f / sqrtf(warp_sum(squares) / float(n) + eps);
}

// The block's kWarps warps have published their online-softmax states in shared memory, per warp w and
// head g of the block: m at red_m[w·rows + g], l at red_l[w·rows + g], acc row at
// red_acc[(w·rows + g)·acc_ld]. Each output element combines the warps' states in warp order and
// becomes the output (one split) or the split's partial state.
// With `in_cluster` (sh.cluster_merge) the split's state goes to this block's shared memory
// instead, laid out as merge_in_cluster reads it: m [rows], l [rows], acc [rows][D].
template <int kWarps>
__device__ inline void store_block_state(const float* red_m, const float* red_l, const float* red_acc, int rows,
                                         int acc_ld, Operand out, Partials part, const DecodeShape& sh,
                                         const DecodeBlock& blk, float* in_cluster = nullptr) {
  for (int t = threadIdx.x; t < blk.heads * sh.D; t += kDecodeThreads) {
    const int g = t / sh.D, d = t % sh.D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w * rows + g]);
    float l_all = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp_from(red_m[w * rows + g], m_all);  // 0 for a warp that saw no key
      l_all += wt * red_l[w * rows + g];
      o += wt * red_acc[(w * rows + g) * acc_ld + d];
    }
    if (sh.splits == 1) {
      with_element_type(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        static_cast<T*>(out.data)[out.at.at(blk.b, 0, blk.h0 + g) + d] = from_float<T>(o * (1.0f / l_all));
      });
    } else if (in_cluster != nullptr) {
      in_cluster[2 * rows + g * sh.D + d] = o;
      if (d == 0) in_cluster[g] = m_all, in_cluster[rows + g] = l_all;
    } else {
      const int64_t state = (blk.b * sh.H + blk.h0 + g) * sh.splits + blk.split;
      part.acc[state * sh.D + d] = o;
      if (d == 0) part.m[state] = m_all, part.l[state] = l_all;
    }
  }
}

// Several splits: arrive at the group's ticket; the block that arrives last merges the splits
// that have keys into the output and leaves the ticket at 0 for the next call.
//
// merge_space: shared memory for kMergeFloatsPerBlock floats that nothing else uses from here on.
// kQuadRows: D is known to be a multiple of 4 (the tensor-core kernel's 64 or 128), so only the
// merge by quads is compiled: the kernel's code is fetched once a layer, and its size shows in a
// decode step's instruction-fetch stalls (docs/PERFORMANCE.md, issues 20 and 22).
constexpr int kMergeFloatsPerBlock = 6 * kDecodeThreads;

[[maybe_unused]] constexpr int kMaxMergeCluster = 8;  // a portable cluster (HIP has none)

#if defined(DING_GPU_NVIDIA_MMA)  // the tensor-core kernel's, which alone merges in a cluster
// A float of the cluster's block `rank` at the address `local` has in this block (NVIDIA sm_90+).
__device__ inline float cluster_load(const float* local, unsigned rank) {
#if defined(DING_GPU_SM90_CODE)
  const uint32_t here = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t there;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(there) : "r"(here), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(there) : "memory");
  return v;
#else
  (void)local, (void)rank;
  return 0.0f;
#endif
}

// Several splits as one cluster (sh.cluster_merge: a group's splits are consecutive blocks, one
// head block per kv head): after the cluster's barrier each split's block merges its share of the
// group's heads × D outputs from the states the splits left in their shared memory (`state`,
// store_block_state's layout for `rows` heads), in split order, as store_block_state combines
// warps; a second barrier keeps every block's state in place until all have read it. No
// partials in memory, no fence, no ticket; the merge is spread over the group's blocks. Every
// thread of every block of the cluster calls it.
// A thread loads every split's m, l and acc element once, all before the first use: remote loads
// of a loop that used each as it came would wait out one round trip after another.
__device__ void merge_in_cluster(Operand out, const DecodeShape& sh, const DecodeBlock& blk, const DecodeKeys& keys,
                                 const float* state, int rows) {
  cluster_sync();  // every split's state is in its block
  const int used = int((keys.len - keys.first + sh.chunk - 1) / sh.chunk);  // splits with keys
  const int n = blk.heads * sh.D, share = (n + sh.splits - 1) / sh.splits;
  const int first = blk.split * share, last = min(n, first + share);
  for (int t = first + int(threadIdx.x); t < last; t += kDecodeThreads) {
    const int g = t / sh.D, d = t % sh.D;
    float m[kMaxMergeCluster], l[kMaxMergeCluster], acc[kMaxMergeCluster];
#pragma unroll
    for (int s = 0; s < kMaxMergeCluster; ++s)
      if (s < used) {
        m[s] = cluster_load(state + g, unsigned(s));
        l[s] = cluster_load(state + rows + g, unsigned(s));
        acc[s] = cluster_load(state + 2 * rows + g * sh.D + d, unsigned(s));
      }
    float m_all = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxMergeCluster; ++s)
      if (s < used) m_all = fmaxf(m_all, m[s]);
    float l_all = 0.0f, o = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxMergeCluster; ++s)
      if (s < used) {
        const float wt = exp_from(m[s], m_all);
        l_all += wt * l[s];
        o += wt * acc[s];
      }
    with_element_type(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      static_cast<T*>(out.data)[out.at.at(blk.b, 0, blk.h0 + g) + d] = from_float<T>(o * (1.0f / l_all));
    });
  }
  cluster_sync();  // no block leaves while another reads its state
}
#endif  // DING_GPU_NVIDIA_MMA

template <int kMergeBatch, bool kQuadRows = false>
__device__ void merge_if_last(Operand out, Partials part, const DecodeShape& sh, const DecodeBlock& blk,
                              const DecodeKeys& keys, float* merge_space) {
  float* const merge_m = merge_space;
  float* const merge_l = merge_m + kDecodeThreads;
  float(*const merge_o)[4] = reinterpret_cast<float(*)[4]>(merge_l + kDecodeThreads);
  if (!arrive_last(&decode_tickets[blk.group_id], unsigned(sh.splits))) return;

  // Splits 0 .. used - 1 have keys; the others (past the sequence's end) wrote nothing.
  const int used = int((keys.len - keys.first + sh.chunk - 1) / sh.chunk);
  if constexpr (!kQuadRows) {
    if (sh.D % 4 != 0) {
      merge_splits<1, kMergeBatch>(out, part, sh, blk.b, blk.h0, blk.heads, used, merge_m, merge_l, merge_o);
      return;
    }
  }
  merge_splits<4, kMergeBatch>(out, part, sh, blk.b, blk.h0, blk.heads, used, merge_m, merge_l, merge_o);
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

  const DecodeBlock blk = decode_block(sh);
  const int64_t b = blk.b, h0 = blk.h0;
  const int heads = blk.heads;
  const int D = sh.D;
  const int lanes = sh.lanes;
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int key_lane = lane % lanes, e0 = 8 * key_lane;
  const int groups_per_warp = warp_size() / lanes;
  const int key_group = warp * groups_per_warp + lane / lanes, key_groups = kWarps * groups_per_warp;
  const KV* k_head = k + b * ks.b + blk.kv_head * ks.h + e0;
  const KV* v_head = v + b * vs.b + blk.kv_head * vs.h + e0;

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
  const DecodeKeys keys = decode_keys(seq_lens, sh, blk, fresh.k != nullptr);
  const int64_t begin = keys.begin, end = keys.end, fresh_j = keys.fresh_j;
  const KV* k_fresh = fresh_j >= 0 ? fresh.k + b * fresh.k_b + blk.kv_head * fresh.k_h + e0 : nullptr;
  const KV* v_fresh = fresh_j >= 0 ? fresh.v + b * fresh.v_b + blk.kv_head * fresh.v_h + e0 : nullptr;
  const KeySlots slot(sh.S, begin);

  if (begin < end) {  // uniform over the block; split 0 always has keys
    store_fresh(fresh, sh, blk, keys, ks, vs, k_cache, v_cache);
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
          kx[u] = load_slice8(j == fresh_j ? k_fresh : k_head + slot(j) * ks.t, e0, D, kv_vec);
          vx[u] = load_slice8(j == fresh_j ? v_fresh : v_head + slot(j) * vs.t, e0, D, kv_vec);
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
    store_block_state<kWarps>(&red_m[0][0], &red_l[0][0], &red_acc[0][0][0], HPB, 8 * kDecodeMaxLanes, out, part, sh,
                              blk);
  }
  if (sh.splits > 1) {
    __shared__ float4 merge_space[kMergeFloatsPerBlock / 4];
    merge_if_last<DecodeConfig<KV, HPB>::kMergeBatch>(out, part, sh, blk, keys, &merge_space[0].x);
  }
}

// ---- the tensor-core kernel (see the top of the file) --------------------------------------------
constexpr int kMmaKeys = 64;  // keys per K/V tile: 16 per warp
constexpr int kMmaRows = 16;  // query heads per block: the rows of an m16 tile
// The merge's read per group (kMergeFloats for the SIMT kernel): half, since this kernel's splits
// stream faster and the merge is a larger share of the launch. Swept on the H100 (ding-bench ops,
// S = 4096, a forced split count): the GQA group of 4 at D = 128 took 0.0178 ms at 32 splits (the
// SIMT kernel's cap), 0.0136 at 16, 0.0158 at 8 and 24; gpt2-xl's heads (25 × 64, 13 splits by
// the occupancy rule, well under either cap) 0.0179-0.0189 ms anywhere from 8 to 16.
[[maybe_unused]] constexpr int64_t kMmaMergeFloats = kMergeFloats / 2;  // unused where mma.sync is not compiled (AMD)

// D = 64: three stages (57.6 KB) and three blocks per SM; D = 128: two stages (74 KB), also three
// blocks per SM on an H100 (228 KB) and one on an RTX 4090 (100 KB), where three stages would not
// fit a block. Either way two to three 64-key tiles per block are in flight while one is consumed.
template <int DH>
struct DecodeMmaTile {
  static constexpr int kPitch = DH + 8;  // rows padded by 16 bytes: ldmatrix's 8 rows hit 8 bank groups
  static constexpr int kStages = DH == 64 ? 3 : 2;
  static constexpr int kBlocksPerSm = 3;
  static constexpr int kTileElems = kMmaKeys * kPitch;
  static constexpr int kQElems = kMmaRows * kPitch;
  // After the walk the ring holds the warps' states: m, l and an acc row per (warp, head), rows
  // padded by 4 floats so the 8 rows a warp stores at once spread over the banks.
  static constexpr int kStateLd = DH + 4;
  static constexpr size_t kStateBytes = sizeof(float) * size_t(kDecodeThreads / 32) * kMmaRows * (kStateLd + 2);
  static constexpr size_t kRingBytes = sizeof(uint16_t) * size_t(kStages) * 2 * kTileElems;
  // The split's state for a merge in the cluster: m and l of each head, then its acc row.
  static constexpr size_t kClusterStateBytes = sizeof(float) * size_t(kMmaRows) * (DH + 2);
  static_assert(kRingBytes >= kStateBytes + kClusterStateBytes && kRingBytes >= sizeof(float) * kMergeFloatsPerBlock,
                "the ring holds the warps' states and the split's, then the merge's staging");
  static constexpr size_t shared_bytes = sizeof(uint16_t) * size_t(kQElems) + kRingBytes;
};

// A block's copies of its split's K/V tiles into the ring, tile t into stage t % kStages. Rows
// past the split's end are zero-filled (nothing read): a cache row there may hold anything, NaN
// included. A thread copies chunk `c` of rows r + kRowsPerPass·i of every tile: its sources are
// formed once, and a copy costs an offset, a bounds test, the fresh-row test and the test for the
// keys from `wrap` on, which a rolling cache holds S slots back (KeySlots).
template <class T, int DH>
struct DecodeTileCopies {
  using Tile = DecodeMmaTile<DH>;
  static constexpr int kChunks = DH / 8, kRowsPerPass = kDecodeThreads / kChunks, kPasses = kMmaKeys / kRowsPerPass;
  static constexpr uint32_t kStageBytes = 2 * Tile::kTileElems * sizeof(T), kVBytes = Tile::kTileElems * sizeof(T);
  // Every row; every row but the newest (before the chained-launch wait, where only the newest
  // may come from the kernel before); the newest alone (after it, in a tile copied before).
  enum class Rows { all, settled, newest };

  int split_keys = 0;  // keys from the split's first one, in 32 bits (≤ S < 2^31)
  int newest = -1;     // the token's own key: k_new's row, or the one appended just before
  int fresh = -1;      // the newest where it comes from k_new
  int tiles = 0;
  int wrap = 0;
  const T *k_first = nullptr, *v_first = nullptr, *k_fresh = nullptr, *v_fresh = nullptr;
  uint32_t ring_first = 0;

  DecodeTileCopies() = default;
  __device__ DecodeTileCopies(const DecodeKeys& keys, const DecodeShape& sh, const DecodeBlock& blk, const T* k,
                              Strides3 ks, const T* v, Strides3 vs, const NewKv<T>& fresh_kv, T* ring)
      : split_keys(int(keys.end - keys.begin)), newest(int(keys.len - 1 - keys.begin)),
        fresh(keys.fresh_j >= keys.begin ? int(keys.fresh_j - keys.begin) : -1),
        tiles((split_keys + kMmaKeys - 1) / kMmaKeys) {
    const int c = (int(threadIdx.x) % kChunks) * 8, r = int(threadIdx.x) / kChunks;
    const KeySlots slot(sh.S, keys.begin);
    wrap = int(min(sh.S - slot.first_slot, int64_t(split_keys)));
    k_first = k + blk.b * ks.b + blk.kv_head * ks.h + (slot.first_slot + r) * ks.t + c;
    v_first = v + blk.b * vs.b + blk.kv_head * vs.h + (slot.first_slot + r) * vs.t + c;
    k_fresh = keys.fresh_j >= 0 ? fresh_kv.k + blk.b * fresh_kv.k_b + blk.kv_head * fresh_kv.k_h + c : k;
    v_fresh = keys.fresh_j >= 0 ? fresh_kv.v + blk.b * fresh_kv.v_b + blk.kv_head * fresh_kv.v_h + c : v;
    ring_first = smem_address(ring + r * Tile::kPitch + c);
  }

  // The cache's length and row strides, and an address for the zero-fills (`any`), come with each
  // call from the kernel's parameters: members held in registers across the walk would spill in
  // the q/k-norm variants, which are at the register cap.
  __device__ void copy(int t, Rows which, int64_t S, Strides3 ks, Strides3 vs, const T* any) const {
    if (t >= tiles) return;
    const int r = int(threadIdx.x) / kChunks;
    const uint32_t dst = ring_first + uint32_t(t % Tile::kStages) * kStageBytes;
#pragma unroll 4
    for (int i = 0; i < kPasses; ++i) {
      const int key = t * kMmaKeys + i * kRowsPerPass + r;
      if (which != Rows::all && (key == newest) != (which == Rows::newest)) continue;
      const bool in = key < split_keys, is_fresh = key == fresh;
      const int64_t row = int64_t(key - r) - (key >= wrap ? S : 0);
      const T* const k_src = is_fresh ? k_fresh : in ? k_first + row * ks.t : any;
      const T* const v_src = is_fresh ? v_fresh : in ? v_first + row * vs.t : any;
      const uint32_t at = dst + uint32_t(i * kRowsPerPass * Tile::kPitch * int(sizeof(T)));
      cp_async_16(at, k_src, in ? 16 : 0);
      cp_async_16(at + kVBytes, v_src, in ? 16 : 0);
    }
  }
};

// Norm: the op's qk_norm is given (nw), a variant of its own so that the kernels without one keep
// their code size and registers: inlined into the one kernel, the norm's code (never run there)
// cost Llama-8B's decode step 2–3 % (docs/PERFORMANCE.md; which of the two was not separated).
template <class T, int DH, bool Norm>
__global__ void __launch_bounds__(kDecodeThreads, launch_min_blocks(kDecodeThreads, DecodeMmaTile<DH>::kBlocksPerSm))
    attention_decode_mma_kernel(Operand out, const T* q, Strides3 qs, const T* k, Strides3 ks, const T* v, Strides3 vs,
                                const int32_t* seq_lens, DecodeShape sh, float scale, Partials part, NewKv<T> fresh,
                                T* k_cache, T* v_cache, Rotary rot, QkNormWeights<T> nw) {
#if defined(DING_GPU_NVIDIA_MMA)
  using Tile = DecodeMmaTile<DH>;
  constexpr int kPitch = Tile::kPitch, kStages = Tile::kStages, kTileElems = Tile::kTileElems;
  constexpr int kSteps = DH / 16, kChunks = DH / 8;
  constexpr int kWarps = kDecodeThreads / 32;
  extern __shared__ uint4 decode_shared[];
  T* const Qs = reinterpret_cast<T*>(decode_shared);  // [16][kPitch]: the block's heads, zero past them
  T* const ring = Qs + Tile::kQElems;                  // per stage: K [64][kPitch], then V [64][kPitch]
  // The split's state for merge_in_cluster, in the ring past the warps' states.
  float* const cluster_state = reinterpret_cast<float*>(reinterpret_cast<char*>(ring) + Tile::kStateBytes);

  const DecodeBlock blk = decode_block(sh);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int quad_row = lane / 4, quad_col = lane % 4;  // accumulator rows quad_row, quad_row + 8

  // qk_norm's weights of the block's heads (constants of the model) on their way to L1 before the
  // wait: they are read where q and the new key are normalised, on the block's critical path.
  const T* const q_norm_w = Norm ? nw.q + (nw.whole ? blk.h0 * sh.D : 0) : nullptr;
  const T* const k_norm_w = Norm ? nw.k + (nw.whole ? blk.kv_head * sh.D : 0) : nullptr;
  if constexpr (Norm) {
    const int q_lines = ((nw.whole ? blk.heads : 1) * DH * int(sizeof(T)) + 127) / 128;
    const int k_lines = (DH * int(sizeof(T)) + 127) / 128;
    const int i = int(threadIdx.x);
    if (i < q_lines) prefetch_to_l1(reinterpret_cast<const char*>(q_norm_w) + 128 * i);
    else if (i < q_lines + k_lines) prefetch_to_l1(reinterpret_cast<const char*>(k_norm_w) + 128 * (i - q_lines));
  }

  // q and k_new come from the kernel before. seq_lens and the cache's rows but the newest come
  // from earlier ones where sh.settled: the split's keys, the rope table at the new position and
  // the first tiles' copies (below) then go before the wait, over the previous kernel's tail.
  DecodeKeys keys{};
  if (sh.settled) keys = decode_keys(seq_lens, sh, blk, fresh.k != nullptr);
  __shared__ float2 rope_cs[64];  // the rope table at the new token's position (D ≤ 128: ≤ 64 pairs)
  __shared__ float rstd_s[2];     // qk_norm from global rows: q's whole projection's [0], k_new's row [1]
  const bool transforms = Norm || rot.R > 0;  // q and the new key are normalised and/or rotated
  auto rope_table = [&] {
    for (int i = threadIdx.x; i < rot.R / 2; i += kDecodeThreads) rope_cs[i] = rot.cos_sin(double(keys.len - 1), i);
  };
  if (sh.settled && keys.begin < keys.end) rope_table();

  // Copies in commit groups of whole K/V tiles: tile t + kStages - 1 goes out while tile t is
  // computed on, one group per call (empty past the last tile) so that "tile t has landed" is
  // always "at most kStages - 1 younger groups in flight".
  DecodeTileCopies<T, DH> tiles_in;
  if (sh.settled) tiles_in = DecodeTileCopies<T, DH>(keys, sh, blk, k, ks, v, vs, fresh, ring);
  auto copy_kv = [&](int t) {
    tiles_in.copy(t, DecodeTileCopies<T, DH>::Rows::all, sh.S, ks, vs, k);
    cp_async_commit();
  };
  if (sh.settled && keys.begin < keys.end)
    for (int t = 0; t < kStages - 1; ++t) {
      tiles_in.copy(t, DecodeTileCopies<T, DH>::Rows::settled, sh.S, ks, vs, k);
      cp_async_commit();
    }

  wait_for_prior_kernels();
  release_dependents();
  if (!sh.settled) {
    keys = decode_keys(seq_lens, sh, blk, fresh.k != nullptr);
    tiles_in = DecodeTileCopies<T, DH>(keys, sh, blk, k, ks, v, vs, fresh, ring);
  }

  if (keys.begin < keys.end) {  // uniform over the block; split 0 always has keys
    // The rope table and qk_norm's statistics of the rows read from global memory (warp 0: q's
    // whole projection; warp 1: the new key's row, where the split holds it), then the new row's
    // store, before the block's copies (the copies first measured the same, docs/PERFORMANCE.md).
    // A head's own statistic comes from its staged row, below.
    const bool fresh_here = keys.fresh_j >= keys.begin && keys.fresh_j < keys.end;  // uniform
    if (transforms) {
      if (!sh.settled) rope_table();
      if (Norm && nw.whole && warp == 0) {
        const float r = row_rstd(q + blk.b * qs.b, int(sh.H) * DH, nw.eps);
        if (lane == 0) rstd_s[0] = r;
      }
      if (Norm && fresh_here && warp == 1) {
        const T* const row = fresh.k + blk.b * fresh.k_b + (nw.whole ? 0 : blk.kv_head * fresh.k_h);
        const float r = row_rstd(row, (nw.whole ? int(sh.Hkv) : 1) * DH, nw.eps);
        if (lane == 0) rstd_s[1] = r;
      }
      __syncthreads();
    }
    const RowNorm<T> k_norm{k_norm_w, Norm && fresh_here ? rstd_s[1] : 1.0f};
    store_fresh<Norm>(fresh, sh, blk, keys, ks, vs, k_cache, v_cache, rot, rope_cs, k_norm);
    const int split_keys = tiles_in.split_keys, fresh_key = tiles_in.fresh, tiles = tiles_in.tiles;

    // Q (with the newest rows of the tiles copied before the wait) as one group: first where the
    // tiles come after it, last where they went before it.
    for (int idx = threadIdx.x; idx < kMmaRows * kChunks; idx += kDecodeThreads) {
      const int g = idx / kChunks, c = (idx % kChunks) * 8;
      const bool in = g < blk.heads;
      cp_async_16(smem_address(Qs + g * kPitch + c), in ? q + blk.b * qs.b + (blk.h0 + g) * qs.h + c : q, in ? 16 : 0);
    }
    if (sh.settled)
      for (int t = 0; t < kStages - 1; ++t) tiles_in.copy(t, DecodeTileCopies<T, DH>::Rows::newest, sh.S, ks, vs, k);
    cp_async_commit();
    if (!sh.settled)
      for (int t = 0; t < kStages - 1; ++t) copy_kv(t);
    // Q has landed for this thread's copies (the oldest group, or the youngest: then the tiles
    // before it too, whose copies went out before the wait) ...
    if (sh.settled)
      cp_async_wait<0>();
    else
      cp_async_wait<kStages - 1>();
    __syncthreads();  // ... and for every thread's
    if (transforms) {  // the block's heads normalised and rotated in place: a warp per head
      for (int g = warp; g < blk.heads; g += kWarps) {
        RowNorm<T> q_norm;
        if constexpr (Norm) {
          q_norm.w = q_norm_w + (nw.whole ? g * DH : 0);
          q_norm.rstd = nw.whole ? rstd_s[0] : staged_row_rstd(Qs + g * kPitch, DH, nw.eps);
          __syncwarp();  // every lane has read the row before any rewrites it
        }
        norm_rotate_row<Norm>(Qs + g * kPitch, Qs + g * kPitch, DH, rot, rope_cs, q_norm, warp * 32, 32);
      }
      __syncthreads();
    }
    uint32_t qa[kSteps][4];
    load_a_fragments(qa, Qs, kPitch, lane);

    float o[DH / 8][4];
#pragma unroll
    for (int nt = 0; nt < DH / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f};

    int read_stage = 0;
    for (int t = 0; t < tiles; ++t) {
      if (t > 0) __syncthreads();  // every warp is done with tile t - 1, whose stage is refilled now
      copy_kv(t + kStages - 1);
      cp_async_wait<kStages - 1>();  // tile t has landed for this thread's copies ...
      __syncthreads();                // ... and for every thread's
      if (transforms && fresh_key >= t * kMmaKeys && fresh_key < (t + 1) * kMmaKeys) {  // uniform
        // The new key came as k_new holds it: normalise and rotate its row of the tile before
        // anyone reads it.
        T* const row = ring + read_stage * 2 * kTileElems + (fresh_key - t * kMmaKeys) * kPitch;
        norm_rotate_row<Norm>(row, row, DH, rot, rope_cs, k_norm, 0, kDecodeThreads);
        __syncthreads();
      }
      const T* const Ks = ring + read_stage * 2 * kTileElems + warp * 16 * kPitch;  // this warp's 16 keys
      const T* const Vs = Ks + kTileElems;
      read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;

      // S = Q·Kᵀ: n-tile 0 is keys +0 … 7, n-tile 1 keys +8 … 15.
      float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      add_scores16<T, kSteps>(s[0], s[1], qa, Ks, kPitch, lane);

      // Online softmax; element e of n-tile nt is row quad_row + 8·(e / 2), key 8·nt + 2·quad_col
      // + e % 2 of the warp's 16. Only a split's last tile has keys past its end (a warp-uniform
      // test), so the mask costs the others nothing.
      const int warp_keys = split_keys - (t * kMmaKeys + warp * 16);
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool visible = warp_keys >= 16 || nt * 8 + 2 * quad_col + e % 2 < warp_keys;
          s[nt][e] = visible ? s[nt][e] * scale : -INFINITY;
          tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
        }
      bool grew = false;  // some row's running max rose: its l and O are rescaled
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 2));
        grew |= tile_max[r] > m_run[r];
      }
      // Once the running max has settled, tiles rarely raise it: the rescale of the D/8 × 4
      // accumulators is skipped for the whole warp unless a row's max rose (e^0 = 1 exactly, so
      // the skip changes no bit).
      if (ballot(grew) != 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_new = fmaxf(m_run[r], tile_max[r]);
          const float alpha = exp_from_fast(m_run[r], m_new);
          m_run[r] = m_new;
          l_part[r] *= alpha;
#pragma unroll
          for (int nt = 0; nt < DH / 8; ++nt) o[nt][2 * r] *= alpha, o[nt][2 * r + 1] *= alpha;
        }
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = exp_from_fast(s[nt][e], m_run[e / 2]);
          l_part[e / 2] += s[nt][e];
        }

      add_pv16<T, DH>(o, s[0], s[1], Vs, kPitch, lane);  // O += P·V over the warp's 16 keys
    }

    // The warps' states through shared memory (the ring is free once every warp is past its
    // last tile): a row's l is spread over its quad.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_part[r] += shfl_xor(l_part[r], 1);
      l_part[r] += shfl_xor(l_part[r], 2);
    }
    cp_async_wait<0>();  // only empty groups remain; nothing may land in the ring after this
    __syncthreads();
    float* const red_m = reinterpret_cast<float*>(ring);
    float* const red_l = red_m + kWarps * kMmaRows;
    float* const red_acc = red_l + kWarps * kMmaRows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * kMmaRows + quad_row + 8 * r;
      if (quad_col == 0) red_m[row] = m_run[r], red_l[row] = l_part[r];
#pragma unroll
      for (int nt = 0; nt < DH / 8; ++nt) {
        red_acc[row * Tile::kStateLd + nt * 8 + 2 * quad_col] = o[nt][2 * r];
        red_acc[row * Tile::kStateLd + nt * 8 + 2 * quad_col + 1] = o[nt][2 * r + 1];
      }
    }
    __syncthreads();
    store_block_state<kWarps>(red_m, red_l, red_acc, kMmaRows, Tile::kStateLd, out, part, sh, blk,
                              sh.cluster_merge ? cluster_state : nullptr);
  }
  // The merge's staging in the ring (free by then): the block's static shared memory stays a
  // few bytes, so that three blocks fit an H100 SM at D = 128.
  if (sh.splits > 1) {
    if (sh.cluster_merge)
      merge_in_cluster(out, sh, blk, keys, cluster_state, kMmaRows);
    else
      merge_if_last<8, true>(out, part, sh, blk, keys, reinterpret_cast<float*>(ring));
  }
#endif  // DING_GPU_NVIDIA_MMA
}

// Splits from shapes and the device only, never the lengths (they live on the device and grow
// between replays of a recorded step): enough blocks to fill every SM at the kernel's occupancy
// (`resident` blocks at once: no second wave's tail), fewer where the merge would read more than
// merge_floats per group — but never fewer than an eighth of the resident blocks: a lone group
// (MQA: one kv head, 16 heads per block) capped by its merge alone kept 4 blocks streaming the
// whole cache, which at 32k keys cost far more than the larger merge. The splits divide the most
// keys a query sees, S or a shorter window.
// Chunks are whole multiples of `keys_multiple` (a kernel's keys per step or tile), so every step
// of a full split is full.
void plan_splits(DecodeShape& sh, int64_t B, int64_t resident, int64_t keys_multiple, int64_t merge_floats) {
  const int64_t groups = B * sh.Hkv * sh.head_blocks;
  int64_t splits = groups > kTicketSlots ? 1 : std::max<int64_t>(1, resident / groups);
  const int64_t merge_cap = std::max(merge_floats / (int64_t(sh.heads) * sh.D), resident / (8 * groups));
  splits = std::min(splits, std::max<int64_t>(1, merge_cap));
  splits = std::min<int64_t>(splits, kMaxSplits);
  const int64_t span = sh.window > 0 ? std::min(sh.S, sh.window) : sh.S;
  sh.chunk = ceil_div(ceil_div(span, splits), keys_multiple) * keys_multiple;
  sh.splits = int(ceil_div(span, sh.chunk));  // no split starts past the span; never more than `splits`
}

// The partial states of sh.splits > 1 in the stream's scratch.
Partials partials(GpuStream& s, const DecodeShape& sh, int64_t B) {
  if (sh.splits == 1) return {nullptr, nullptr, nullptr};
  const int64_t states = B * sh.H * sh.splits;
  float* scratch = static_cast<float*>(s.scratch(sizeof(float) * size_t(states * (sh.D + 2))));
  return {scratch, scratch + states * sh.D, scratch + states * (sh.D + 1)};
}

template <class KV>
NewKv<KV> new_kv(const ops::AttentionDecodeArgs& a, bool fresh_in_kernel) {
  if (!fresh_in_kernel) return {};
  return {static_cast<const KV*>(a.k_new.data), static_cast<const KV*>(a.v_new.data), a.k_new.strides[0],
          a.k_new.strides[1], a.v_new.strides[0], a.v_new.strides[1]};
}

#if defined(DING_GPU_NVIDIA)
// Whether the tensor-core kernel's cluster merge can run here: a device with clusters (sm_90+) and
// the kernel's loaded code compiled for one. Asked once: a decode step without graphs calls this
// every layer.
bool cluster_merge_compiled(const Props& props) {
  static const bool compiled =
      kernel_compiled_for(reinterpret_cast<const void*>(attention_decode_mma_kernel<ding::bf16, 128, false>), 90);
  return props.has_chained_launch() && compiled;  // sm_90+: clusters and chained launches came together
}

// The tensor-core kernel for T = the q, k and v dtype, DH = D; false (nothing launched) where a
// block's shared memory does not fit this device.
template <class T, int DH>
bool launch_decode_mma(GpuStream& s, const ops::AttentionDecodeArgs& a, DecodeShape sh, float scale,
                       bool fresh_in_kernel) {
  QkNormWeights<T> nw;
  if (a.qk_norm)
    nw = {static_cast<const T*>(a.qk_norm->q_weight.data), static_cast<const T*>(a.qk_norm->k_weight.data),
          a.qk_norm->eps, a.qk_norm->whole};
  const size_t shared = DecodeMmaTile<DH>::shared_bytes;
  if (shared > s.props().shared_per_block_optin) return false;
  const Rotary rot = a.rope ? rotary(*a.rope, DH) : Rotary{};
  const auto kernel = a.qk_norm ? attention_decode_mma_kernel<T, DH, true> : attention_decode_mma_kernel<T, DH, false>;
  DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(shared)));
  int per_sm = 0;
  DING_GPU_CHECK(resident_blocks(&per_sm, kernel, kDecodeThreads, shared));
  const int64_t B = a.q.dim(0);
  plan_splits(sh, B, int64_t(std::max(per_sm, 1)) * s.props().sm_count, kMmaKeys, kMmaMergeFloats);
  const int64_t blocks = B * sh.Hkv * sh.head_blocks * sh.splits;
  // A group's splits are consecutive blocks where it has one head block: one cluster, if it fits one,
  // and if the grid is at most a block an SM. A cluster's blocks start together on SMs of one GPC, so
  // where more blocks than SMs queue, clusters wait for a GPC's SMs to free up where single blocks
  // take any SM: OLMoE-1B-7B at batch 8 (128 groups of several splits) stepped 3.4 % slower with
  // clusters; at batch 1 (16 groups) its attention was 13 % faster (H100, docs/PERFORMANCE.md).
  sh.cluster_merge = s.op_tuning().decode_cluster_merge && sh.head_blocks == 1 && sh.splits > 1 &&
                     sh.splits <= kMaxMergeCluster && blocks <= s.props().sm_count && cluster_merge_compiled(s.props());
  if (sh.splits > 1) s.note_form("attention_decode", sh.cluster_merge ? "splits merged in a cluster" : "splits merged by a ticket");
  T* const k = static_cast<T*>(a.k_cache.data);
  T* const v = static_cast<T*>(a.v_cache.data);
  const dim3 grid(static_cast<unsigned>(blocks));
  DING_GPU_CHECK(launch_chained_in_clusters(s.props().has_chained_launch(), sh.cluster_merge ? unsigned(sh.splits) : 0u,
                                kernel, grid, dim3(kDecodeThreads), shared, s.handle(),
                                operand(a.out, strides_bhd(a.out)), static_cast<const T*>(a.q.data), strides_bhd(a.q),
                                k, strides3(a.k_cache), v, strides3(a.v_cache),
                                static_cast<const int32_t*>(a.seq_lens.data), sh, scale, partials(s, sh, B),
                                new_kv<T>(a, fresh_in_kernel), k, v, rot, nw));
  return true;
}
#endif

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
#if defined(DING_GPU_NVIDIA)
  // Tensor cores: one 16-bit dtype for q, k and v, a bf16 output (the precision argument of
  // attention_prefill.cu), D = 64 or 128, 16-byte rows for the cp.async copies, the kernel's
  // shared memory within the device's.
  const DType t = a.q.dtype;
  const size_t mma_shared = D == 64 ? DecodeMmaTile<64>::shared_bytes : DecodeMmaTile<128>::shared_bytes;
  const bool mma = s.props().has_mma_sync() && (t == DType::f16 || t == DType::bf16) && a.k_cache.dtype == t &&
                   a.out.dtype == DType::bf16 && (D == 64 || D == 128) && kv_vec && rows_aligned(a.q, 8) &&
                   mma_shared <= s.props().shared_per_block_optin;
#else
  const bool mma = false;
#endif
  // qk_norm and rope in the tensor-core kernel where it appends (the norm's weights of q's dtype);
  // else normalised and rotated copies of q and k_new first (their ops' launches), in the
  // staged-input scratch.
  const bool transforms_in_kernel =
      mma && fresh_in_kernel &&
      (!a.qk_norm || (a.qk_norm->q_weight.dtype == a.q.dtype && a.qk_norm->k_weight.dtype == a.q.dtype));
  if ((a.qk_norm || a.rope) && !transforms_in_kernel) {
    char* copies = static_cast<char*>(s.scratch(a.q.nbytes() + a.k_new.nbytes() + 16, GpuStream::ScratchSlot::staged_input));
    const Tensor q_out = Tensor::view(copies, a.q.device, a.q.dtype, {B, H, D});
    const size_t k_at = (a.q.nbytes() + 15) / 16 * 16;
    const Tensor k_out = Tensor::view(copies + k_at, a.q.device, a.k_new.dtype, {B, Hkv, D});
    gpu::attention_decode(stream, ops::transformed_first(stream, a, q_out, k_out));
    return;
  }
  if (a.k_new.defined() && !fresh_in_kernel) launch_kv_append(s, ops::decode_append(a, a.seq_lens), -1);
  if (!flash) {
    launch_rows(s, out, q, a.k_cache, strides3(a.k_cache), a.v_cache, strides3(a.v_cache),
                RowShape{B, 1, S, H, group, int(D), false, seq_lens, a.params.window, S, ops::rolling_cache(a.params, S)},
                scale);
    return;
  }

  DecodeShape sh{};
  sh.H = H, sh.S = S, sh.Hkv = Hkv, sh.group = group, sh.D = int(D), sh.window = a.params.window;
  sh.rolling = ops::rolling_cache(a.params, S);
  // A kv_append launched just above writes only the newest row, which the kernel reads after its wait.
  sh.settled = a.cache_from_earlier_op && s.op_tuning().decode_early_tiles;
#if defined(DING_GPU_NVIDIA)
  // Up to 16 heads of a kv head's group per block (an m16 tile's rows); larger groups take
  // several blocks.
  if (mma) {
    DecodeShape mma_sh = sh;
    mma_sh.heads = int(std::min<int64_t>(group, kMmaRows));
    mma_sh.head_blocks = int(ceil_div(group, mma_sh.heads));
    const bool bf = t == DType::bf16;
    const bool launched =
        D == 64 ? (bf ? launch_decode_mma<ding::bf16, 64>(s, a, mma_sh, scale, fresh_in_kernel)
                      : launch_decode_mma<ding::f16, 64>(s, a, mma_sh, scale, fresh_in_kernel))
                : (bf ? launch_decode_mma<ding::bf16, 128>(s, a, mma_sh, scale, fresh_in_kernel)
                      : launch_decode_mma<ding::f16, 128>(s, a, mma_sh, scale, fresh_in_kernel));
    if (launched) return;
  }
#endif

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
      plan_splits(sh, B, int64_t(Config::kBlocksPerSm) * s.props().sm_count, kDecodeThreads / sh.lanes, kMergeFloats);
      DING_GPU_CHECK(launch_chained(chained, attention_decode_kernel<KV, HPB>,
                                    dim3(unsigned(B * Hkv * sh.head_blocks * sh.splits)), dim3(kDecodeThreads), 0,
                                    s.handle(), out, q, static_cast<const KV*>(a.k_cache.data), strides3(a.k_cache),
                                    static_cast<const KV*>(a.v_cache.data), strides3(a.v_cache), kv_vec, seq_lens, sh,
                                    scale, partials(s, sh, B), new_kv<KV>(a, fresh_in_kernel),
                                    static_cast<KV*>(a.k_cache.data), static_cast<KV*>(a.v_cache.data)));
    };
    switch (hpb) {
      case 4: launch(std::integral_constant<int, 4>{}); break;
      case 2: launch(std::integral_constant<int, 2>{}); break;
      default: launch(std::integral_constant<int, 1>{}); break;
    }
  });
}

DING_GPU_END
