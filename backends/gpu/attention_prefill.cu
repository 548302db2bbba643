// attention_prefill on the GPU: FlashAttention-2 (Dao 2023) over query tiles, on tensor cores
// (mma.sync m16n8k16, NVIDIA sm_80+) for 16-bit q/k/v with a bf16 output and D = 64 or 128, on
// f32 SIMT tiles for everything else up to D = 256, and through the generic one-row kernel
// (attention_rows.cu) above that.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "attention.cuh"
#include "check.h"
#include "cp_async.cuh"
#include "kernels.h"
#include "attention_mma.cuh"
#include "mma_sync.cuh"

DING_GPU_BEGIN
namespace {

using namespace attn;

// ---- prefill: FlashAttention-2 ----------------------------------------------------------------
//
// A block owns BQ query rows of one (b, h) and walks the key tiles [j0, j0 + BK) from the first
// key its first row sees to the last key its last row sees (causal: tiles above the diagonal are
// never loaded; with a sliding window, neither are tiles below the band). 256 threads form a
// 16 × 16 grid: thread (ty, tx) scores rows ty·RM + m against keys tx + 16·n (so a row's max and
// sum are 16 neighbouring lanes apart, one shuffle butterfly inside any warp size), and owns the
// same rows of O at columns 64·c + 4·tx. Q (scaled) stays in shared memory for the whole block; K
// and then V of a tile share one buffer; P goes through shared memory transposed, so a thread
// reads its RM probabilities of key j as one vector.
constexpr int kPrefillThreads = 256;

template <int DP>
struct PrefillTile {
  static constexpr int BQ = DP <= 128 ? 64 : 32;      // query rows per block
  static constexpr int BK = 32;                       // keys per tile
  static constexpr int RM = BQ / 16, RN = BK / 16;    // S entries per thread: RM rows × RN keys
  static constexpr int CG = DP / 64;                  // float4 column groups of O per thread
  // Row lengths in floats. K rows padded by 4: the 8 lanes of a 16-byte load phase read rows
  // tx + 16n at a stride of DP + 4 floats, 4 banks apart, so they cover all 32 banks once. P
  // rows padded by RM for the same reason on its RM-wide stores.
  static constexpr int QLD = DP, KLD = DP + 4, PLD = BQ + RM;
  static constexpr size_t shared_bytes = sizeof(float) * size_t(BQ * QLD + BK * KLD + BK * PLD);
};

struct PrefillShape {
  int64_t B, Tq, Tk, H, group;  // group = H / Hkv: query head h reads kv head h / group
  int D;
  int64_t q_tiles;              // ceil(Tq / BQ)
  bool causal;
  int64_t window;               // > 0 (causal only): query i sees keys (p − window, p], p = i + Tk − Tq
  int64_t S;                    // slots of k and v: key j at slot j mod S (KeySlots)
};

// A range of keys [begin, end).
struct KeySpan {
  int64_t begin, end;
};

// The keys query i sees: all, or those up to its position p = i + Tk − Tq (causal), from
// p − window + 1 on (a window). Rows past Tq (a tile's padding) get a span clipped to Tk.
__device__ inline KeySpan row_keys(const PrefillShape& sh, int64_t i) {
  if (!sh.causal) return {0, sh.Tk};
  const int64_t p = i + sh.Tk - sh.Tq;
  return {sh.window > 0 ? max(int64_t(0), p - sh.window + 1) : int64_t(0), min(sh.Tk, p + 1)};
}

// The keys that query rows [i0, i0 + rows) see between them: spans only move forward with i.
__device__ inline KeySpan block_keys(const PrefillShape& sh, int64_t i0, int rows) {
  return {row_keys(sh, i0).begin, row_keys(sh, i0 + rows - 1).end};
}

// Whether query i sees key j: row_keys as inequalities on j, written out because the form
// through row_keys keeps the clipped spans of a thread's rows live across the key loop (the SIMT
// kernel at D = 64: 99 registers instead of 64, ptxas sm_90).
__device__ inline bool sees(const PrefillShape& sh, int64_t i, int64_t j) {
  const int64_t p = i + sh.Tk - sh.Tq;
  return j < sh.Tk && (!sh.causal || (j <= p && (sh.window == 0 || j > p - sh.window)));
}

// dst[r][0, DP) = scale · row t0 + r of (b, h) for r < ROWS (at slot(t0 + r) of a cache of `slots`
// slots); zero for rows from `valid` on and for columns from D on, so the tile's padding adds
// nothing to dot products and P·V.
template <int DP, int ROWS>
__device__ inline void stage_tile(float* dst, int ld, const Operand& src, int64_t b, int64_t t0, int64_t h,
                                  int64_t valid, int D, float scale, int64_t slots) {
  constexpr int kQuads = DP / 4;
  const KeySlots slot(slots, t0);
  with_element_type(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(src.data) + b * src.at.b + h * src.at.h;
    for (int idx = threadIdx.x; idx < ROWS * kQuads; idx += kPrefillThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < valid && d < D) x = scaled(load4(base + slot(t0 + r) * src.at.t, d, D, src.vec4), scale);
      *reinterpret_cast<float4*>(dst + r * ld + d) = x;
    }
  });
}

