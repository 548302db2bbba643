// mla_decode on the GPU (ops/mla.h), and mla_prefill chunks that the expanded form (at the end of
// this file) does not take, in the absorbed form: W_uk is folded into the query and W_uv applied
// to the attended latent, so attention reads the cache as stored, L + Dr elements per key for all
// heads together, and no per-head key or value is ever formed.
// Query rows are decode's sequences (row b) or prefill's queries (row b·Tq + i). Per pass of rows,
// three or four chained launches (vendor.h), each waiting for its predecessor before it reads:
//
//   absorb   grid (⌈L/32⌉, H, ⌈rows/R⌉), 256 threads. qa[r, h] = s · [W_ukᵀ q_nope ; q_rope] in f32
//            scratch [rows, H, L + Dr, zero-padded to a multiple of 64] (the scale folded in, as
//            attention does with q). A thread owns one latent l of R rows, so each W element it
//            loads (coalesced over l) feeds R FMAs; the block's 8 slices of 32 threads split the Dn
//            terms (added in slice order) and load 16 rows of W at once, so a decode step's few rows
//            still have all of W_uk in flight in about one round trip (each thread loads its first
//            16 terms into registers, and the block prefetches its columns past the first 128 terms
//            into L2, before it waits for the previous kernel). R = 8, or 1 for one or two rows (a
//            decode step of one or two sequences): at 48 registers two such blocks leave room in an
//            SM's register file for an attend block, which can then start its copies early; at R =
//            8 (104 registers) not one does. Blocks of one row for 8 rows measured slower (8 times
//            the loads of W), so only the smallest batches take them.
//            Decode with latent_new: the (l-chunk 0, head 0) blocks also store the token's row at
//            cache[b, seq_lens[b] − 1], which the attend kernel, launched after, reads from there.
//   attend   A block takes up to 16 heads of one row over its split's keys, in tiles of 32 keys
//            staged whole into shared memory, with an online softmax per head. Two kernels:
//            tensor cores (NVIDIA sm_80+; a bf16 or f16 cache of 16-byte rows, L % 64 == 0, L ≤
//            512, E % 16 == 0, E ≤ 640): grid (rows, head groups, splits), 8 consumer warps and
//            the producer warps. The heads are the 16 rows of m16n8k16 tiles (rows past the group's
//            are zero, never stored). The producers copy the tiles into a ring of 2 to 4 stages (as
//            many as the device's shared memory holds: 4 on an H100, 2 on an RTX 4090; fewer where
//            OpTuning asks), handing each over through an mbarrier (full: its copies have
//            landed; empty: every consumer warp is done with it); the first ring's worth before
//            waiting for the absorb kernel, whose run they overlap (rows but decode's newest were
//            written two or more kernels back). On sm_90 one producer warp issues a bulk copy per
//            row (the copy engine's, a lane per row); elsewhere, or where OpTuning asks, four
//            issue cp.async, one per SM sub-partition, each with its pieces' offsets worked out
//            once. A cp.async waits for room in the memory system's queues, at this kernel's
//            bandwidth most of a tile's time; only the producers wait there, so the consumers'
//            arithmetic overlaps the copies. Rows are padded to 16 mod 128 bytes, so the 8 rows of
//            an ldmatrix matrix hit 8 different bank groups. Per tile, between two barriers of the
//            consumers:
//              scores: warp w takes the 16-element k-steps [w·E/128, (w + 1)·E/128) (4 or 5 at
//                E = 576), its qa as A fragments in registers for the whole walk, and computes its
//                partial S[16 heads, 32 keys] from the key rows as stored (ldmatrix); the 8
//                partials are added in warp order through shared memory;
//              softmax: 16 threads per head, 2 keys each (accurate expf, attention.cuh), the max
//                across the 16 by shuffles, publishing the weights and the rescale
//                e^(m_old − m_new) in shared memory;
//              values: warp w owns latents [w·L/8, (w + 1)·L/8): O = alpha·O + P·C over the tile,
//                P's two 16-key k-steps as A fragments, C by ldmatrix.trans; tile t's values and
//                tile t + 1's scores share a barrier interval, so their mma chains interleave.
//            qa and P are f32 and enter the 16-bit mmas as sums of 3 bf16 or 2 f16 parts
//            (split_pair; kPParts, whose precision argument is in attention_prefill.cu), so the
//            scores and weights keep f32 accuracy; where q, the cache and W share the cache's
//            dtype and the output is 16-bit, each is rounded to it once instead (ops/mla.h allows
//            it: the same order of error as the inputs' own rounding), a third of the mmas. A
//            tile's P·C goes to fresh accumulators and joins O by an f32 FMA, since the tensor
//            cores' accumulation truncates (summed over every tile in them, O's error would grow
//            with the split's length).
//            SIMT (everything else): grid (rows, head groups, splits × ⌈L/512⌉), 128 threads. G ≤
//            16 heads (their qa in shared memory, copied with the first tile), tiles staged by
//            cp.async on NVIDIA sm_80+, batches of 16-byte loads elsewhere (a tile costs about one
//            round trip; rows padded to 64 mod 128 bytes, so the key groups of a half-warp hit
//            different banks):
//              scores: a group of 8 lanes scores 2 keys for all G heads, lane k taking elements
//                64c + 4k … + 3 and 64c + 32 + 4k … + 3 of chunk c, so a q load serves 8 FMAs and
//                a key load 4·G; the group's partial dots are added by 3 shuffles;
//              softmax: a warp per head (its running max and sum in the warp's registers) turns
//                the tile's scores into weights e^(s − m) in place (accurate expf, attention.cuh)
//                and publishes the rescale e^(m_old − m_new);
//              values: a thread owns 4 consecutive latents for all G heads (4·G accumulators in
//                registers), rescales them and adds p_t · c_t over the tile, p read as float4s of
//                4 keys (one broadcast load per 16 FMAs).
//            Latents past 512 take further blocks (grid z) that repeat the scores: no model has
//            them (DeepSeek-V2/V3: L = 512).
//            Either kernel, one split: the block writes o_lat = acc / sum [rows, H, L] itself.
//            Several: its unnormalised acc and, per head, (m, sum); a split past the row's keys
//            writes only the neutral state m = −inf, sum = 0.
//   merge and project, one launch (several splits, W_uv rows of whole 16-byte pieces: decode's
//            case, unless OpTuning::mla_fold_projection is off) grid (⌈L/64⌉, H, rows), 256
//            threads: the block merges its 64 latents of o_lat as the merge below does and
//            multiplies them into those 64 columns of W_uv for every output e; the head's last
//            chunk to arrive adds the chunks' parts in order (a ticket per row and head,
//            last_block.cuh). A launch less per step than merge, then project, and the projection's
//            W_uv loads overlap the merge's (timed in docs/PERFORMANCE.md).
//   merge    (several splits, otherwise) grid (⌈L/32⌉, H, rows), 256 threads: m* = max m_s, w_s = e^(m_s − m*)
//            and sum* = Σ w_s·sum_s by the block (thread s loads split s's state), then 32 latents ×
//            8 subsets of the splits, 16 splits' loads in flight per thread (the first 16 issued
//            with the states' loads; an acc with w_s = 0 is never used), the subsets added in a
//            fixed order: o_lat = Σ w_s·acc_s / sum*.
//   project  grid (value chunks, H, ⌈rows/4⌉), 256 threads: out[r, h, e] = W_uv[h, e] · o_lat[r, h]
//            for 4 rows at once (o_lat in shared memory), a warp per 4 outputs e: each W row is
//            read coalesced (16-byte pieces where L % 8 == 0) and feeds 4 rows, 4 rows in flight;
//            the block's W_uv rows are prefetched into L2, and each warp's first pieces into
//            registers, before it waits for the previous kernel.
//
// Why this shape: per key the absorbed form costs ≈ 2·H·(2L + Dr) FLOPs (scores and values) on
// 2·(L + Dr) bytes of a bf16 cache, ~30 FLOP/byte at V2-Lite's H = 16: more than an H100's FP32
// pipes meet at its bandwidth (~60 TFLOP/s against 3.35 TB/s), so the SIMT kernel is compute-bound
// at long context (~60 µs at 32k keys, where the cache's 37.7 MB take ~12.5 µs). On tensor cores
// the same work, with qa and P in three bf16 parts, is ~90 FLOP/byte of mma at H = 16, a third to
// a half of the tensor cores' peak per byte of bandwidth (H100: ~990 TFLOP/s against 3.35 TB/s; RTX
// 4090, f32 accumulation: ~165 against 1 TB/s); rounded once, ~30. In throughput the kernel is
// bound by the cache's bytes either way; in latency each tile's chains of dependent mmas (a k-step
// per part) sit between its barriers, so the parts cost time the copies do not hide.
// A block serves 16 heads so that each key is read once per 16 heads. The score k-steps are split
// over the warps because no warp could hold qa's A fragments for all of E (3 parts · E/16 · 4 =
// 432 registers at E = 576), the latents because O is 16·L f32 accumulators: the split scores
// cost a pass through shared memory per tile, the split latents each warp's read of the weights.
//
// Splits and head groups: decode sizes them from S, never from the lengths (they live on the
// device and grow between replays of a recorded step). Tensor cores: groups of up to 16 heads,
// spread evenly (a block costs the same for any number of them); splits so that rows × groups ×
// splits is one wave of blocks at the kernel's occupancy. SIMT: groups of up to 16 heads, halved
// (to 4 at least) while rows × groups × (the most splits, one per 64 keys) stays under the SM
// count; then splits enough for rows × groups × splits ≥ 2 × SMs. Either way a split is a
// multiple of the 32-key tile and at least 64 keys, at most 256 splits. Prefill runs one split per
// row; its blocks walk the causal band (i + Tk − Tq + 1 keys). Rows go in passes of ≤ 8192 / H,
// so the f32 scratch (qa, o_lat, the partial states) stays near 40 MB however long a prefill chunk
// is.
//
// Lengths: the host backends raise for seq_lens[b] outside [1, S]; here, as in attention_decode.cu,
// a length is clamped into [1, S] for attention, and latent_new is stored only where the length
// fits (kv_append's rule: write nothing). Nothing is read back to the host, so a decode step
// records into a graph.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "access.cuh"
#include "attention.cuh"
#include "attention_mma.cuh"
#include "check.h"
#include "cp_async.cuh"
#include "kernels.h"
#include "last_block.cuh"
#include "reduce.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {

using attn::Strides3;

constexpr int kAbsorbThreads = 256;
constexpr int kAbsorbLatents = 32;                              // latents per block: one per thread of a slice
constexpr int kAbsorbSlices = kAbsorbThreads / kAbsorbLatents;  // slices splitting the Dn terms
constexpr int kAbsorbRows = 8;                                  // rows per block: FMAs per W element
constexpr int kAbsorbChunk = 128;                               // q elements per row staged at a time
constexpr int kAbsorbBatch = 16;                                // W loads per thread in flight together
constexpr int64_t kAbsorbFewRows = 2;                           // up to this many rows: blocks of one row

constexpr int kAttendThreads = 128;
constexpr int kKeyLanes = 8;                                    // lanes scoring one key
constexpr int kChunkElems = 8 * kKeyLanes;                      // row elements per step of a key group
constexpr int kKeyGroups = kAttendThreads / kKeyLanes;
constexpr int kKeysPerGroup = 2;                                // keys per group and tile: q loads reused
constexpr int kTileKeys = kKeyGroups * kKeysPerGroup;
constexpr int kLatentsPerThread = 4;
constexpr int kLatentChunk = kAttendThreads * kLatentsPerThread;  // latents per attend block
constexpr int kMaxGroupHeads = 16;
constexpr int64_t kMinSplitKeys = 2 * kTileKeys;
constexpr int kMaxSplits = 256;
static_assert(kTileKeys <= 32 && kTileKeys % 4 == 0, "a tile's scores are one per lane of a warp, in float4s");