template <int DP>
__global__ void __launch_bounds__(kPrefillThreads)
    attention_prefill_kernel(Operand out, Operand q, Operand k, Operand v, PrefillShape sh, float scale) {
  using Tile = PrefillTile<DP>;
  constexpr int BQ = Tile::BQ, BK = Tile::BK, RM = Tile::RM, RN = Tile::RN, CG = Tile::CG;
  constexpr int QLD = Tile::QLD, KLD = Tile::KLD, PLD = Tile::PLD;
  extern __shared__ float4 shared4[];  // float4: 16-byte aligned for the vector accesses below
  float* Qs = reinterpret_cast<float*>(shared4);  // [BQ][QLD]
  float* KVs = Qs + BQ * QLD;                      // [BK][KLD]: the K tile, then the V tile
  float* Ps = KVs + BK * KLD;                      // [BK][PLD]: P transposed, Ps[j][r]

  // Heaviest causal tiles (the last query rows) first: block order is tile-major, reversed.
  const int64_t heads = sh.B * sh.H, bh = blockIdx.x % heads;
  const int64_t tile = sh.q_tiles - 1 - blockIdx.x / heads;
  const int64_t b = bh / sh.H, h = bh % sh.H, kv_head = h / sh.group;
  const int64_t i0 = tile * BQ;
  const int D = sh.D;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  stage_tile<DP, BQ>(Qs, QLD, q, b, i0, h, sh.Tq - i0, D, scale, sh.Tq);

  float o[RM][CG][4];
  float m_run[RM], l_run[RM];
#pragma unroll
  for (int m = 0; m < RM; ++m) {
    m_run[m] = -INFINITY;
    l_run[m] = 0.0f;
#pragma unroll
    for (int c = 0; c < CG; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][c][e] = 0.0f;
  }

  const KeySpan span = block_keys(sh, i0, BQ);
  for (int64_t j0 = span.begin; j0 < span.end; j0 += BK) {
    __syncthreads();  // the previous tile's readers of KVs and Ps are done (Qs is staged)
    stage_tile<DP, BK>(KVs, KLD, k, b, j0, kv_head, span.end - j0, D, 1.0f, sh.S);
    __syncthreads();

    float s[RM][RN];
#pragma unroll
    for (int m = 0; m < RM; ++m)
#pragma unroll
      for (int n = 0; n < RN; ++n) s[m][n] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < DP; d += 4) {
      if (d >= D) break;  // columns past D are zero in both tiles
      float4 qf[RM], kf[RN];
#pragma unroll
      for (int m = 0; m < RM; ++m) qf[m] = *reinterpret_cast<const float4*>(Qs + (ty * RM + m) * QLD + d);
#pragma unroll
      for (int n = 0; n < RN; ++n) kf[n] = *reinterpret_cast<const float4*>(KVs + (tx + 16 * n) * KLD + d);
#pragma unroll
      for (int m = 0; m < RM; ++m)
#pragma unroll
        for (int n = 0; n < RN; ++n) {
          s[m][n] = fmaf(qf[m].x, kf[n].x, s[m][n]);
          s[m][n] = fmaf(qf[m].y, kf[n].y, s[m][n]);
          s[m][n] = fmaf(qf[m].z, kf[n].z, s[m][n]);
          s[m][n] = fmaf(qf[m].w, kf[n].w, s[m][n]);
        }
    }

    // Online softmax of each row over this tile; masked entries are -inf and weigh 0.
#pragma unroll
    for (int m = 0; m < RM; ++m) {
      const int64_t i = i0 + ty * RM + m;
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < RN; ++n) {
        if (!sees(sh, i, j0 + tx + 16 * n)) s[m][n] = -INFINITY;
        tile_max = fmaxf(tile_max, s[m][n]);
      }
#pragma unroll
      for (int lane_mask = 8; lane_mask > 0; lane_mask /= 2) tile_max = fmaxf(tile_max, shfl_xor(tile_max, lane_mask));
      const float m_new = fmaxf(m_run[m], tile_max);
      const float alpha = exp_from(m_run[m], m_new);
      float tile_sum = 0.0f;
#pragma unroll
      for (int n = 0; n < RN; ++n) {
        s[m][n] = exp_from(s[m][n], m_new);
        tile_sum += s[m][n];
      }
#pragma unroll
      for (int lane_mask = 8; lane_mask > 0; lane_mask /= 2) tile_sum += shfl_xor(tile_sum, lane_mask);
      l_run[m] = l_run[m] * alpha + tile_sum;
      m_run[m] = m_new;
#pragma unroll
      for (int c = 0; c < CG; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[m][c][e] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < RN; ++n) {
      float* dst = Ps + (tx + 16 * n) * PLD + ty * RM;
      if constexpr (RM == 4) {
        *reinterpret_cast<float4*>(dst) = make_float4(s[0][n], s[1][n], s[2][n], s[3][n]);
      } else {
        static_assert(RM == 2, "P stores are written for 2 or 4 rows per thread");
        *reinterpret_cast<float2*>(dst) = make_float2(s[0][n], s[1][n]);
      }
    }
    __syncthreads();  // P is complete and nobody reads the K tile any more
    // V rows past the span are zero, not stale: their P is 0, and 0 · NaN would poison O.
    stage_tile<DP, BK>(KVs, KLD, v, b, j0, kv_head, span.end - j0, D, 1.0f, sh.S);
    __syncthreads();

#pragma unroll 4
    for (int j = 0; j < BK; ++j) {
      float p[RM];
      if constexpr (RM == 4) {
        const float4 p4 = *reinterpret_cast<const float4*>(Ps + j * PLD + ty * RM);
        p[0] = p4.x, p[1] = p4.y, p[2] = p4.z, p[3] = p4.w;
      } else {
        const float2 p2 = *reinterpret_cast<const float2*>(Ps + j * PLD + ty * RM);
        p[0] = p2.x, p[1] = p2.y;
      }
#pragma unroll
      for (int c = 0; c < CG; ++c) {
        if (64 * c >= D) break;  // whole column groups past D (uniform across the block)
        const float4 vv = *reinterpret_cast<const float4*>(KVs + j * KLD + 64 * c + 4 * tx);
#pragma unroll
        for (int m = 0; m < RM; ++m) {
          o[m][c][0] = fmaf(p[m], vv.x, o[m][c][0]);
          o[m][c][1] = fmaf(p[m], vv.y, o[m][c][1]);
          o[m][c][2] = fmaf(p[m], vv.z, o[m][c][2]);
          o[m][c][3] = fmaf(p[m], vv.w, o[m][c][3]);
        }
      }
    }
  }

  with_element_type(out.dtype, [&](auto tag) {
    using T = decltype(tag);
#pragma unroll
    for (int m = 0; m < RM; ++m) {
      const int64_t i = i0 + ty * RM + m;
      if (i >= sh.Tq) continue;
      T* row = static_cast<T*>(out.data) + out.at.at(b, i, h);
      const float inv_l = 1.0f / l_run[m];
#pragma unroll
      for (int c = 0; c < CG; ++c) {
        const int d = 64 * c + 4 * tx;
        if (d < D) store4(row, d, D, out.vec4, scaled(make_float4(o[m][c][0], o[m][c][1], o[m][c][2], o[m][c][3]), inv_l));
      }
    }
  });
}

// ---- prefill on tensor cores: mma.sync m16n8k16 (sm_80+) ---------------------------------------
//
// The same FlashAttention-2 walk for f16/bf16 q, k, v (one dtype) and (DK, DV) = (64, 64),
// (128, 128) or (192, 128) (DeepSeek's expanded latent attention: mla.cu). A block of 4 warps owns
// 64 query rows of one (b, h), 16 per warp; K and V tiles of 64 keys sit in shared memory as
// stored. Each warp keeps its Q rows as A fragments, computes S = Q·Kᵀ into f32 accumulators, runs
// the online softmax on them (a row lives in the 4 lanes of a quad), and feeds P back as A
// fragments for O += P·V (the accumulator layout of two n-tiles is the A layout of one k-step, so
// P never leaves registers). A key row may come in two parts (attn::SplitRows): MLA's per-head
// W_uk·c and the rope key all heads share.
//
// P has to be 16-bit for the mma. Rounded once (PrefillMma::p_rounded: mla_prefill's expanded
// form, whose keys and values are rounded already), its 2^-9 (bf16) relative error would put the
// output's NMSE near the output dtype's own rounding error, far above the parity bound (4 flips
// plus 0.1%). So P is a sum of 16-bit parts and P·V takes one mma per part: two parts for f16
// (remainder 2^-24), three for bf16 (2^-27; with two, the 2^-18 remainder flipped 4 times as many
// bf16 outputs as the SIMT kernel, up to half the bound). f16 outputs, 8 times finer, went over
// their bound in 1 of ~25 seeded runs even with f16 inputs (the tensor cores' f32 accumulation
// truncates, so its error does not average out), and f32 outputs (bound 5e-12) never fit: both
// stay on the SIMT kernel.
constexpr int kMmaThreads = 128;
constexpr int kMmaRows = 64, kMmaKeys = 64;