// The tensor-core attend kernel: the group's heads are the 16 rows of m16n8k16 tiles.
constexpr int kMmaThreads = 256;                                // the consumer warps
constexpr int kMmaWarps = kMmaThreads / 32;
// Copying warps: by cp.async one per SM sub-partition; by the copy engine's bulk copies (sm_90+),
// one, a lane per row of the tile.
constexpr int mma_producers(bool bulk) { return bulk ? 1 : 4; }
constexpr int mma_block_threads(bool bulk) { return kMmaThreads + 32 * mma_producers(bulk); }
constexpr int kMmaHeads = 16;
constexpr int kMmaKeys = 32;                                    // keys per tile: 4 score n-tiles, 2 P·C k-steps
constexpr int kMmaMaxStages = 4;                                // tiles in shared memory: one computed, the rest landing
constexpr int kMmaMaxSteps = 5;                                 // score k-steps per warp held as A fragments
constexpr int kMmaMaxLatentTiles = 8;                           // n-tiles of 8 latents per warp held as accumulators
constexpr int kMmaMaxElems = kMmaWarps * kMmaMaxSteps * 16;     // E ≤ 640
constexpr int kMmaMaxLatents = kMmaWarps * kMmaMaxLatentTiles * 8;  // L ≤ 512
// Partial scores and weights, [head][key] rows padded by 8 floats: the 8 rows of a quad-row
// float2 store or load start 8 banks apart, so 32 lanes take the minimum two wavefronts.
constexpr int kMmaScoreLd = kMmaKeys + 8;
constexpr int64_t kMmaMinSplitKeys = 2 * kMmaKeys;
static_assert(kMmaHeads * kMmaKeys / 2 == kMmaThreads && kMmaKeys == 32, "the softmax: 16 threads per head, 2 keys each");

constexpr int kMergeThreads = 256;
constexpr int kMergeLatents = 32;
constexpr int kMergeSubsets = kMergeThreads / kMergeLatents;
constexpr int kMergeBatch = 16;                                 // splits' loads per thread in flight together
static_assert(kMaxSplits <= kMergeThreads, "a merge thread holds at most one split's (m, sum)");
constexpr int kStageBatch = 8;                                  // staging loads per thread in flight together

constexpr int kProjectThreads = 256;
constexpr int kProjectRows = 4;                                 // rows per block: each W_uv row feeds 4
constexpr int kValuesPerWarp = 4;                               // W_uv rows per warp in flight together

constexpr int kFoldThreads = 256;                               // the merge and projection in one launch
constexpr int kFoldLatents = 64;                                // latents per block
constexpr int kFoldQuads = kFoldLatents / 4;                    // threads per subset of the splits: 4 latents each
constexpr int kFoldSubsets = kFoldThreads / kFoldQuads;
constexpr int kFoldBatch = 8;                                   // acc loads (16 bytes) per thread in flight together
constexpr int kFoldRowLanes = kFoldLatents / 8;                 // lanes per W_uv row: 8 columns each
constexpr int kFoldRowsPerPass = kFoldThreads / kFoldRowLanes;  // W_uv rows the block takes at once
constexpr int kFoldFirstRows = 4;                               // W_uv rows per lane loaded before the wait: Dv ≤ 128
static_assert(kMaxSplits <= kFoldThreads, "a thread holds at most one split's (m, sum)");
static_assert(kFoldRowLanes <= 32 && 32 % kFoldRowLanes == 0, "a W_uv row's lanes share a warp");

// Query rows per pass: rows · H ≤ this, so the f32 scratch stays bounded for long prefill chunks.
constexpr int64_t kPassRowHeads = 8192;
// One ticket per (row, head) of a pass for the merge and projection's chunks (last_block.cuh): zero
// at module load, and every head's last chunk leaves its ticket at zero again.
__device__ unsigned int mla_tickets[kPassRowHeads];
constexpr int64_t kMaxGridDim = 65535;  // blocks along grid y and z

struct MlaShape {
  int64_t H;
  int64_t Tq;  // queries per sequence: prefill's Tq; decode 1 (row = b)
  int64_t Tk;  // keys: prefill's chunk Tk; decode the capacity S
  int L, Dr, Dn, Dv, E;  // E = L + Dr: a cache row
  float scale;
  int group_heads;       // heads per attend block (the last group may have fewer)
  int splits;
  int64_t chunk;         // keys per split
  int latent_chunks;     // attend blocks per (row, group, split): ⌈L / kLatentChunk⌉ (SIMT), 1 (tensor cores)
  int qa_pitch;          // floats per head of the attend block's q: E rounded up to kChunkElems
  int tile_pitch;        // cache elements per staged key row: 64 (SIMT) or 16 (tensor cores) mod 128 bytes past E's
  int values_per_block;  // outputs e per project block
};

// The splits' states (several splits): acc [rows, H, splits, L], m and sum [rows, H, splits].
struct MlaPartials {
  float* acc;
  float* m;
  float* sum;
};

// Row r (b·Tq + i) of head h in a [B, Tq, H, ·] tensor (decode's [B, H, ·] with Tq = 1, t = 0).
__device__ inline int64_t row_at(const Strides3& s, int64_t r, int64_t Tq, int64_t h) {
  return s.at(r / Tq, r % Tq, h);
}

// The keys row r sees: prefill, causal with the queries the last Tq of Tk positions; decode, the
// length clamped into [1, S] (never trusted).
__device__ inline int64_t row_keys(const MlaShape& sh, const int32_t* seq_lens, int64_t r) {
  if (seq_lens == nullptr) return r % sh.Tq + sh.Tk - sh.Tq + 1;
  return min(max(int64_t(seq_lens[r]), int64_t(1)), sh.Tk);
}

// Split `split`'s keys [begin, end) of query row `row`, for either attend kernel, after waiting
// for the kernels before it (qa comes from the absorb kernel, the cache's new row from it or
// earlier ones). A split past the row's keys has none (begin ≥ end) and, where `writes_state`,
// leaves its heads' neutral state, m = −inf and sum = 0, for the merge.
struct SplitKeys {
  int64_t begin, end;
};
__device__ inline SplitKeys split_keys(const MlaShape& sh, const int32_t* seq_lens, const MlaPartials& part,
                                       int64_t row, int64_t first_state, int split, int heads, bool writes_state) {
  wait_for_prior_kernels();
  release_dependents();
  const int64_t begin = int64_t(split) * sh.chunk;
  const SplitKeys span{begin, min(row_keys(sh, seq_lens, row), begin + sh.chunk)};
  if (span.begin >= span.end && writes_state && int(threadIdx.x) < heads) {
    part.m[first_state + int64_t(threadIdx.x) * sh.splits] = -INFINITY;
    part.sum[first_state + int64_t(threadIdx.x) * sh.splits] = 0.0f;
  }
  return span;
}

// Rows: query rows per block, each W element loaded feeding that many FMAs (kAbsorbRows; or 1 for
// a decode step's one or two sequences, where a block of 8 would mostly add zeros and hold
// registers the attend kernel's blocks need beside it: one-row blocks are held to 48 registers,
// 5 blocks' worth of an SM's).
template <class W, int Rows>
__global__ void __launch_bounds__(kAbsorbThreads, Rows == 1 ? 5 : 1)
    mla_absorb_kernel(float* qa, AnyFloat q, Strides3 qs, const W* w, bool w_prefetch, MlaShape sh, int64_t r0,
                      int64_t rows, AnyFloat cache, Strides3 cs, AnyFloat latent_new, int64_t latent_new_stride,
                      const int32_t* seq_lens) {
  __shared__ __align__(16) float q_s[kAbsorbChunk][Rows];  // [j][row]
  __shared__ float partial[kAbsorbSlices - 1][Rows][kAbsorbLatents];
  const int tid = int(threadIdx.x), li = tid % kAbsorbLatents, slice = tid / kAbsorbLatents;
  const int64_t h = blockIdx.y, rt0 = int64_t(blockIdx.z) * Rows;
  const int n = int(min(int64_t(Rows), rows - rt0));
  const int l = int(blockIdx.x) * kAbsorbLatents + li;
  const int L = sh.L;

  // The block's W_uk columns are weights, written by no kernel of the step: the first chunk's
  // terms into registers now (all of them where Dn ≤ 128, as in DeepSeek-V2), the rest into L2
  // (w_prefetch: whole 16-byte pieces, 16-byte aligned), while the previous kernel finishes, so
  // the arithmetic waits on q alone.
  static_assert(kAbsorbChunk == kAbsorbSlices * kAbsorbBatch, "the first chunk's terms are one batch per slice");
  const int l_first = int(blockIdx.x) * kAbsorbLatents;
  if (w_prefetch)
    for (int j = kAbsorbChunk + tid; j < sh.Dn; j += kAbsorbThreads)
      prefetch_to_l2(w + (h * int64_t(sh.Dn + sh.Dv) + j) * L + l_first,
                     uint32_t(min(kAbsorbLatents, L - l_first)) * uint32_t(sizeof(W)));
  const W* const w_col = w + h * int64_t(sh.Dn + sh.Dv) * L + min(l, L - 1);  // W[h, j, l] at w_col[j·L]
  const int jn0 = min(kAbsorbChunk, sh.Dn), per0 = (jn0 + kAbsorbSlices - 1) / kAbsorbSlices;
  const int jb0 = slice * per0, je0 = min(jn0, jb0 + per0);
  float w_first[kAbsorbBatch];
#pragma unroll
  for (int k = 0; k < kAbsorbBatch; ++k) w_first[k] = jb0 + k < je0 ? to_float(w_col[int64_t(jb0 + k) * L]) : 0.0f;

  // q and the cache come from earlier kernels of the step.
  wait_for_prior_kernels();
  release_dependents();

  float acc[Rows];
#pragma unroll
  for (int rr = 0; rr < Rows; ++rr) acc[rr] = 0.0f;
  for (int j0 = 0; j0 < sh.Dn; j0 += kAbsorbChunk) {
    const int jn = min(kAbsorbChunk, sh.Dn - j0);
    if (j0 > 0) __syncthreads();  // every slice is done with the previous chunk
    constexpr int kStaged = kAbsorbChunk * Rows, kRounds = (kStaged + kAbsorbThreads - 1) / kAbsorbThreads;
    float x[kRounds];  // every load in flight before the stores
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      const int i = tid + k * kAbsorbThreads, jj = i / Rows, rr = i % Rows;
      x[k] = i < kStaged && jj < jn && rr < n ? q.load(row_at(qs, r0 + rt0 + rr, sh.Tq, h) + j0 + jj) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kRounds; ++k) {
      const int i = tid + k * kAbsorbThreads;
      if (i < kStaged) q_s[i / Rows][i % Rows] = x[k];
    }
    __syncthreads();
    if (l < L) {
      const int per = (jn + kAbsorbSlices - 1) / kAbsorbSlices;
      const int jb = slice * per, je = min(jn, jb + per);
      for (int jj = jb; jj < je; jj += kAbsorbBatch) {
        const W* const wp = w_col + int64_t(j0 + jj) * L;
        const bool first = j0 == 0 && jj == jb;  // uniform
        float x[kAbsorbBatch];
#pragma unroll
        for (int k = 0; k < kAbsorbBatch; ++k)
          x[k] = first ? w_first[k] : jj + k < je ? to_float(wp[int64_t(k) * L]) : 0.0f;
#pragma unroll
        for (int k = 0; k < kAbsorbBatch; ++k)
          if (jj + k < je) {
#pragma unroll
            for (int rr = 0; rr < Rows; ++rr) acc[rr] = fmaf(q_s[jj + k][rr], x[k], acc[rr]);
          }
      }
    }
  }
  // The slices' sums, added in slice order.
  if (slice > 0) {
#pragma unroll
    for (int rr = 0; rr < Rows; ++rr) partial[slice - 1][rr][li] = acc[rr];
  }
  __syncthreads();
  if (slice == 0 && l < L) {
#pragma unroll
    for (int rr = 0; rr < Rows; ++rr) {
      if (rr < n) {  // a guard, not the loop's bound: acc stays in registers
        float v = acc[rr];
#pragma unroll
        for (int sl = 0; sl < kAbsorbSlices - 1; ++sl) v += partial[sl][rr][li];
        qa[((rt0 + rr) * sh.H + h) * sh.qa_pitch + l] = sh.scale * v;
      }
    }
  }
  if (blockIdx.x != 0) return;
  const int tail = sh.qa_pitch - L;  // q_rope, scaled, then zeros up to the pitch
  for (int i = tid; i < n * tail; i += kAbsorbThreads) {
    const int rr = i / tail, e = i % tail;
    qa[((rt0 + rr) * sh.H + h) * sh.qa_pitch + L + e] =
        e < sh.Dr ? sh.scale * q.load(row_at(qs, r0 + rt0 + rr, sh.Tq, h) + sh.Dn + e) : 0.0f;
  }
  if (latent_new.p != nullptr && h == 0)
    for (int rr = 0; rr < n; ++rr) {
      const int64_t b = r0 + rt0 + rr;  // decode: a row per sequence
      const int64_t len = seq_lens[b];
      if (len < 1 || len > sh.Tk) continue;  // a length that does not fit: write nothing
      for (int e = tid; e < sh.E; e += kAbsorbThreads)
        cache.store(b * cs.b + (len - 1) * cs.t + e, latent_new.load(b * latent_new_stride + e));
    }
}

// One 16-byte piece of a staging copy: src → dst (shared memory), or zeros where !in (src then
// any valid address, read by nothing).
struct Piece {
  const void* src;
  void* dst;
  bool in;
};

// The block copies pieces piece(0 … total − 1): on NVIDIA sm_80+ through cp.async (every copy in
// flight at once, no registers; the caller commits and waits: pieces_landed), elsewhere through
// registers, kStageBatch loads per thread in flight before their stores.
template <class F>
__device__ inline void copy_pieces(int total, F piece) {
#if defined(DING_GPU_NVIDIA_MMA)
  for (int i = int(threadIdx.x); i < total; i += kAttendThreads) {
    const Piece p = piece(i);
    cp_async_16(smem_address(p.dst), p.src, p.in ? 16 : 0);
  }
#else
  for (int i0 = int(threadIdx.x); i0 < total; i0 += kStageBatch * kAttendThreads) {
    uint4 v[kStageBatch];
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int i = i0 + k * kAttendThreads;
      v[k] = make_uint4(0u, 0u, 0u, 0u);
      if (i < total) {
        const Piece p = piece(i);
        if (p.in) v[k] = *static_cast<const uint4*>(p.src);
      }
    }
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int i = i0 + k * kAttendThreads;
      if (i < total) *static_cast<uint4*>(piece(i).dst) = v[k];
    }
  }
#endif
}

// This thread's copies of copy_pieces have landed (a barrier then publishes everyone's).
__device__ inline void pieces_landed() {
#if defined(DING_GPU_NVIDIA_MMA)
  cp_async_commit();
  cp_async_wait<0>();
#endif
}

// Keys j0 … j0 + n − 1 of a sequence (rows `stride` elements apart) into the tile's rows 0 … n − 1,
// rows n … kTileKeys − 1 zero. rows16: every row is whole 16-byte pieces, 16-byte aligned (then
// copy_pieces: the caller waits with pieces_landed); otherwise element by element.
template <class C>
__device__ inline void stage_tile(C* tile, int pitch, const C* seq_rows, int64_t stride, int64_t j0, int n, int E,
                                  bool rows16) {
  if (rows16) {
    constexpr int kPer = 16 / int(sizeof(C));
    const int pieces = E / kPer;
    copy_pieces(kTileKeys * pieces, [&](int i) {
      const int t = i / pieces, u = i - t * pieces;
      return Piece{seq_rows + (j0 + (t < n ? t : 0)) * stride + u * kPer, tile + t * pitch + u * kPer, t < n};
    });
    return;
  }
  for (int i = int(threadIdx.x); i < kTileKeys * E; i += kAttendThreads) {
    const int t = i / E, e = i - t * E;
    tile[t * pitch + e] = t < n ? seq_rows[(j0 + t) * stride + e] : from_float<C>(0.0f);
  }
}

// C: the cache's element type; G: heads per block as compiled (the group's heads, rounded up).
template <class C, int G>
__global__ void __launch_bounds__(kAttendThreads, launch_min_blocks(kAttendThreads, 2))
    mla_attend_kernel(const float* qa, const C* cache, Strides3 cs, bool rows16, const int32_t* seq_lens, MlaShape sh,
                      int64_t r0, MlaPartials part, float* o_lat) {
  constexpr int kWarps = kAttendThreads / warp_size();
  constexpr int kWarpHeads = (G + kWarps - 1) / kWarps;  // heads g = warp + i·kWarps, i < kWarpHeads
  extern __shared__ float4 mla_attend_shared[];
  float* const q_s = reinterpret_cast<float*>(mla_attend_shared);  // [G][qa_pitch], zero past E
  float* const p_s = q_s + G * sh.qa_pitch;                         // [G][kTileKeys]: scores, then weights
  float* const alpha_s = p_s + G * kTileKeys;                       // [G] the tile's rescale
  float* const m_s = alpha_s + G;                                   // [G] the final max and sum
  float* const sum_s = m_s + G;
  C* const tile = reinterpret_cast<C*>(sum_s + G);                  // [kTileKeys][tile_pitch], 16-byte aligned

  const int64_t r = blockIdx.x, row = r0 + r;
  const int64_t h0 = int64_t(blockIdx.y) * sh.group_heads;
  const int heads = int(min(int64_t(sh.group_heads), sh.H - h0));
  const int split = int(blockIdx.z) / sh.latent_chunks, lc = int(blockIdx.z) % sh.latent_chunks;
  const int tid = int(threadIdx.x), lane = tid % warp_size(), warp = tid / warp_size();
  const int E = sh.E, L = sh.L, pitch = sh.tile_pitch;
  const int64_t first_state = (r * sh.H + h0) * sh.splits + split;  // head g's: first_state + g·splits

  const SplitKeys span = split_keys(sh, seq_lens, part, row, first_state, split, heads, lc == 0);
  if (span.begin >= span.end) return;  // uniform over the block
  const int64_t begin = span.begin, end = span.end;

  // The heads' qa rows (zero past E, as the absorb kernel left them; zero for heads past `heads`),
  // in the same copy as the first tile.
  const int q_pieces = sh.qa_pitch / 4;
  const float* const qa_rows = qa + (r * sh.H + h0) * sh.qa_pitch;
  copy_pieces(G * q_pieces, [&](int i) {
    const int g = i / q_pieces;
    return Piece{qa_rows + (g < heads ? i * 4 : 0), q_s + i * 4, g < heads};
  });

  const int key_lane = tid % kKeyLanes, key_group = tid / kKeyLanes;
  const int chunks = (E + kChunkElems - 1) / kChunkElems;
  const C* const seq_rows = cache + (row / sh.Tq) * cs.b;
  const int l0 = lc * kLatentChunk + kLatentsPerThread * tid;  // this thread's latents l0 … l0 + 3
  float acc[G][kLatentsPerThread];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int c = 0; c < kLatentsPerThread; ++c) acc[g][c] = 0.0f;
  float m_run[kWarpHeads], sum_run[kWarpHeads];  // the same on every lane of the warp
#pragma unroll
  for (int i = 0; i < kWarpHeads; ++i) m_run[i] = -INFINITY, sum_run[i] = 0.0f;

  for (int64_t j0 = begin; j0 < end; j0 += kTileKeys) {
    const int n = int(min(int64_t(kTileKeys), end - j0));  // the tile's keys, ≥ 1
    if (j0 > begin) __syncthreads();  // every thread is done with the previous tile and its weights
    stage_tile(tile, pitch, seq_rows, cs.t, j0, n, E, rows16);
    pieces_landed();
    __syncthreads();

    // Scores of the tile's keys into p_s, −inf from n on (those rows are zero).
    {
      const C* key[kKeysPerGroup];
      int t[kKeysPerGroup];
#pragma unroll
      for (int u = 0; u < kKeysPerGroup; ++u) {
        t[u] = u * kKeyGroups + key_group;
        key[u] = tile + t[u] * pitch;
      }
      float s[G][kKeysPerGroup];
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int u = 0; u < kKeysPerGroup; ++u) s[g][u] = 0.0f;
      for (int ch = 0; ch < chunks; ++ch) {
        // Elements e … e + 3 and e + 32 … e + 35 (load4 reads zero past E, where q_s is zero too).
        const int e = ch * kChunkElems + 4 * key_lane;
        float4 c[kKeysPerGroup][2];
#pragma unroll
        for (int u = 0; u < kKeysPerGroup; ++u) {
          c[u][0] = attn::load4(key[u], e, E, true);
          c[u][1] = attn::load4(key[u], e + kChunkElems / 2, E, true);
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float4 qa0 = *reinterpret_cast<const float4*>(q_s + g * sh.qa_pitch + e);
          const float4 qa1 = *reinterpret_cast<const float4*>(q_s + g * sh.qa_pitch + e + kChunkElems / 2);
#pragma unroll
          for (int u = 0; u < kKeysPerGroup; ++u) {
            float v = s[g][u];
            v = fmaf(qa0.x, c[u][0].x, v);
            v = fmaf(qa0.y, c[u][0].y, v);
            v = fmaf(qa0.z, c[u][0].z, v);
            v = fmaf(qa0.w, c[u][0].w, v);
            v = fmaf(qa1.x, c[u][1].x, v);
            v = fmaf(qa1.y, c[u][1].y, v);
            v = fmaf(qa1.z, c[u][1].z, v);
            v = fmaf(qa1.w, c[u][1].w, v);
            s[g][u] = v;
          }
        }
      }
      // The group's 8 partial dots added by a butterfly (every lane ends with the sum); lane
      // g mod 8 of the group stores head g's scores.
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int u = 0; u < kKeysPerGroup; ++u) {
          float v = s[g][u];
#pragma unroll
          for (int m = kKeyLanes / 2; m > 0; m /= 2) v += shfl_xor(v, m);
          if (g % kKeyLanes == key_lane) p_s[g * kTileKeys + t[u]] = t[u] < n ? v : -INFINITY;
        }
    }
    __syncthreads();

    // Online softmax, a warp per head, lane t holding key t: scores become weights in place.
#pragma unroll
    for (int i = 0; i < kWarpHeads; ++i) {
      const int g = warp + i * kWarps;
      if (g < G) {  // uniform over the warp
        float* const p = p_s + g * kTileKeys;
        const float x = lane < kTileKeys ? p[lane] : -INFINITY;
        const float m_new = fmaxf(m_run[i], warp_max(x));  // finite: key 0 of the tile is visible
        const float wt = attn::exp_from(x, m_new);
        if (lane < kTileKeys) p[lane] = wt;
        const float alpha = attn::exp_from(m_run[i], m_new);
        sum_run[i] = sum_run[i] * alpha + warp_sum(wt);
        m_run[i] = m_new;
        if (lane == 0) alpha_s[g] = alpha;
      }
    }
    __syncthreads();

    // acc[g] = alpha[g]·acc[g] + Σ_t p[g][t]·c_t over this thread's latents, 4 keys at a time
    // (rows and weights past n are zero).
    if (l0 < L) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float alpha = alpha_s[g];