template <int DK, int DV>
struct MmaTile {
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix land in 8 different 16-byte
  // bank groups (pitches of 144, 272 or 400 bytes: an odd number of groups apart).
  static constexpr int kPitchK = DK + 8, kPitchV = DV + 8;  // elements
  // K/V tiles in flight: while the block computes on one, the next Stages - 1 are being copied
  // (cp.async), so the walk over the key tiles does not wait a memory round trip per tile. Q
  // lands in the last stage's K tile and leaves it for registers before that stage is first
  // refilled, so it costs no shared memory of its own: 55 KB per block at (64, 64), 70 KB at
  // (128, 128), 86 KB at (192, 128): two blocks per SM on an H100, one within an RTX 4090's 99 KB.
  static constexpr int kStages = DK == 64 ? 3 : 2;
  static constexpr int kKTile = kMmaKeys * kPitchK, kStageElems = kKTile + kMmaKeys * kPitchV;
  static constexpr size_t shared_bytes = size_t(kStages * kStageElems) * sizeof(uint16_t);
  static_assert(kMmaRows <= kMmaKeys, "Q fits a K tile");
};

#if defined(DING_GPU_NVIDIA_MMA)
// dst[r][0, D) = row t0 + r for r < 64 (rows `pitch` elements apart), zero from row `valid` on:
// 16-byte cp.async copies this thread issues (the caller commits and waits). Row t lives at slot(t)
// of a cache of `slots` slots; its elements [0, split) at first + slot · first_stride, the rest at
// second + slot · second_stride.
template <int D, class T>
__device__ inline void copy_mma_tile(T* dst, int pitch, const T* first, int64_t first_stride, const T* second,
                                     int64_t second_stride, int split, int64_t t0, int64_t valid, int64_t slots) {
  constexpr int kChunks = D / 8;
  const KeySlots slot(slots, t0);
  for (int idx = threadIdx.x; idx < kMmaRows * kChunks; idx += kMmaThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool in = r < valid;
    const T* src = first;
    if (in) src = c < split ? first + slot(t0 + r) * first_stride + c : second + slot(t0 + r) * second_stride + (c - split);
    cp_async_16(smem_address(dst + r * pitch + c), src, in ? 16 : 0);
  }
}
#endif  // DING_GPU_NVIDIA_MMA