#pragma unroll
        for (int c = 0; c < kLatentsPerThread; ++c) acc[g][c] *= alpha;
      }
      for (int t = 0; t < n; t += 4) {
        float4 x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = attn::load4(tile + (t + u) * pitch, l0, L, true);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float4 p = *reinterpret_cast<const float4*>(p_s + g * kTileKeys + t);
          acc[g][0] = fmaf(p.w, x[3].x, fmaf(p.z, x[2].x, fmaf(p.y, x[1].x, fmaf(p.x, x[0].x, acc[g][0]))));
          acc[g][1] = fmaf(p.w, x[3].y, fmaf(p.z, x[2].y, fmaf(p.y, x[1].y, fmaf(p.x, x[0].y, acc[g][1]))));
          acc[g][2] = fmaf(p.w, x[3].z, fmaf(p.z, x[2].z, fmaf(p.y, x[1].z, fmaf(p.x, x[0].z, acc[g][2]))));
          acc[g][3] = fmaf(p.w, x[3].w, fmaf(p.z, x[2].w, fmaf(p.y, x[1].w, fmaf(p.x, x[0].w, acc[g][3]))));
        }
      }
    }
  }

  // The heads' (m, sum), held by their warps, for every thread.
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < kWarpHeads; ++i) {
      const int g = warp + i * kWarps;
      if (g < G) m_s[g] = m_run[i], sum_s[g] = sum_run[i];
    }
  }
  __syncthreads();
  if (l0 < L) {
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (g < heads) {
        // One split: the normalised o_lat (sum ≥ 1: the row's maximum contributes e^0); else the
        // split's unnormalised acc.
        const bool one = sh.splits == 1;
        float* const dst = one ? o_lat + (r * sh.H + h0 + g) * L + l0
                               : part.acc + (first_state + int64_t(g) * sh.splits) * L + l0;
        const float f = one ? 1.0f / sum_s[g] : 1.0f;
#pragma unroll
        for (int c = 0; c < kLatentsPerThread; ++c)
          if (l0 + c < L) dst[c] = acc[g][c] * f;
      }
  }
  if (sh.splits > 1 && lc == 0 && tid < heads) {
    part.m[first_state + int64_t(tid) * sh.splits] = m_s[tid];
    part.sum[first_state + int64_t(tid) * sh.splits] = sum_s[tid];
  }
}

#if defined(DING_GPU_NVIDIA_MMA)
// A barrier of the tensor-core attend kernel's consumer warps alone (barrier 1; the producer warps
// never wait on it).
__device__ inline void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kMmaThreads) : "memory"); }
#endif

// T: the cache's element type, bf16 or f16 (the mmas' operand type: qa and the weights enter as
// sums of Parts T parts, the cache rows as stored). Stages: tiles in the ring. Parts: kPParts<T>
// keeps qa and the weights to f32 accuracy; 1 rounds each once to T, which ops/mla.h allows where
// q, the cache and W share that dtype. Bulk: the tiles come by the copy engine's bulk copies
// (sm_90+), else by cp.async.
template <class T, int Stages, int Parts, bool Bulk>
__global__ void __launch_bounds__(mma_block_threads(Bulk), launch_min_blocks(mma_block_threads(Bulk), 1))
    mla_attend_mma_kernel(const float* qa, const T* cache, Strides3 cs, const int32_t* seq_lens, MlaShape sh,
                          int64_t r0, MlaPartials part, float* o_lat) {
#if defined(DING_GPU_NVIDIA_MMA)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (Bulk) {
    __trap();  // the host launches bulk copies only on sm_90+
    return;
  }
#endif
  constexpr int kParts = Parts;
  constexpr int kLd = kMmaScoreLd;
  const int pitch = sh.tile_pitch;
  extern __shared__ uint4 mla_attend_mma_shared[];
  static_assert(Stages >= 2 && Stages <= kMmaMaxStages, "one tile computed while the others land");
  T* const ring = reinterpret_cast<T*>(mla_attend_mma_shared);                 // [Stages][kMmaKeys][pitch]
  float* const partial = reinterpret_cast<float*>(ring + Stages * kMmaKeys * pitch);  // [warp][head][key]
  float* const p_s = partial + kMmaWarps * kMmaHeads * kLd;                    // [head][key]: the tile's weights
  float* const alpha_s = p_s + kMmaHeads * kLd;                                // [head]: the tile's rescale
  float* const sum_s = alpha_s + kMmaHeads;                                    // [head]: the final sums
  uint64_t* const bars = reinterpret_cast<uint64_t*>(sum_s + kMmaHeads);       // full[Stages], empty[Stages]
  const uint32_t full = smem_address(bars), empty = smem_address(bars + Stages);  // stage s's: + 8·s

  const int64_t r = blockIdx.x, row = r0 + r;
  const int64_t h0 = int64_t(blockIdx.y) * sh.group_heads;
  const int heads = int(min(int64_t(sh.group_heads), sh.H - h0));
  const int split = int(blockIdx.z);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int quad_row = lane / 4, quad_col = lane % 4;  // accumulator rows (heads) quad_row, quad_row + 8
  const int E = sh.E, L = sh.L;
  const int64_t first_state = (r * sh.H + h0) * sh.splits + split;  // head g's: first_state + g·splits

  constexpr int kProducers = mma_producers(Bulk);
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar_init(full + 8 * s, 32 * kProducers);  // the producers' lanes, each once its copies are under way or landed
      mbar_init(empty + 8 * s, kMmaWarps);       // the consumer warps, each once done with the tile
    }
#if __CUDA_ARCH__ >= 900
    if constexpr (Bulk) fence_mbarrier_init();
#endif
  }
  __syncthreads();

  // The split's keys, read before the wait: the lengths, and every cache row but decode's newest,
  // were written two or more kernels back (vendor.h), so the first tiles' copies overlap the absorb
  // kernel; the newest row may be the one it appends. The consumers wait for qa.
  const int64_t row_end = row_keys(sh, seq_lens, row);
  const SplitKeys span{int64_t(split) * sh.chunk, min(row_end, int64_t(split) * sh.chunk + sh.chunk)};
  if (span.begin >= span.end) {  // uniform over the block
    split_keys(sh, seq_lens, part, row, first_state, split, heads, true);  // the neutral state, after the wait
    return;
  }
  // Keys in 32 bits: a split is at most S (or prefill's Tk) keys.
  const int n_keys = int(span.end - span.begin);
  const int tiles = (n_keys + kMmaKeys - 1) / kMmaKeys;

  // The producer warps: tile t (the split's keys 32t …) into stage t mod Stages once the
  // consumers have released the tile before it there. Rows past the split's end are zeros, nothing
  // read: past the row's keys the cache holds anything, NaN included, and a zero row times a zero
  // weight adds nothing. Tiles [0, settled) hold only rows no kernel of this op writes.
  if (warp >= kMmaWarps) {
    const T* const first_row = cache + (row / sh.Tq) * cs.b + span.begin * cs.t;
    const int64_t settled_keys = (seq_lens ? row_end - 1 : row_end) - span.begin;
    const int settled = int(min(int64_t(Stages), max(settled_keys, int64_t(0)) / kMmaKeys));
    // Before tile t: the wait for the kernels before (once, at the first unsettled tile) and for
    // the stage's release.
    auto claim = [&](int t) {
      if (t == settled) {
        wait_for_prior_kernels();
        release_dependents();
      }
      if (t >= Stages) mbar_wait(empty + 8 * (t % Stages), (t / Stages + 1) & 1);
    };
    if constexpr (Bulk) {
#if __CUDA_ARCH__ >= 900
      // Lane k copies row k of each tile, E elements in one bulk copy, and arrives expecting its
      // bytes; a row past the end is zeroed by plain stores, which its arrival releases.
      static_assert(kMmaKeys == 32, "a lane per row");
      const uint32_t row_bytes = uint32_t(E) * uint32_t(sizeof(T));
      for (int t = 0; t < tiles; ++t) {
        claim(t);
        const uint32_t bar = full + 8 * (t % Stages);
        T* const dst = ring + ((t % Stages) * kMmaKeys + lane) * pitch;
        const int key = t * kMmaKeys + lane;
        if (key < n_keys) {
          mbar_expect_tx(bar, row_bytes);
          bulk_copy_to_shared(smem_address(dst), first_row + int64_t(key) * cs.t, row_bytes, bar);
        } else {
          for (int v = 0; v < E / 8; ++v) reinterpret_cast<uint4*>(dst)[v] = make_uint4(0, 0, 0, 0);
          mbar_arrive(bar);
        }
      }
#endif
    } else {
      // Producer p takes the 16-byte pieces p·32 + lane, + 128, … of a tile's rows laid end to end,
      // the same in every tile: their offsets (source and stage, in elements) are worked out once.
      // A copy waits for room in its SM sub-partition's queue; a producer on each of the four keeps
      // up with the bandwidth where one alone does not (docs/PERFORMANCE.md, the attend kernel's
      // third pass), and their waits stall no arithmetic.
      constexpr int kThreads = 32 * kProducers;
      constexpr int kMmaMaxPieces = (kMmaKeys * kMmaMaxElems / 8 + kThreads - 1) / kThreads;  // per thread, at most
      const int pieces = E / 8, first_piece = (warp - kMmaWarps) * 32 + lane;
      int src_at[kMmaMaxPieces], dst_at[kMmaMaxPieces];  // dst_at < (k + 1)·pitch for row k
#pragma unroll
      for (int i = 0; i < kMmaMaxPieces; ++i) {
        const int piece = first_piece + i * kThreads, k = piece / pieces, u = piece - k * pieces;
        src_at[i] = k * int(cs.t) + 8 * u;  // < 32·cs.t: the host keeps that within 32 bits
        dst_at[i] = k * pitch + 8 * u;
      }
      const int my_pieces = (kMmaKeys * pieces - first_piece + kThreads - 1) / kThreads;
      const uint32_t ring_at = smem_address(ring);
      for (int t = 0; t < tiles; ++t) {
        claim(t);
        const T* const src = first_row + int64_t(t) * kMmaKeys * cs.t;
        const uint32_t dst = ring_at + uint32_t((t % Stages) * kMmaKeys * pitch) * uint32_t(sizeof(T));
        const int valid_at = min(kMmaKeys, n_keys - t * kMmaKeys) * pitch;  // rows below it are keys
#pragma unroll
        for (int i = 0; i < kMmaMaxPieces; ++i)
          if (i < my_pieces) {
            const bool in = dst_at[i] < valid_at;
            cp_async_16(dst + uint32_t(dst_at[i]) * uint32_t(sizeof(T)), in ? src + src_at[i] : first_row, in ? 16 : 0);
          }
        cp_async_arrive(full + 8 * (t % Stages));
      }
    }
    return;  // copies still in flight land before anyone reads them: the full barriers track each
  }
  wait_for_prior_kernels();
  release_dependents();

  // The warp's k-steps of the scores, steps [step0, step0 + steps) of E/16 (4 or 5 at E = 576),
  // as A fragments of qa for the whole walk: rows quad_row and quad_row + 8, columns 2·quad_col,
  // + 1 and those + 8, each f32 pair split into kParts T pairs (qa to about 2^-24, as P below: the
  // scores keep f32 accuracy). Heads past the group's are zero rows, never stored.
  const int all_steps = E / 16;
  const int step0 = warp * all_steps / kMmaWarps, steps = (warp + 1) * all_steps / kMmaWarps - step0;
  uint32_t qf[kMmaMaxSteps][kParts][4];
  {
    const float* q_row[2];
    bool q_in[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int g = quad_row + 8 * rr;
      q_in[rr] = g < heads;
      q_row[rr] = qa + (r * sh.H + h0 + (q_in[rr] ? g : 0)) * sh.qa_pitch + 2 * quad_col;
    }
#pragma unroll
    for (int kk = 0; kk < kMmaMaxSteps; ++kk) {
      float2 x[4];  // A registers 0 … 3: (row, column) (g, e), (g + 8, e), (g, e + 8), (g + 8, e + 8)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        const int rr = reg % 2, e = 16 * (step0 + kk) + 8 * (reg / 2);
        x[reg] = kk < steps && q_in[rr] ? *reinterpret_cast<const float2*>(q_row[rr] + e) : make_float2(0.0f, 0.0f);
      }
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) split_pair<T, kParts>(x[reg].x, x[reg].y, qf[kk], reg);
    }
  }

  // The warp's share of S = qa·Cᵀ for the 32 keys of tile t, into `partial`: n-tile nt is keys
  // 8·nt …; one ldmatrix.x4 brings both key halves × both column halves of 16 keys and a k-step.
  // The four n-tiles are independent chains, issued in turn.
  auto scores = [&](int t) {
    mbar_wait(full + 8 * (t % Stages), (t / Stages) & 1);
    const T* const tile = ring + (t % Stages) * kMmaKeys * pitch;
    float s[4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kMmaMaxSteps; ++kk) {
      if (kk < steps) {  // uniform over the warp
        uint32_t kb[2][4];
#pragma unroll
        for (int half = 0; half < 2; ++half)
          load_b_pair(kb[half], tile + 16 * half * pitch + 16 * (step0 + kk), pitch, lane);
#pragma unroll
        for (int p = 0; p < kParts; ++p)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            mma_16816<T>(s[2 * half], qf[kk][p], kb[half][0], kb[half][1]);
            mma_16816<T>(s[2 * half + 1], qf[kk][p], kb[half][2], kb[half][3]);
          }
      }
    }
    float* const mine = partial + warp * kMmaHeads * kLd;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      *reinterpret_cast<float2*>(mine + quad_row * kLd + 8 * nt + 2 * quad_col) = make_float2(s[nt][0], s[nt][1]);
      *reinterpret_cast<float2*>(mine + (quad_row + 8) * kLd + 8 * nt + 2 * quad_col) = make_float2(s[nt][2], s[nt][3]);
    }
  };

  // Warp w owns latents [w·L/8, (w + 1)·L/8): n-tile nt of o is latents lat0 + 8·nt …
  const int lat_tiles = L / (8 * kMmaWarps), lat0 = warp * (L / kMmaWarps);
  float o[kMmaMaxLatentTiles][4];
#pragma unroll
  for (int nt = 0; nt < kMmaMaxLatentTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;

  // O = alpha·O + P·C over tile t's keys and the warp's latents. P's two k-steps (keys 16j …) as
  // A fragments, in kParts parts (attention_mma.cuh, kPParts); the n-tiles, 4 at a time, are
  // independent chains, issued in turn. The tile's product goes to fresh accumulators and joins O
  // by an f32 FMA: the tensor cores' accumulation truncates, so summing every tile in them would
  // bias O by up to an ulp per mma; this way each tile's error is its own and does not grow with
  // the split's length.
  auto values = [&](int t) {
    const T* const tile = ring + (t % Stages) * kMmaKeys * pitch;
    const float alpha[2] = {alpha_s[quad_row], alpha_s[quad_row + 8]};
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // n-tiles 4·half … + 3: fewer registers live at once
      if (4 * half >= lat_tiles) break;     // uniform
      float d[4][4] = {};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t pf[kParts][4];
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) {
          const float2 x = *reinterpret_cast<const float2*>(p_s + (quad_row + 8 * (reg % 2)) * kLd + 16 * j +
                                                            8 * (reg / 2) + 2 * quad_col);
          split_pair<T, kParts>(x.x, x.y, pf, reg);
        }
        // Transposed: matrices keys +0 … 7 and +8 … 15 × n-tiles 2·pair and 2·pair + 1; at L = 64
        // a pair's second n-tile is computed and dropped.
        uint32_t vb[2][4];
#pragma unroll
        for (int pair = 0; pair < 2; ++pair)
          if (4 * half + 2 * pair < lat_tiles)  // uniform
            load_b_pair_trans(vb[pair], tile + 16 * j * pitch + lat0 + 32 * half + 16 * pair, pitch, lane);
#pragma unroll
        for (int p = 0; p < kParts; ++p)
#pragma unroll
          for (int pair = 0; pair < 2; ++pair)
            if (4 * half + 2 * pair < lat_tiles) {
              mma_16816<T>(d[2 * pair], pf[p], vb[pair][0], vb[pair][1]);
              mma_16816<T>(d[2 * pair + 1], pf[p], vb[pair][2], vb[pair][3]);
            }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (4 * half + u < lat_tiles)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[4 * half + u][e] = fmaf(o[4 * half + u][e], alpha[e / 2], d[u][e]);
    }
  };

  // The online softmax: thread (g, c) = (tid / 16, tid % 16) takes head g's keys 2c and 2c + 1,
  // their 8 warps' partial scores added in warp order (deterministic), keys past the tile's end
  // masked; the head's max goes across its 16 threads. Each thread keeps the running max (the
  // same on all 16) and the running sum of its own keys' weights, added across them at the end.
  const int sm_head = tid / 16, sm_key = 2 * (tid % 16);
  float m_run = -INFINITY, sum_run = 0.0f;
  auto softmax = [&](int t) {
    const int n = min(kMmaKeys, n_keys - t * kMmaKeys);  // the tile's keys, ≥ 1
    float2 x = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float2 y = *reinterpret_cast<const float2*>(partial + (w * kMmaHeads + sm_head) * kLd + sm_key);
      x.x += y.x, x.y += y.y;
    }
    x.x = sm_key < n ? x.x : -INFINITY;
    x.y = sm_key + 1 < n ? x.y : -INFINITY;
    float m = fmaxf(x.x, x.y);
#pragma unroll
    for (int k = 8; k >= 1; k /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    const float m_new = fmaxf(m_run, m);  // finite: key 0 of the tile is visible
    const float2 p = make_float2(attn::exp_from(x.x, m_new), attn::exp_from(x.y, m_new));
    const float alpha = attn::exp_from(m_run, m_new);
    *reinterpret_cast<float2*>(p_s + sm_head * kLd + sm_key) = p;
    if (sm_key == 0) alpha_s[sm_head] = alpha;
    sum_run = sum_run * alpha + (p.x + p.y);
    m_run = m_new;
  };

  // Per tile two barriers of the 8 consumer warps: after the scores (the partials are complete),
  // after the softmax (the weights are). Tile t's values and tile t + 1's scores come between the
  // same two barriers, so each warp has both tiles' independent mma chains to issue while the
  // other's results are under way.
  scores(0);
  consumers_sync();
  for (int t = 0; t < tiles; ++t) {
    softmax(t);
    consumers_sync();
    values(t);
    if (t + 1 < tiles) scores(t + 1);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * (t % Stages));  // the warp is done with tile t
    consumers_sync();
  }

  // The heads' sums, from the 16 threads of each head, for every warp.
#pragma unroll
  for (int k = 8; k >= 1; k /= 2) sum_run += __shfl_xor_sync(0xffffffffu, sum_run, k);
  const bool one = sh.splits == 1;
  if (sm_key == 0) {
    sum_s[sm_head] = sum_run;
    if (!one && sm_head < heads) {
      part.m[first_state + int64_t(sm_head) * sh.splits] = m_run;
      part.sum[first_state + int64_t(sm_head) * sh.splits] = sum_run;
    }
  }
  consumers_sync();
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int g = quad_row + 8 * rr;
    if (g < heads) {
      // One split: the normalised o_lat (sum ≥ 1: the row's maximum contributes e^0); else the
      // split's unnormalised acc.
      const float f = one ? 1.0f / sum_s[g] : 1.0f;
      float* const dst =
          (one ? o_lat + (r * sh.H + h0 + g) * L : part.acc + (first_state + int64_t(g) * sh.splits) * L) + lat0 +
          2 * quad_col;
#pragma unroll
      for (int nt = 0; nt < kMmaMaxLatentTiles; ++nt)
        if (nt < lat_tiles)
          *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(o[nt][2 * rr] * f, o[nt][2 * rr + 1] * f);
    }
  }
#endif  // DING_GPU_NVIDIA_MMA
}

// The merge's weights, called by every thread of the block: thread s loads split s's (m, sum);
// weight[s] = e^(m_s − m*) for every split, published to the block; returns sum* = Σ_s w_s·sum_s.
// first: the (row, head)'s first state.
__device__ inline float merge_weights(const MlaPartials& part, int64_t first, int splits, float* weight,
                                      float* reduce_space) {
  const int tid = int(threadIdx.x);
  const bool holds = tid < splits;
  const float m = holds ? part.m[first + tid] : -INFINITY, split_sum = holds ? part.sum[first + tid] : 0.0f;
  const float top = block_max(m, reduce_space);  // finite: split 0 always has keys
  const float wt = attn::exp_from(m, top);
  if (holds) weight[tid] = wt;
  return block_sum(wt * split_sum, reduce_space);  // its barriers also publish weight[]
}

__global__ void __launch_bounds__(kMergeThreads) mla_merge_kernel(MlaPartials part, float* o_lat, MlaShape sh) {
  __shared__ float weight[kMaxSplits];  // e^(m_s − m*)
  __shared__ float reduce_space[32];
  __shared__ float subtotal[kMergeSubsets - 1][kMergeLatents];
  const int tid = int(threadIdx.x), li = tid % kMergeLatents, subset = tid / kMergeLatents;
  const int64_t h = blockIdx.y, r = blockIdx.z;
  const int l = int(blockIdx.x) * kMergeLatents + li;
  const int splits = sh.splits, L = sh.L;
  const int64_t first = (r * sh.H + h) * splits;

  // The partial states come from the attend kernel.
  wait_for_prior_kernels();
  release_dependents();

  // The thread's first batch of acc values is loaded with the states, before the weights that
  // select them are known, so the block pays one round trip to memory rather than two. An empty
  // split wrote no acc: its value is read (the scratch holds anything) and never used.
  const float* const acc = part.acc + first * L + min(l, L - 1);
  float a0[kMergeBatch];
#pragma unroll
  for (int k = 0; k < kMergeBatch; ++k) {
    const int s = subset + k * kMergeSubsets;
    a0[k] = l < L && s < splits ? acc[int64_t(s) * L] : 0.0f;
  }

  // Thread s holds split s's state: one round of loads for m* and sum*.
  const float sum = merge_weights(part, first, splits, weight, reduce_space);

  // Weight zero (an empty split, or one far below the top): skipped, never multiplied.
  float v = 0.0f;
#pragma unroll
  for (int k = 0; k < kMergeBatch; ++k) {
    const int s = subset + k * kMergeSubsets;
    const float w = s < splits ? weight[s] : 0.0f;
    if (w != 0.0f) v = fmaf(w, a0[k], v);
  }
  if (l < L) {
    for (int s0 = subset + kMergeSubsets * kMergeBatch; s0 < splits; s0 += kMergeSubsets * kMergeBatch) {
      float a[kMergeBatch], w[kMergeBatch];
#pragma unroll
      for (int k = 0; k < kMergeBatch; ++k) {
        const int s = s0 + k * kMergeSubsets;
        w[k] = s < splits ? weight[s] : 0.0f;
        a[k] = w[k] != 0.0f ? acc[int64_t(s) * L] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kMergeBatch; ++k) v = fmaf(w[k], a[k], v);
    }
  }
  if (subset > 0) subtotal[subset - 1][li] = v;
  __syncthreads();
  if (subset == 0 && l < L) {
#pragma unroll
    for (int k = 0; k < kMergeSubsets - 1; ++k) v += subtotal[k][li];
    o_lat[(r * sh.H + h) * L + l] = v / sum;
  }
}

// 8 elements from p (aligned to min(16, 8·sizeof(T)) bytes) as f32.
template <class T>
__device__ inline void load8(const T* p, float (&v)[8]) {
  constexpr int P = kPack16<T> < 8 ? kPack16<T> : 8;
#pragma unroll
  for (int c = 0; c < 8; c += P) {
    const Pack<T, P> pk = *reinterpret_cast<const Pack<T, P>*>(p + c);
#pragma unroll
    for (int e = 0; e < P; ++e) v[c + e] = to_float(pk.v[e]);
  }
}