// Asking for 2 blocks per SM caps registers at 255, the kernel's need (160-238); left free, ptxas
// squeezed the f16, D = 64 instance into 128 registers with spills.
template <class T, int DK, int DV, int PParts>
__global__ void __launch_bounds__(kMmaThreads, launch_min_blocks(kMmaThreads, 2))
    attention_prefill_mma_kernel(Operand out, const T* q, Strides3 qs, SplitRows k, const T* v, Strides3 vs,
                                 PrefillShape sh, float scale) {
#if defined(DING_GPU_NVIDIA_MMA)
  using Tile = MmaTile<DK, DV>;
  constexpr int kPitchK = Tile::kPitchK, kPitchV = Tile::kPitchV, kSteps = DK / 16;
  constexpr int kStages = Tile::kStages;
  extern __shared__ uint4 shared_words[];
  T* const KVs = reinterpret_cast<T*>(shared_words);  // per stage: K [64][kPitchK], then V [64][kPitchV]
  auto stage_of = [&](int t) { return KVs + (t % kStages) * Tile::kStageElems; };
  T* const Qs = stage_of(kStages - 1);                // [64][kPitchK] until the first refill of that stage

  const int64_t heads = sh.B * sh.H, bh = blockIdx.x % heads;
  const int64_t tile = sh.q_tiles - 1 - blockIdx.x / heads;  // heaviest causal tiles first
  const int64_t b = bh / sh.H, h = bh % sh.H, kv_head = h / sh.group;
  const int64_t i0 = tile * kMmaRows;
  // The fragment layouts of mma.sync are defined for 32-lane warps (this path is NVIDIA-only).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int quad_row = lane / 4, quad_col = lane % 4;  // an accumulator row pair and column pair
  const int row0 = warp * 16;

  // Copies in commit groups: Q, then key tiles 0 … kStages - 2; tile t + kStages - 1 goes out
  // while tile t is computed on. A group per call, empty past the last tile, so that "tile t has
  // landed" is always "at most kStages - 1 groups in flight".
  const KeySpan span = block_keys(sh, i0, kMmaRows);
  const int tiles = int((span.end - span.begin + kMmaKeys - 1) / kMmaKeys);
  const T* const k_first = static_cast<const T*>(k.first) + k.first_at.at(b, 0, kv_head);
  const T* const k_second = static_cast<const T*>(k.second) + k.second_at.at(b, 0, kv_head);
  const T* const v_rows = v + vs.at(b, 0, kv_head);
  auto copy_kv = [&](int t) {
    if (t < tiles) {
      const int64_t j0 = span.begin + int64_t(t) * kMmaKeys;
      copy_mma_tile<DK>(stage_of(t), kPitchK, k_first, k.first_at.t, k_second, k.second_at.t, k.split, j0,
                        span.end - j0, sh.S);
      copy_mma_tile<DV>(stage_of(t) + Tile::kKTile, kPitchV, v_rows, vs.t, v_rows, vs.t, DV, j0, span.end - j0, sh.S);
    }
    cp_async_commit();
  };
  const T* const q_rows = q + qs.at(b, 0, h);
  copy_mma_tile<DK>(Qs, kPitchK, q_rows, qs.t, q_rows, qs.t, DK, i0, sh.Tq - i0, sh.Tq);
  cp_async_commit();
  for (int t = 0; t < kStages - 1; ++t) copy_kv(t);
  cp_async_wait<kStages - 1>();  // Q (the oldest group) has landed for this thread's copies ...
  __syncthreads();                // ... and for every thread's
  uint32_t qa[kSteps][4];
  load_a_fragments(qa, Qs + row0 * kPitchK, kPitchK, lane);

  float o[DV / 8][4];
#pragma unroll
  for (int nt = 0; nt < DV / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f};  // rows quad_row and quad_row + 8
  const int64_t row_i[2] = {i0 + row0 + quad_row, i0 + row0 + quad_row + 8};

  for (int t = 0; t < tiles; ++t) {
    // Every warp is done with tile t - 1 (t = 0: with Q), whose stage is refilled now.
    __syncthreads();
    copy_kv(t + kStages - 1);
    cp_async_wait<kStages - 1>();  // tile t has landed for this thread's copies ...
    __syncthreads();                // ... and for every thread's
    const int64_t j0 = span.begin + int64_t(t) * kMmaKeys;
    const T* Ks = stage_of(t);
    const T* Vs = Ks + Tile::kKTile;

    float s[kMmaKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
    for (int ntp = 0; ntp < kMmaKeys / 16; ++ntp)
      add_scores16<T, kSteps>(s[2 * ntp], s[2 * ntp + 1], qa, Ks + ntp * 16 * kPitchK, kPitchK, lane);

    // Online softmax; element e of n-tile nt is row quad_row + 8·(e / 2), key 8·nt + 2·quad_col + e % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool visible = sees(sh, row_i[e / 2], j0 + nt * 8 + 2 * quad_col + e % 2);
        s[nt][e] = visible ? s[nt][e] * scale : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 2));
      const float m_new = fmaxf(m_run[r], tile_max[r]);
      alpha[r] = exp_from_fast(m_run[r], m_new);
      m_run[r] = m_new;
      l_part[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp_from_fast(s[nt][e], m_run[e / 2]);
        l_part[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int nt = 0; nt < DV / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] *= alpha[e / 2];

#pragma unroll
    for (int kp = 0; kp < kMmaKeys / 16; ++kp)
      add_pv16<T, DV, PParts>(o, s[2 * kp], s[2 * kp + 1], Vs + kp * 16 * kPitchV, kPitchV, lane);
  }

  float inv_l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_part[r] += shfl_xor(l_part[r], 1);
    l_part[r] += shfl_xor(l_part[r], 2);
    inv_l[r] = 1.0f / l_part[r];
  }
  with_element_type(out.dtype, [&](auto tag) {
    using Out = decltype(tag);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row_i[r] >= sh.Tq) continue;
      Out* row = static_cast<Out*>(out.data) + out.at.at(b, row_i[r], h);
#pragma unroll
      for (int nt = 0; nt < DV / 8; ++nt) {
        Pack<Out, 2> pair;
        pair.v[0] = from_float<Out>(o[nt][2 * r] * inv_l[r]);
        pair.v[1] = from_float<Out>(o[nt][2 * r + 1] * inv_l[r]);
        store_pack(row + nt * 8 + 2 * quad_col, pair);
      }
    }
  });