// w_vec: L % 8 == 0 and W 16-byte aligned, so every W row and every o_lat row in shared memory
// starts on a multiple of 8 elements.
template <class W>
__global__ void __launch_bounds__(kProjectThreads)
    mla_project_kernel(AnyFloat out, Strides3 os, const W* w, bool w_vec, const float* o_lat, MlaShape sh, int64_t r0,
                       int64_t rows) {
  constexpr int kWarps = kProjectThreads / warp_size();
  extern __shared__ float4 mla_project_shared[];
  float* const lat = reinterpret_cast<float*>(mla_project_shared);  // [kProjectRows][L]
  const int L = sh.L;
  const int tid = int(threadIdx.x), lane = tid % warp_size(), warp = tid / warp_size();
  const int64_t h = blockIdx.y, rt0 = int64_t(blockIdx.z) * kProjectRows;
  const int n = int(min(int64_t(kProjectRows), rows - rt0));
  const int e_begin = int(blockIdx.x) * sh.values_per_block, e_end = min(sh.Dv, e_begin + sh.values_per_block);

  // The block's W_uv rows are weights: into L2 while the attend or merge kernel finishes (w_vec:
  // rows of whole 16-byte pieces, 16-byte aligned).
  const W* const w_uv = w + (h * int64_t(sh.Dn + sh.Dv) + sh.Dn) * L;  // [Dv, L]
  if (w_vec)
    for (int e = e_begin + tid; e < e_end; e += kProjectThreads)
      prefetch_to_l2(w_uv + int64_t(e) * L, uint32_t(L) * uint32_t(sizeof(W)));
  // The warp's first 8 columns of its first rows go into registers now too (w_vec), so the
  // first products wait on o_lat alone.
  const int e_first = e_begin + warp * kValuesPerWarp;
  float x_first[kValuesPerWarp][8];
  if (w_vec && e_first < e_end && 8 * lane < L)
#pragma unroll
    for (int v = 0; v < kValuesPerWarp; ++v) load8(w_uv + int64_t(min(e_first + v, e_end - 1)) * L + 8 * lane, x_first[v]);

  // o_lat comes from the attend or merge kernel.
  wait_for_prior_kernels();
  release_dependents();

  for (int i0 = tid; i0 < kProjectRows * L; i0 += kStageBatch * kProjectThreads) {
    float x[kStageBatch];  // every load in flight before the stores
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k) {
      const int i = i0 + k * kProjectThreads, rr = i / L, l = i - rr * L;
      x[k] = rr < n ? o_lat[((rt0 + rr) * sh.H + h) * L + l] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kStageBatch; ++k)
      if (i0 + k * kProjectThreads < kProjectRows * L) lat[i0 + k * kProjectThreads] = x[k];
  }
  __syncthreads();

  for (int e0 = e_begin + warp * kValuesPerWarp; e0 < e_end; e0 += kWarps * kValuesPerWarp) {
    const W* w_row[kValuesPerWarp];
#pragma unroll
    for (int v = 0; v < kValuesPerWarp; ++v)
      w_row[v] = w_uv + int64_t(min(e0 + v, e_end - 1)) * L;  // rows past e_end: read, never stored
    float sum[kValuesPerWarp][kProjectRows];
#pragma unroll
    for (int v = 0; v < kValuesPerWarp; ++v)
#pragma unroll
      for (int rr = 0; rr < kProjectRows; ++rr) sum[v][rr] = 0.0f;
    if (w_vec) {
      for (int l = 8 * lane; l < L; l += 8 * warp_size()) {
        float x[kValuesPerWarp][8];
        if (e0 == e_first && l == 8 * lane) {
#pragma unroll
          for (int v = 0; v < kValuesPerWarp; ++v)
#pragma unroll
            for (int c = 0; c < 8; ++c) x[v][c] = x_first[v][c];
        } else {
#pragma unroll
          for (int v = 0; v < kValuesPerWarp; ++v) load8(w_row[v] + l, x[v]);
        }
#pragma unroll
        for (int rr = 0; rr < kProjectRows; ++rr) {
          const float4 a0 = *reinterpret_cast<const float4*>(lat + rr * L + l);
          const float4 a1 = *reinterpret_cast<const float4*>(lat + rr * L + l + 4);
          const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
          for (int v = 0; v < kValuesPerWarp; ++v)
#pragma unroll
            for (int c = 0; c < 8; ++c) sum[v][rr] = fmaf(x[v][c], a[c], sum[v][rr]);
        }
      }
    } else {
      for (int l = lane; l < L; l += warp_size()) {
        float x[kValuesPerWarp];
#pragma unroll
        for (int v = 0; v < kValuesPerWarp; ++v) x[v] = to_float(w_row[v][l]);
#pragma unroll
        for (int rr = 0; rr < kProjectRows; ++rr)
#pragma unroll
          for (int v = 0; v < kValuesPerWarp; ++v) sum[v][rr] = fmaf(x[v], lat[rr * L + l], sum[v][rr]);
      }
    }
#pragma unroll
    for (int v = 0; v < kValuesPerWarp; ++v)
#pragma unroll
      for (int rr = 0; rr < kProjectRows; ++rr) {
        const float o = warp_sum(sum[v][rr]);
        if (lane == 0 && rr < n && e0 + v < e_end) out.store(row_at(os, r0 + rt0 + rr, sh.Tq, h) + e0 + v, o);
      }
  }
}

// Several splits, decode: the merge and the projection in one launch, a block per (row, head,
// chunk of kFoldLatents latents). The block merges its chunk of o_lat from the splits' states,
// o_lat[l] = Σ_s w_s·acc_s[l] / sum*, and multiplies it into the chunk's columns of W_uv,
// part[e] = Σ_(l in chunk) W_uv[h, e, l]·o_lat[l], for every e; the last of the head's chunks to
// arrive (last_block.cuh) adds the chunks' parts in chunk order into out[r, h, e]. A block reads
// its splits' share of the states (splits × 64 floats) and 64 columns of W_uv: 8 · 16 blocks at
// DeepSeek-V2-Lite's decode, where one block per head would read all of a head's states alone.
// w_vec: L % 8 == 0 and W 16-byte aligned (the acc rows then start 16-byte aligned too).
template <class W>
__global__ void __launch_bounds__(kFoldThreads)
    mla_merge_project_kernel(AnyFloat out, Strides3 os, const W* w, MlaPartials part, float* chunk_parts, MlaShape sh,
                             int64_t r0) {
  __shared__ float weight[kMaxSplits];  // e^(m_s − m*)
  __shared__ float reduce_space[32];
  __shared__ __align__(16) float subtotal[kFoldSubsets][kFoldLatents];
  __shared__ __align__(16) float lat[kFoldLatents];
  const int tid = int(threadIdx.x);
  const int64_t h = blockIdx.y, r = blockIdx.z, head = r * sh.H + h;
  const int chunk = int(blockIdx.x), chunks = int(gridDim.x), L = sh.L, splits = sh.splits;
  const int l0 = chunk * kFoldLatents;

  // W_uv's chunk columns are weights, written by no kernel of the step: the block's first rows
  // into registers while the attend kernel finishes. Lane group (8 lanes) e takes row e's 64
  // columns, 8 each, one 16-byte load.
  const int piece = tid % kFoldRowLanes, row_lane = tid / kFoldRowLanes;
  const int lw = l0 + 8 * piece;
  const bool w_in = lw < L;
  const W* const w_uv = w + (h * int64_t(sh.Dn + sh.Dv) + sh.Dn) * L + (w_in ? lw : 0);  // [Dv, L]
  float w_first[kFoldFirstRows][8];
#pragma unroll
  for (int k = 0; k < kFoldFirstRows; ++k) {
    const int e = row_lane + k * kFoldRowsPerPass;
    if (w_in && e < sh.Dv)
      load8(w_uv + int64_t(e) * L, w_first[k]);
    else
#pragma unroll
      for (int c = 0; c < 8; ++c) w_first[k][c] = 0.0f;
  }

  // The states come from the attend kernel.
  wait_for_prior_kernels();
  release_dependents();

  // Thread (subset, quad) adds splits subset, subset + 16, ... of latents l0 + 4·quad … + 3. Its
  // first batch is loaded with the states, before the weights that select them are known (one
  // round trip to memory, not two); an empty split wrote no acc, so its value (anything) is never
  // used.
  const int quad = tid % kFoldQuads, subset = tid / kFoldQuads;
  const int la = l0 + 4 * quad;
  const bool a_in = la < L;
  const float* const acc = part.acc + head * splits * L + (a_in ? la : 0);
  float4 a0[kFoldBatch];
#pragma unroll
  for (int k = 0; k < kFoldBatch; ++k) {
    const int s = subset + k * kFoldSubsets;
    a0[k] = a_in && s < splits ? *reinterpret_cast<const float4*>(acc + int64_t(s) * L) : make_float4(0, 0, 0, 0);
  }
  const float sum = merge_weights(part, head * splits, splits, weight, reduce_space);

  // Weight zero (an empty split, or one far below the top): skipped, never multiplied.
  float4 v = make_float4(0, 0, 0, 0);
  auto add = [&](float ws, const float4& a) {
    if (ws != 0.0f) v = make_float4(fmaf(ws, a.x, v.x), fmaf(ws, a.y, v.y), fmaf(ws, a.z, v.z), fmaf(ws, a.w, v.w));
  };
#pragma unroll
  for (int k = 0; k < kFoldBatch; ++k) {
    const int s = subset + k * kFoldSubsets;
    add(s < splits ? weight[s] : 0.0f, a0[k]);
  }
  if (a_in)
    for (int s0 = subset + kFoldSubsets * kFoldBatch; s0 < splits; s0 += kFoldSubsets * kFoldBatch) {
      float4 a[kFoldBatch];
      float ws[kFoldBatch];
#pragma unroll
      for (int k = 0; k < kFoldBatch; ++k) {
        const int s = s0 + k * kFoldSubsets;
        ws[k] = s < splits ? weight[s] : 0.0f;
        a[k] = ws[k] != 0.0f ? *reinterpret_cast<const float4*>(acc + int64_t(s) * L) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int k = 0; k < kFoldBatch; ++k) add(ws[k], a[k]);
    }
  *reinterpret_cast<float4*>(&subtotal[subset][4 * quad]) = v;
  __syncthreads();
  if (tid < kFoldLatents) {  // the subsets in order; latents past L are zero
    float o = 0.0f;
#pragma unroll
    for (int k = 0; k < kFoldSubsets; ++k) o += subtotal[k][tid];
    lat[tid] = o / sum;
  }
  __syncthreads();

  // The chunk's part of every output e, summed over the lane group's 8 lanes in a fixed order.
  float x[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) x[c] = lat[8 * piece + c];
  float* const parts = chunk_parts + head * int64_t(chunks) * sh.Dv;  // [chunk][e]
  auto store_part = [&](int e, const float (&wr)[8]) {
    float d = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) d = fmaf(wr[c], x[c], d);
#pragma unroll
    for (int mask = 1; mask < kFoldRowLanes; mask *= 2) d += shfl_xor(d, mask);
    if (piece == 0 && e < sh.Dv) parts[int64_t(chunk) * sh.Dv + e] = d;
  };
#pragma unroll
  for (int k = 0; k < kFoldFirstRows; ++k) store_part(row_lane + k * kFoldRowsPerPass, w_first[k]);
  for (int e0 = kFoldFirstRows * kFoldRowsPerPass; e0 < sh.Dv; e0 += kFoldRowsPerPass) {
    const int e = e0 + row_lane;
    float wr[8];
    if (w_in && e < sh.Dv)
      load8(w_uv + int64_t(e) * L, wr);
    else
#pragma unroll
      for (int c = 0; c < 8; ++c) wr[c] = 0.0f;
    store_part(e, wr);
  }

  if (!arrive_last(&mla_tickets[head], unsigned(chunks))) return;
  for (int e = tid; e < sh.Dv; e += kFoldThreads) {
    float o = 0.0f;
    for (int c = 0; c < chunks; ++c) o += load_partial(parts + int64_t(c) * sh.Dv + e);
    out.store(row_at(os, r0 + r, sh.Tq, h) + e, o);
  }
}

// Whether every row of x (all dims but the last) starts 16-byte aligned and is whole 16-byte pieces.
bool rows_16_bytes(const Tensor& x) {
  const int64_t size = int64_t(dtype_size(x.dtype));
  if (reinterpret_cast<uintptr_t>(x.data) % 16 != 0 || (x.dim(-1) * size) % 16 != 0) return false;
  for (int d = 0; d + 1 < x.rank; ++d)
    if ((x.strides[d] * size) % 16 != 0) return false;
  return true;
}

// Calls f(kernel) with the tensor-core attend kernel for a cache of dtype t (bf16 or f16), a ring
// of `stages` tiles, qa and the weights rounded once to t (`rounded`) or in kPParts parts, and its
// tiles by bulk copies (`bulk`, sm_90+) or cp.async; only where Props::has_mma_sync().
template <class F>
void with_attend_mma_kernel(DType t, int stages, bool rounded, bool bulk, F&& f) {
#if defined(DING_GPU_NVIDIA)
  auto with_stages = [&](auto t_tag, auto parts_tag, auto bulk_tag) {
    using T = decltype(t_tag);
    constexpr int P = decltype(parts_tag)::value;
    constexpr bool B = decltype(bulk_tag)::value;
    static_assert(kMmaMaxStages == 4, "a case per ring size");
    switch (stages) {
      case 4: f(mla_attend_mma_kernel<T, 4, P, B>); break;
      case 3: f(mla_attend_mma_kernel<T, 3, P, B>); break;
      default: f(mla_attend_mma_kernel<T, 2, P, B>); break;
    }
  };
  auto with_copies = [&](auto t_tag, auto parts_tag) {
    if (bulk)
      with_stages(t_tag, parts_tag, std::true_type{});
    else
      with_stages(t_tag, parts_tag, std::false_type{});
  };
  auto with_parts = [&](auto t_tag) {
    using T = decltype(t_tag);
    if (rounded)
      with_copies(t_tag, std::integral_constant<int, 1>{});
    else
      with_copies(t_tag, std::integral_constant<int, attn::kPParts<T>>{});
  };
  if (t == DType::bf16)
    with_parts(ding::bf16{});
  else
    with_parts(ding::f16{});
#else
  (void)t, (void)stages, (void)rounded, (void)bulk, (void)f;
  throw Error(ErrorCode::not_implemented, "mla attend: no tensor-core kernel in this build");
#endif
}

// Both ops: `rows` query rows of q (qs) into out (os), keys from cache; decode passes seq_lens
// (and latent_new where the op appends), prefill null.
void launch_mla(GpuStream& s, MlaShape sh, int64_t rows, const Tensor& q, Strides3 qs, const Tensor& out, Strides3 os,
                const Tensor& cache, const Tensor& w_kv, const int32_t* seq_lens, const Tensor& latent_new) {
  const std::string op = seq_lens ? "mla_decode" : "mla_prefill";
  const Props& props = s.props();
  const size_t optin = props.shared_per_block_optin;
  const int64_t target_blocks = 2 * int64_t(props.sm_count);
  const int64_t pass_rows = std::min(rows, std::max<int64_t>(1, kPassRowHeads / sh.H));

  const size_t cache_size = dtype_size(cache.dtype);
  const bool rows16 = rows_16_bytes(cache);
  sh.qa_pitch = int(ceil_div(sh.E, kChunkElems) * kChunkElems);
  sh.splits = 1;
  sh.chunk = sh.Tk;

  // The tensor-core kernel: a 16-bit cache of 16-byte rows, L and E within what its warps hold in
  // registers, its shared memory within the device's. Rows padded to 16 mod 128 bytes, so the 8
  // rows of an ldmatrix matrix hit 8 different 16-byte bank groups.
  // The ring takes as many stages as fit (more tiles in flight per block), or fewer where the
  // op tuning asks.
  const OpTuning& tuning = s.op_tuning();
  const int mma_pitch = int((ceil_div(int64_t(sh.E) * 2, 128) * 128 + 16) / 2);
  auto mma_bytes_for = [&](int stages) {
    return sizeof(uint16_t) * size_t(stages * kMmaKeys) * size_t(mma_pitch) +
           sizeof(float) * size_t((kMmaWarps + 1) * kMmaHeads * kMmaScoreLd + 2 * kMmaHeads) +
           sizeof(uint64_t) * size_t(2 * stages);
  };
  int mma_stages = tuning.mla_stages > 0 ? std::clamp(tuning.mla_stages, 2, kMmaMaxStages) : kMmaMaxStages;
  while (mma_stages > 2 && mma_bytes_for(mma_stages) > optin) --mma_stages;
  const size_t mma_bytes = mma_bytes_for(mma_stages);
  const bool mma = props.has_mma_sync() && (cache.dtype == DType::bf16 || cache.dtype == DType::f16) &&
                   sh.L % (8 * kMmaWarps) == 0 && sh.L <= kMmaMaxLatents && sh.E % 16 == 0 && sh.E <= kMmaMaxElems &&
                   rows16 && mma_bytes <= optin && cache.strides[1] <= INT32_MAX / kMmaKeys;
  const bool mma_bulk = props.has_bulk_copies() && tuning.mla_bulk_copies;
  const unsigned mma_threads = unsigned(mma_block_threads(mma_bulk));
  // q, the cache and W of the cache's 16-bit dtype and a 16-bit output: qa and the weights may be
  // rounded to it once (ops/mla.h), a third of the mmas of f32 accuracy's bf16 parts.
  const bool mma_rounded = q.dtype == cache.dtype && w_kv.dtype == cache.dtype && out.dtype != DType::f32;

  // The SIMT kernel's shared memory for blocks of g heads.
  auto attend_bytes = [&](int g) {
    return sizeof(float) * size_t(g) * size_t(sh.qa_pitch + kTileKeys + 3) +
           size_t(kTileKeys) * size_t(sh.tile_pitch) * cache_size;
  };
  int64_t groups = 0;
  int variant = 0;
  if (mma) {
    // Groups of up to 16 heads, spread evenly (a block costs the same for any number of them).
    // Decode: one wave at the kernel's occupancy, splits of whole tiles and at least 64 keys
    // (from S alone: the lengths live on the device).
    groups = ceil_div(sh.H, kMmaHeads);
    sh.group_heads = int(ceil_div(sh.H, groups));
    sh.tile_pitch = mma_pitch;
    sh.latent_chunks = 1;
    if (seq_lens) {
      int per_sm = 0;
      with_attend_mma_kernel(cache.dtype, mma_stages, mma_rounded, mma_bulk, [&](auto kernel) {
        DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(mma_bytes)));
        DING_GPU_CHECK(resident_blocks(&per_sm, kernel, int(mma_threads), mma_bytes));
      });
      const int64_t resident = int64_t(std::max(per_sm, 1)) * props.sm_count;
      const int64_t most_splits = std::clamp<int64_t>(sh.Tk / kMmaMinSplitKeys, 1, kMaxSplits);
      const int64_t splits = std::clamp<int64_t>(ceil_div(resident, pass_rows * groups), 1, most_splits);
      sh.chunk = ceil_div(ceil_div(sh.Tk, splits), kMmaKeys) * kMmaKeys;
      sh.splits = int(ceil_div(sh.Tk, sh.chunk));
    }
  } else {
    // Blocks of up to 16 heads, fewer where they do not fit shared memory or leave the device
    // short of blocks even at the most splits; the heads spread evenly (17: 9 + 8, not 16 + 1).
    sh.tile_pitch = int((ceil_div(int64_t(sh.E) * int64_t(cache_size), 128) * 128 + 64) / int64_t(cache_size));
    const int64_t most_splits = seq_lens ? std::clamp<int64_t>(sh.Tk / kMinSplitKeys, 1, kMaxSplits) : 1;
    int max_heads = kMaxGroupHeads;
    while (max_heads > 4 &&
           (attend_bytes(max_heads) > optin || pass_rows * ceil_div(sh.H, max_heads) * most_splits < props.sm_count))
      max_heads /= 2;
    if (attend_bytes(max_heads) > optin)
      throw Error(ErrorCode::not_implemented, op + " on the GPU: a cache row of L + Dr = " + std::to_string(sh.E) +
                                                  " elements needs " + std::to_string(attend_bytes(max_heads)) +
                                                  " bytes of shared memory per block; this device allows " +
                                                  std::to_string(optin));
    groups = ceil_div(sh.H, max_heads);
    sh.group_heads = int(ceil_div(sh.H, groups));
    variant = sh.group_heads <= 4 ? 4 : sh.group_heads <= 8 ? 8 : 16;  // ≤ max_heads
    sh.latent_chunks = int(ceil_div(sh.L, kLatentChunk));
    if (seq_lens) {  // from S alone: the lengths live on the device
      const int64_t splits = std::clamp<int64_t>(ceil_div(target_blocks, pass_rows * groups), 1, most_splits);
      sh.chunk = ceil_div(ceil_div(sh.Tk, splits), kTileKeys) * kTileKeys;
      sh.splits = int(ceil_div(sh.Tk, sh.chunk));
    }
  }
  const int64_t project_tiles = ceil_div(pass_rows, kProjectRows);
  const int64_t value_blocks =
      std::clamp<int64_t>(ceil_div(props.sm_count, sh.H * project_tiles), 1, std::max<int64_t>(1, sh.Dv / 32));
  sh.values_per_block = int(ceil_div(sh.Dv, value_blocks));
  const size_t project_bytes = sizeof(float) * size_t(kProjectRows) * size_t(sh.L);
  if (project_bytes > optin)
    throw Error(ErrorCode::not_implemented, op + " on the GPU: L = " + std::to_string(sh.L) + " needs " +
                                                std::to_string(project_bytes) +
                                                " bytes of shared memory per block; this device allows " +
                                                std::to_string(optin));
  if (sh.H > kMaxGridDim || int64_t(sh.splits) * sh.latent_chunks > kMaxGridDim)
    throw Error(ErrorCode::not_implemented, op + " on the GPU: H = " + std::to_string(sh.H) + ", L = " +
                                                std::to_string(sh.L) + " exceed the launch grid");

  const bool w_vec = sh.L % 8 == 0 && reinterpret_cast<uintptr_t>(w_kv.data) % 16 == 0;
  // Several splits: the merge and the projection in one launch where W_uv's rows are whole
  // 16-byte pieces (and a ticket per row and head is there); else a merge launch, then the
  // projection's.
  const bool fold = sh.splits > 1 && w_vec && pass_rows * sh.H <= kPassRowHeads && tuning.mla_fold_projection;
  if (mma) s.note_form("mla_decode", mma_bulk ? "tiles by bulk copies" : "tiles by cp.async");
  if (sh.splits > 1) s.note_form("mla_decode", fold ? "splits merged and projected in one launch" : "splits merged, then projected");
  const int64_t fold_chunks = ceil_div(sh.L, kFoldLatents);

  // The pass's f32 scratch: the partial states (several splits), o_lat or the folded
  // projection's chunk parts, qa. The states' acc first: its rows start 16-byte aligned.
  const int64_t states = sh.splits > 1 ? pass_rows * sh.H * sh.splits : 0;
  const int64_t row_heads = pass_rows * sh.H;
  const int64_t between = fold ? fold_chunks * sh.Dv : sh.L;  // per row and head
  float* const scratch = static_cast<float*>(
      s.scratch(sizeof(float) * size_t(states * (sh.L + 2) + row_heads * (between + sh.qa_pitch)) + 16));
  const MlaPartials part{scratch, scratch + states * sh.L, scratch + states * (sh.L + 1)};
  float* const o_lat = scratch + states * (sh.L + 2);  // or the chunk parts
  // qa's rows, qa_pitch floats each, start 16-byte aligned (the attend kernel copies them in 16-byte pieces).
  float* const qa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(o_lat + row_heads * between) + 15) / 16 * 16);

  const bool chained = props.has_chained_launch();
  const Strides3 cs{cache.strides[0], cache.strides[1], 0};
  const int64_t latent_new_stride = latent_new.defined() ? latent_new.strides[0] : 0;

  for (int64_t r0 = 0; r0 < rows; r0 += pass_rows) {
    const int64_t n = std::min(pass_rows, rows - r0);
    with_float_type(w_kv.dtype, [&](auto w_tag) {
      using W = decltype(w_tag);
      const int absorb_rows = n <= kAbsorbFewRows ? 1 : kAbsorbRows;
      DING_GPU_CHECK(launch_chained(chained, absorb_rows == 1 ? mla_absorb_kernel<W, 1> : mla_absorb_kernel<W, kAbsorbRows>,
                                    dim3(unsigned(ceil_div(sh.L, kAbsorbLatents)), unsigned(sh.H),
                                         unsigned(ceil_div(n, absorb_rows))),
                                    dim3(kAbsorbThreads), 0, s.handle(), qa, any_float(q), qs,
                                    static_cast<const W*>(w_kv.data), w_vec, sh, r0, n, any_float(cache), cs,
                                    any_float(latent_new), latent_new_stride, seq_lens));
    });
    if (mma) {
      with_attend_mma_kernel(cache.dtype, mma_stages, mma_rounded, mma_bulk, [&](auto kernel) {
        DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(mma_bytes)));
        DING_GPU_CHECK(launch_chained(chained, kernel, dim3(unsigned(n), unsigned(groups), unsigned(sh.splits)),
                                      dim3(mma_threads), mma_bytes, s.handle(), static_cast<const float*>(qa),
                                      cache.data, cs, seq_lens, sh, r0, part, o_lat));
      });
    } else {
      with_float_type(cache.dtype, [&](auto cache_tag) {
        using C = decltype(cache_tag);
        auto attend = [&](auto g_tag) {
          constexpr int G = decltype(g_tag)::value;
          const size_t shared = attend_bytes(G);
          DING_GPU_CHECK(
              func_set_max_dynamic_shared(reinterpret_cast<const void*>(&mla_attend_kernel<C, G>), int(shared)));
          DING_GPU_CHECK(launch_chained(chained, mla_attend_kernel<C, G>,
                                        dim3(unsigned(n), unsigned(groups), unsigned(sh.splits * sh.latent_chunks)),
                                        dim3(kAttendThreads), shared, s.handle(), static_cast<const float*>(qa),
                                        static_cast<const C*>(cache.data), cs, rows16, seq_lens, sh, r0, part, o_lat));
        };
        switch (variant) {
          case 4: attend(std::integral_constant<int, 4>{}); break;
          case 8: attend(std::integral_constant<int, 8>{}); break;
          default: attend(std::integral_constant<int, 16>{}); break;
        }
      });
    }
    if (fold) {
      with_float_type(w_kv.dtype, [&](auto w_tag) {
        using W = decltype(w_tag);
        DING_GPU_CHECK(launch_chained(chained, mla_merge_project_kernel<W>,
                                      dim3(unsigned(fold_chunks), unsigned(sh.H), unsigned(n)), dim3(kFoldThreads), 0,
                                      s.handle(), any_float(out), os, static_cast<const W*>(w_kv.data), part, o_lat,
                                      sh, r0));
      });
      continue;
    }
    if (sh.splits > 1)
      DING_GPU_CHECK(launch_chained(chained, mla_merge_kernel,
                                    dim3(unsigned(ceil_div(sh.L, kMergeLatents)), unsigned(sh.H), unsigned(n)),
                                    dim3(kMergeThreads), 0, s.handle(), part, o_lat, sh));
    with_float_type(w_kv.dtype, [&](auto w_tag) {
      using W = decltype(w_tag);
      DING_GPU_CHECK(
          func_set_max_dynamic_shared(reinterpret_cast<const void*>(&mla_project_kernel<W>), int(project_bytes)));
      DING_GPU_CHECK(launch_chained(chained, mla_project_kernel<W>,
                                    dim3(unsigned(ceil_div(sh.Dv, sh.values_per_block)), unsigned(sh.H),
                                         unsigned(ceil_div(n, kProjectRows))),
                                    dim3(kProjectThreads), project_bytes, s.handle(), any_float(out), os,
                                    static_cast<const W*>(w_kv.data), w_vec, static_cast<const float*>(o_lat), sh, r0,
                                    n));
    });
  }
}