#endif  // DING_GPU_NVIDIA_MMA
}

// Calls f(DK, DV, rounded) as integral constants for the instances of the tensor-core kernel:
// (64, 64) and (128, 128) with P in parts (attention_prefill), (192, 128) with P rounded
// (mla_prefill's expanded form); false for anything else.
template <class F>
bool with_mma_instance(int DK, int DV, bool p_rounded, F&& f) {
  using std::integral_constant;
  using Full = std::false_type;
  if (DK == 64 && DV == 64 && !p_rounded) f(integral_constant<int, 64>{}, integral_constant<int, 64>{}, Full{});
  else if (DK == 128 && DV == 128 && !p_rounded) f(integral_constant<int, 128>{}, integral_constant<int, 128>{}, Full{});
  else if (DK == 192 && DV == 128 && p_rounded) f(integral_constant<int, 192>{}, integral_constant<int, 128>{}, std::true_type{});
  else return false;
  return true;
}

}  // namespace

bool attn::prefill_mma_takes(const Props& props, int DK, int DV, bool p_rounded) {
#if defined(DING_GPU_NVIDIA)
  bool fits = false;
  with_mma_instance(DK, DV, p_rounded, [&](auto dk, auto dv, auto) {
    fits = MmaTile<decltype(dk)::value, decltype(dv)::value>::shared_bytes <= props.shared_per_block_optin;
  });
  return props.has_mma_sync() && fits;
#else
  (void)props, (void)DK, (void)DV, (void)p_rounded;
  return false;
#endif
}