MlaShape mla_shape(const ops::MlaDims& d, float scale, int64_t Tq, int64_t Tk) {
  MlaShape sh{};
  sh.H = d.heads, sh.Tq = Tq, sh.Tk = Tk;
  sh.L = int(d.latent), sh.Dr = int(d.rope), sh.Dn = int(d.nope), sh.Dv = int(d.value);
  sh.E = int(d.latent + d.rope);
  sh.scale = scale;
  return sh;
}

// ---- prefill in the expanded form, on tensor cores ---------------------------------------------
// Per key the absorbed form costs 2·H·(2L + Dr) FLOPs for every query that sees it, the expanded
// one 2·H·(Dn + Dr + Dv) (~3.4 times less at DeepSeek-V2's sizes) once every key's k^h and v^h are
// formed, 2·H·(Dn + Dv)·L per key and chunk. From kExpandMinQueries queries on, a chunk forms them
// and attends through the FlashAttention kernel of attention_prefill.cu, whose blocks own 64
// queries of a head and read each key tile once for all of them (the absorbed kernel's blocks are
// single queries, each re-reading its causal band). Per sequence b:
//   latents[t] = cache[b, t, :L]                       contiguous, the product's operand (a copy)
//   kv[t, h] = W_kv^h · latents[t]                     [Tk, heads, Dn + Dv] in the cache dtype (matmul)
//   out[b, :, h] = attention(q[b, :, h], keys [kv[t, h, :Dn] ; cache[b, t, L:]], values kv[t, h, Dn:])
// The keys' rope part is read from the cache row every head shares (attn::SplitRows), never
// copied per head. Keys and values are rounded to the cache dtype, as transformers' 16-bit forward
// rounds its kv_b_proj output, and so are the probabilities that weigh the values (one mma per
// product instead of three parts: the same order of error as the values' own rounding;
// mla_cases.cpp's bound for 16-bit caches allows for all three). Heads go in passes whose kv stays
// within kExpandBytes of scratch.
constexpr int64_t kExpandMinQueries = 64;                   // one query tile of the attention kernel
constexpr int64_t kExpandBytes = int64_t(256) << 20;

// Whether the expanded form takes this prefill: tensor cores for (Dn + Dr, Dv), one 16-bit dtype
// for q, the cache and W, a bf16 output (attention_prefill.cu's precision argument), 16-byte rows.
bool mla_prefill_expands(const GpuStream& s, const ops::MlaPrefillArgs& a, const ops::MlaDims& d) {
  const DType t = a.cache.dtype;
  return a.q.dim(1) >= kExpandMinQueries && (t == DType::bf16 || t == DType::f16) && a.q.dtype == t &&
         a.w_kv.dtype == t && a.out.dtype == DType::bf16 &&
         attn::prefill_mma_takes(s.props(), int(d.nope + d.rope), int(d.value), true) && d.latent % 8 == 0 &&
         d.nope % 8 == 0 && d.value % 8 == 0 && attn::rows_aligned(a.q, 8) && attn::rows_aligned(a.cache, 8) &&
         attn::rows_aligned(a.out, 2);
}

void mla_prefill_expanded(Stream& stream, const ops::MlaPrefillArgs& a, const ops::MlaDims& d, float scale) {
  GpuStream& s = gpu_stream(stream);
  const int64_t Tq = a.q.dim(1), Tk = a.cache.dim(1), H = d.heads, L = d.latent, KV = d.nope + d.value;
  const DType t = a.cache.dtype;
  const size_t elem = dtype_size(t);
  const int64_t pass_heads = std::clamp<int64_t>(kExpandBytes / (Tk * KV * int64_t(elem)), 1, H);
  // 16-byte aligned pieces: the latents, then kv.
  const size_t latent_bytes = (size_t(Tk * L) * elem + 15) / 16 * 16;
  char* const scratch =
      static_cast<char*>(s.scratch(latent_bytes + size_t(Tk * pass_heads * KV) * elem, GpuStream::ScratchSlot::intermediate));
  Device* const device = a.cache.device;
  const Tensor latents = Tensor::view(scratch, device, t, {Tk, L});
  for (int64_t b = 0; b < a.q.dim(0); ++b) {
    const Tensor cache_b = a.cache.select(0, b);
    copy(stream, ops::CopyArgs{latents, cache_b.slice(1, 0, L)});
    for (int64_t h0 = 0; h0 < H; h0 += pass_heads) {
      const int64_t heads = std::min(pass_heads, H - h0);
      const Tensor kv = Tensor::view(scratch + latent_bytes, device, t, {Tk, heads * KV});
      matmul(stream, ops::MatmulArgs{kv, latents, a.w_kv.slice(0, h0, h0 + heads).reshape({heads * KV, L}), {}});
      // Head h of the pass: keys [kv[t, h, :Dn] ; cache[b, t, L:]], values kv[t, h, Dn:].
      const Strides3 kv_at{0, heads * KV, KV};
      const Tensor q = a.q.select(0, b).slice(1, h0, h0 + heads), out = a.out.select(0, b).slice(1, h0, h0 + heads);
      attn::PrefillMma p{};
      p.out = attn::operand(out, Strides3{0, out.strides[0], out.strides[1]});
      p.q = q.data;
      p.qs = Strides3{0, q.strides[0], q.strides[1]};
      p.k = attn::SplitRows{kv.data, kv_at, static_cast<const char*>(cache_b.data) + L * int64_t(elem),
                            Strides3{0, cache_b.strides[0], 0}, int(d.nope)};
      p.v = static_cast<const char*>(kv.data) + d.nope * int64_t(elem);
      p.vs = kv_at;
      p.dtype = t;
      p.B = 1, p.Tq = Tq, p.Tk = Tk, p.H = heads, p.Hkv = heads;
      p.DK = int(d.nope + d.rope), p.DV = int(d.value);
      p.causal = true, p.window = 0, p.S = Tk;
      p.scale = scale;
      p.p_rounded = true;
      attn::launch_prefill_mma(s, p);
    }
  }
}

}  // namespace

void mla_prefill(Stream& stream, const ops::MlaPrefillArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), Tk = a.cache.dim(1);
  if (B * Tq * d.heads == 0) return;
  if (mla_prefill_expands(gpu_stream(stream), a, d)) {
    mla_prefill_expanded(stream, a, d, ops::mla_scale(a.params, d));
    return;
  }
  launch_mla(gpu_stream(stream), mla_shape(d, ops::mla_scale(a.params, d), Tq, Tk), B * Tq, a.q, attn::strides3(a.q),
             a.out, attn::strides3(a.out), a.cache, a.w_kv, nullptr, Tensor{});
}

void mla_decode(Stream& stream, const ops::MlaDecodeArgs& a) {
  const ops::MlaDims d = ops::mla_dims(a.q, a.cache, a.w_kv);
  const int64_t B = a.q.dim(0), S = a.cache.dim(1);
  if (B * d.heads == 0) return;
  if (S == 0)  // every length is outside [1, S]: nothing to attend (the host backends raise too)
    throw Error(ErrorCode::invalid_argument,
                "mla_decode: the cache holds no positions (cache " + a.cache.shape_str() + ")");
  launch_mla(gpu_stream(stream), mla_shape(d, ops::mla_scale(a.params, d), 1, S), B, a.q, attn::strides_bhd(a.q), a.out,
             attn::strides_bhd(a.out), a.cache, a.w_kv, static_cast<const int32_t*>(a.seq_lens.data), a.latent_new);
}

DING_GPU_END