void attn::launch_prefill_mma(GpuStream& s, const PrefillMma& p) {
#if defined(DING_GPU_NVIDIA)
  const PrefillShape sh{p.B, p.Tq, p.Tk, p.H, p.H / p.Hkv, p.DK, ceil_div(p.Tq, kMmaRows), p.causal, p.window, p.S};
  auto launch = [&](auto tag, auto dk, auto dv, auto rounded) {
    using T = decltype(tag);
    constexpr int DK = decltype(dk)::value, DV = decltype(dv)::value;
    const auto kernel = &attention_prefill_mma_kernel<T, DK, DV, decltype(rounded)::value ? 1 : kPParts<T>>;
    const size_t shared = MmaTile<DK, DV>::shared_bytes;
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(shared)));
    kernel<<<unsigned(sh.q_tiles * p.B * p.H), kMmaThreads, shared, s.handle()>>>(
        p.out, static_cast<const T*>(p.q), p.qs, p.k, static_cast<const T*>(p.v), p.vs, sh, p.scale);
  };
  const bool known = with_mma_instance(p.DK, p.DV, p.p_rounded, [&](auto dk, auto dv, auto rounded) {
    if (p.dtype == DType::bf16) launch(ding::bf16{}, dk, dv, rounded);
    else launch(ding::f16{}, dk, dv, rounded);
  });
  if (!known)
    throw Error(ErrorCode::not_implemented, "attention on tensor cores: no kernel for head dims " + std::to_string(p.DK) +
                                                " and " + std::to_string(p.DV) + (p.p_rounded ? ", P rounded" : ", P in parts"));
  DING_GPU_CHECK_LAUNCH("attention_prefill_mma_kernel");
#else
  (void)s, (void)p;
  throw Error(ErrorCode::not_implemented, "attention on tensor cores: not in this build");
#endif
}

void attention_prefill(Stream& stream, const ops::AttentionPrefillArgs& a) {
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), H = a.q.dim(2), D = a.q.dim(3);
  const int64_t Tk = ops::key_positions(a), S = a.k.dim(1), Hkv = a.k.dim(2);
  if (B * Tq * H * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const float scale = ops::attention_scale(a.params, D);
  const Operand out = operand(a.out, strides3(a.out)), q = operand(a.q, strides3(a.q));
  const Operand k = operand(a.k, strides3(a.k)), v = operand(a.v, strides3(a.v));

  auto launch_tiled = [&](auto dp) {
    constexpr int DP = decltype(dp)::value;
    using Tile = PrefillTile<DP>;
    if (Tile::shared_bytes > s.props().shared_per_block_optin) return false;
    const PrefillShape sh{B, Tq, Tk, H, H / Hkv, int(D), ceil_div(Tq, Tile::BQ), a.params.causal, a.params.window, S};
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(&attention_prefill_kernel<DP>),
                                               int(Tile::shared_bytes)));
    attention_prefill_kernel<DP><<<unsigned(sh.q_tiles * B * H), kPrefillThreads, Tile::shared_bytes, s.handle()>>>(
        out, q, k, v, sh, scale);
    DING_GPU_CHECK_LAUNCH("attention_prefill_kernel");
    return true;
  };
  // Tensor cores: one 16-bit dtype for q, k, v, a bf16 output (the precision argument above), a
  // head dim the kernel has, and rows whose starts allow the 16-byte staging and the paired stores.
  const DType t = a.q.dtype;
  if (prefill_mma_takes(s.props(), int(D), int(D), false) && (t == DType::f16 || t == DType::bf16) && a.k.dtype == t &&
      a.v.dtype == t && a.out.dtype == DType::bf16 && rows_aligned(a.q, 8) && rows_aligned(a.k, 8) &&
      rows_aligned(a.v, 8) && rows_aligned(a.out, 2)) {
    PrefillMma p{};
    p.out = out;
    p.q = a.q.data;
    p.qs = strides3(a.q);
    p.k = SplitRows{a.k.data, strides3(a.k), a.k.data, strides3(a.k), int(D)};  // whole rows
    p.v = a.v.data;
    p.vs = strides3(a.v);
    p.dtype = t;
    p.B = B, p.Tq = Tq, p.Tk = Tk, p.H = H, p.Hkv = Hkv;
    p.DK = p.DV = int(D);
    p.causal = a.params.causal, p.window = a.params.window, p.S = S;
    p.scale = scale;
    p.p_rounded = false;
    launch_prefill_mma(s, p);
    return;
  }
  bool done = false;
  if (D <= 64) done = launch_tiled(std::integral_constant<int, 64>{});
  else if (D <= 128) done = launch_tiled(std::integral_constant<int, 128>{});
  else if (D <= 256) done = launch_tiled(std::integral_constant<int, 256>{});
  if (!done)
    launch_rows(s, out, q, a.k, strides3(a.k), a.v, strides3(a.v),
                RowShape{B, Tq, Tk, H, H / Hkv, int(D), a.params.causal, nullptr, a.params.window, S, false}, scale);
}

DING_GPU_END
