// Attention on the GPU: the KV-cache append, fused prefill (FlashAttention-2, Dao 2023) and
// split-sequence decode (flash-decoding), with one generic kernel for what the fast ones do not
// cover (head dims above 256, k and v caches of different dtypes).
//
// Every kernel keeps an online softmax per query row: a running max m, a running sum
// l = Σ e^(s - m) and an unnormalised output acc = Σ e^(s - m) · v, rescaled by e^(m_old - m_new)
// when m grows. Scores are (scale · q) · k in f32 (q pre-multiplied, as the CPU backend does);
// the exponentials are the accurate expf, since the f32 parity bound (5e-12) has no room for a
// fast-math exp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <type_traits>

#include "check.h"
#include "elements.cuh"
#include "kernels.h"
#include "reduce.cuh"
#include "stream.h"

namespace ding::gpu {
namespace {

// Strides (elements) of a [B, S|T, Hkv, D] tensor whose last dim is contiguous.
struct Strides3 {
  int64_t b, t, h;
  __device__ int64_t at(int64_t bi, int64_t ti, int64_t hi) const { return bi * b + ti * t + hi * h; }
};

Strides3 strides3(const Tensor& x) { return {x.strides[0], x.strides[1], x.strides[2]}; }
// [B, H, D] (decode's q and out) seen as [B, 1, H, D].
Strides3 strides_bhd(const Tensor& x) { return {x.strides[0], 0, x.strides[1]}; }

// One block per (b, t): all Hkv·D elements of that position, for k and v. A start that does not
// fit leaves the cache untouched (the host backends raise an Error instead; see ops/attention.h).
template <class Cache, class In>
__global__ void kv_append_kernel(Cache* k_cache, Strides3 kc, Cache* v_cache, Strides3 vc, const In* k, Strides3 ks,
                                 const In* v, Strides3 vs, const int32_t* start, int64_t T, int64_t S, int64_t Hkv,
                                 int64_t D) {
  const int64_t b = blockIdx.x / T, t = blockIdx.x % T;
  const int64_t first = start[b];
  if (first < 0 || first + T > S) return;
  const int64_t pos = first + t;
  for (int64_t i = threadIdx.x; i < Hkv * D; i += blockDim.x) {
    const int64_t h = i / D, d = i % D;
    k_cache[kc.at(b, pos, h) + d] = from_float<Cache>(to_float(k[ks.at(b, t, h) + d]));
    v_cache[vc.at(b, pos, h) + d] = from_float<Cache>(to_float(v[vs.at(b, t, h) + d]));
  }
}

// Whether every row start of x (all dims but the last) is a multiple of `elems` elements, so
// `elems` elements from a row start move as one aligned access.
bool rows_aligned(const Tensor& x, int64_t elems) {
  const int64_t bytes = elems * int64_t(dtype_size(x.dtype));
  if (reinterpret_cast<uintptr_t>(x.data) % uintptr_t(bytes) != 0) return false;
  for (int d = 0; d + 1 < x.rank; ++d)
    if (x.strides[d] % elems != 0) return false;
  return true;
}

// One B×T×heads×D operand whose dtype is read at run time: tile staging and the final store are
// off the hot loops, so one kernel serves every mix of q/k/v/out dtypes.
struct Operand {
  void* data;
  DType dtype;
  Strides3 at;
  bool vec4;  // rows_aligned(·, 4): 4 elements from a multiple of 4 are one aligned access
};

Operand operand(const Tensor& x, Strides3 at) { return {x.data, x.dtype, at, rows_aligned(x, 4)}; }

// Calls f(T{}) with T the storage type of a float dtype, on the device.
template <class F>
__device__ inline void with_element_type(DType t, F&& f) {
  if (t == DType::f32) f(float{});
  else if (t == DType::f16) f(ding::f16{});
  else f(ding::bf16{});
}

// Elements [d, d + 4) of a row as f32, zero from D on. `vec`: the row start is a multiple of 4
// elements (d always is), so a full quad is one 16-byte (f32) or 8-byte (f16/bf16) load.
template <class T>
__device__ inline float4 load4(const T* row, int d, int D, bool vec) {
  if (vec && d + 4 <= D) {
    const Pack<T, 4> p = *reinterpret_cast<const Pack<T, 4>*>(row + d);
    return make_float4(to_float(p.v[0]), to_float(p.v[1]), to_float(p.v[2]), to_float(p.v[3]));
  }
  float x[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) x[c] = d + c < D ? to_float(row[d + c]) : 0.0f;
  return make_float4(x[0], x[1], x[2], x[3]);
}

// Stores the elements of x that fall below D at row[d, d + 4).
template <class T>
__device__ inline void store4(T* row, int d, int D, bool vec, float4 x) {
  if (vec && d + 4 <= D) {
    Pack<T, 4> p;
    p.v[0] = from_float<T>(x.x);
    p.v[1] = from_float<T>(x.y);
    p.v[2] = from_float<T>(x.z);
    p.v[3] = from_float<T>(x.w);
    *reinterpret_cast<Pack<T, 4>*>(row + d) = p;
    return;
  }
  const float y[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int c = 0; c < 4; ++c)
    if (d + c < D) row[d + c] = from_float<T>(y[c]);
}

__device__ inline float4 scaled(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }

// e^(x - m) for a running max m that may still be -inf (nothing seen yet): 0 instead of NaN.
__device__ inline float exp_from(float x, float m) { return x == -INFINITY ? 0.0f : expf(x - m); }

// ---- prefill: FlashAttention-2 ----------------------------------------------------------------
//
// A block owns BQ query rows of one (b, h) and walks the key tiles [j0, j0 + BK) up to the last
// key its last row sees (causal: tiles above the diagonal are never loaded). 256 threads form a
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
};

// dst[r][0, DP) = scale · row t0 + r of (b, h) for r < ROWS; zero for rows from `valid` on and
// for columns from D on, so the tile's padding adds nothing to dot products and P·V.
template <int DP, int ROWS>
__device__ inline void stage_tile(float* dst, int ld, const Operand& src, int64_t b, int64_t t0, int64_t h,
                                  int64_t valid, int D, float scale) {
  constexpr int kQuads = DP / 4;
  with_element_type(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(src.data) + b * src.at.b + h * src.at.h;
    for (int idx = threadIdx.x; idx < ROWS * kQuads; idx += kPrefillThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < valid && d < D) x = scaled(load4(base + (t0 + r) * src.at.t, d, D, src.vec4), scale);
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
  const int64_t shift = sh.Tk - sh.Tq;  // query i sits at key position i + shift
  const int D = sh.D;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  stage_tile<DP, BQ>(Qs, QLD, q, b, i0, h, sh.Tq - i0, D, scale);

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

  // Causal: the block's last row, i0 + BQ - 1, sees keys up to i0 + BQ - 1 + shift.
  const int64_t kv_end = sh.causal ? min(sh.Tk, i0 + BQ + shift) : sh.Tk;
  for (int64_t j0 = 0; j0 < kv_end; j0 += BK) {
    __syncthreads();  // the previous tile's readers of KVs and Ps are done (Qs is staged)
    stage_tile<DP, BK>(KVs, KLD, k, b, j0, kv_head, sh.Tk - j0, D, 1.0f);
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
        const int64_t j = j0 + tx + 16 * n;
        if (j >= sh.Tk || (sh.causal && j > i + shift)) s[m][n] = -INFINITY;
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
    // V rows past Tk are zero, not stale: their P is 0, and 0 · NaN would poison O.
    stage_tile<DP, BK>(KVs, KLD, v, b, j0, kv_head, sh.Tk - j0, D, 1.0f);
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
// The same FlashAttention-2 walk for f16/bf16 q, k, v (one dtype), a bf16 output and D = 64 or
// 128. A block of 4 warps owns 64 query rows of one (b, h), 16 per warp; K and V tiles of 64
// keys sit in shared memory as stored. Each warp keeps its Q rows as A fragments, computes
// S = Q·Kᵀ into f32 accumulators, runs the online softmax on them (a row lives in the 4 lanes of
// a quad), and feeds P back as A fragments for O += P·V (the accumulator layout of two n-tiles is
// the A layout of one k-step, so P never leaves registers).
//
// P has to be 16-bit for the mma. Rounded once, its 2^-9 (bf16) relative error would put the
// output's NMSE near the output dtype's own rounding error, far above the parity bound (4 flips
// plus 0.1%). So P is a sum of 16-bit parts and P·V takes one mma per part: two parts for f16
// (remainder 2^-24), three for bf16 (2^-27; with two, the 2^-18 remainder flipped 4 times as many
// bf16 outputs as the SIMT kernel, up to half the bound). f16 outputs, 8 times finer, went over
// their bound in 1 of ~25 seeded runs even with f16 inputs (the tensor cores' f32 accumulation
// truncates, so its error does not average out), and f32 outputs (bound 5e-12) never fit: both
// stay on the SIMT kernel.
constexpr int kMmaThreads = 128;
constexpr int kMmaRows = 64, kMmaKeys = 64;

template <int DH>
struct MmaTile {
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix land in 8 different 16-byte
  // bank groups (pitch 144 or 272 bytes, 9 or 17 groups apart).
  static constexpr int kPitch = DH + 8;  // elements
  static constexpr size_t shared_bytes = size_t(kMmaRows + 2 * kMmaKeys) * kPitch * sizeof(uint16_t);  // Q, K, V
};

#if defined(DING_GPU_NVIDIA_MMA)
__device__ inline uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// d += a·b for one 16×8×16 tile, f32 accumulation.
template <class T>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, ding::bf16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// x0, x1 as N pairs of T (x0 in the low half: the lower column) that sum to them: part 0 is
// round(x), each next part rounds what the previous ones left (exactly, in f32).
template <class T, int N>
__device__ inline void split_pair(float x0, float x1, uint32_t (&part)[N][4], int reg) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const T a = from_float<T>(x0), b = from_float<T>(x1);
    part[n][reg] = uint32_t(a.bits) | uint32_t(b.bits) << 16;
    x0 -= to_float(a);
    x1 -= to_float(b);
  }
}

// dst[r][0, DH) = row t0 + r for r < 64 (16 bytes at a time), zero from row `valid` on.
template <int DH, class T>
__device__ inline void stage_mma_tile(T* dst, const T* base, int64_t row_stride, int64_t valid) {
  constexpr int kChunks = DH / 8;
  for (int idx = threadIdx.x; idx < kMmaRows * kChunks; idx += kMmaThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < valid) x = *reinterpret_cast<const uint4*>(base + r * row_stride + c);
    *reinterpret_cast<uint4*>(dst + r * MmaTile<DH>::kPitch + c) = x;
  }
}
#endif  // DING_GPU_NVIDIA_MMA

// Asking for 2 blocks per SM caps registers at 255, the kernel's need (160-238); left free, ptxas
// squeezed the f16, D = 64 instance into 128 registers with spills.
template <class T, int DH>
__global__ void __launch_bounds__(kMmaThreads, launch_min_blocks(kMmaThreads, 2))
    attention_prefill_mma_kernel(Operand out, const T* q, Strides3 qs, const T* k, Strides3 ks, const T* v, Strides3 vs,
                                 PrefillShape sh, float scale) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr int kPitch = MmaTile<DH>::kPitch, kSteps = DH / 16;
  constexpr int kParts = std::is_same_v<T, ding::bf16> ? 3 : 2;  // P = Σ parts, see above
  extern __shared__ uint4 shared_words[];
  T* Qs = reinterpret_cast<T*>(shared_words);  // [64][kPitch]
  T* Ks = Qs + kMmaRows * kPitch;               // [64][kPitch]
  T* Vs = Ks + kMmaKeys * kPitch;               // [64][kPitch]

  const int64_t heads = sh.B * sh.H, bh = blockIdx.x % heads;
  const int64_t tile = sh.q_tiles - 1 - blockIdx.x / heads;  // heaviest causal tiles first
  const int64_t b = bh / sh.H, h = bh % sh.H, kv_head = h / sh.group;
  const int64_t i0 = tile * kMmaRows, shift = sh.Tk - sh.Tq;
  // The fragment layouts of mma.sync are defined for 32-lane warps (this path is NVIDIA-only).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int quad_row = lane / 4, quad_col = lane % 4;  // an accumulator row pair and column pair
  const int row0 = warp * 16;

  stage_mma_tile<DH>(Qs, q + qs.at(b, i0, h), qs.t, sh.Tq - i0);
  __syncthreads();
  uint32_t qa[kSteps][4];
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
    ldmatrix_x4(qa[kk], Qs + (row0 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);

  float o[DH / 8][4];
#pragma unroll
  for (int nt = 0; nt < DH / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f};  // rows quad_row and quad_row + 8
  const int64_t row_i[2] = {i0 + row0 + quad_row, i0 + row0 + quad_row + 8};

  const int64_t kv_end = sh.causal ? min(sh.Tk, i0 + kMmaRows + shift) : sh.Tk;
  for (int64_t j0 = 0; j0 < kv_end; j0 += kMmaKeys) {
    __syncthreads();  // the previous tile's ldmatrix reads are done
    stage_mma_tile<DH>(Ks, k + ks.at(b, j0, kv_head), ks.t, sh.Tk - j0);
    stage_mma_tile<DH>(Vs, v + vs.at(b, j0, kv_head), vs.t, sh.Tk - j0);
    __syncthreads();

    float s[kMmaKeys / 8][4];
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
      for (int ntp = 0; ntp < kMmaKeys / 16; ++ntp) {
        // Matrices: keys +0..7 and +8..15 of the pair × d halves of the k-step.
        uint32_t kb[4];
        ldmatrix_x4(kb, Ks + (ntp * 16 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) % 2) * 8);
        mma_16816<T>(s[2 * ntp], qa[kk], kb[0], kb[1]);
        mma_16816<T>(s[2 * ntp + 1], qa[kk], kb[2], kb[3]);
      }

    // Online softmax; element e of n-tile nt is row quad_row + 8·(e / 2), key 8·nt + 2·quad_col + e % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * quad_col + e % 2;
        const bool visible = j < sh.Tk && (!sh.causal || j <= row_i[e / 2] + shift);
        s[nt][e] = visible ? s[nt][e] * scale : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], shfl_xor(tile_max[r], 2));
      const float m_new = fmaxf(m_run[r], tile_max[r]);
      alpha[r] = exp_from(m_run[r], m_new);
      m_run[r] = m_new;
      l_part[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < kMmaKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp_from(s[nt][e], m_run[e / 2]);
        l_part[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int nt = 0; nt < DH / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] *= alpha[e / 2];

#pragma unroll
    for (int kp = 0; kp < kMmaKeys / 16; ++kp) {
      uint32_t p[kParts][4];  // A fragments of P's parts for keys 16·kp .. 16·kp + 15
      split_pair<T>(s[2 * kp][0], s[2 * kp][1], p, 0);
      split_pair<T>(s[2 * kp][2], s[2 * kp][3], p, 1);
      split_pair<T>(s[2 * kp + 1][0], s[2 * kp + 1][1], p, 2);
      split_pair<T>(s[2 * kp + 1][2], s[2 * kp + 1][3], p, 3);
#pragma unroll
      for (int dtp = 0; dtp < DH / 16; ++dtp) {
        // Transposed: matrices keys +0..7 and +8..15 of the k-step × d tiles 2·dtp and 2·dtp + 1.
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, Vs + (kp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kPitch + dtp * 16 + (lane / 16) * 8);
#pragma unroll
        for (int n = 0; n < kParts; ++n) {
          mma_16816<T>(o[2 * dtp], p[n], vb[0], vb[1]);
          mma_16816<T>(o[2 * dtp + 1], p[n], vb[2], vb[3]);
        }
      }
    }
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
      for (int nt = 0; nt < DH / 8; ++nt) {
        Pack<Out, 2> pair;
        pair.v[0] = from_float<Out>(o[nt][2 * r] * inv_l[r]);
        pair.v[1] = from_float<Out>(o[nt][2 * r + 1] * inv_l[r]);
        *reinterpret_cast<Pack<Out, 2>*>(row + nt * 8 + 2 * quad_col) = pair;
      }
    }
  });
#endif  // DING_GPU_NVIDIA_MMA
}

// ---- generic: one query row per block ---------------------------------------------------------
//
// Any head dim: the scaled q and the f32 accumulator live in shared memory (2·D floats). Each
// step, every warp scores one key (lanes stride over D), then every thread folds the step's
// keys into the columns it owns (d ≡ threadIdx.x mod 256), so acc needs no barrier of its own.
// Slow, and only used where the tiled kernels do not apply.
constexpr int kRowThreads = 256;

struct RowShape {
  int64_t B, Tq, Tk, H, group;
  int D;
  bool causal;
  const int32_t* seq_lens;  // decode: sequence b sees clamp(seq_lens[b], 1, Tk) keys (Tq = 1)
};

template <class K, class V>
__global__ void __launch_bounds__(kRowThreads)
    attention_row_kernel(Operand out, Operand q, const K* k, Strides3 ks, const V* v, Strides3 vs, RowShape sh,
                         float scale) {
  constexpr int kWarps = kRowThreads / warp_size();
  extern __shared__ float4 shared4[];
  float* qs = reinterpret_cast<float*>(shared4);  // [D]
  float* acc = qs + sh.D;                          // [D]
  __shared__ float score[kWarps];

  const int64_t h = blockIdx.x % sh.H, i = (blockIdx.x / sh.H) % sh.Tq, b = blockIdx.x / (sh.H * sh.Tq);
  const int64_t kv_head = h / sh.group;
  const int D = sh.D, lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  int64_t keys = sh.Tk;
  if (sh.seq_lens) keys = min(max(int64_t(sh.seq_lens[b]), int64_t(1)), sh.Tk);
  else if (sh.causal) keys = min(sh.Tk, i + sh.Tk - sh.Tq + 1);

  with_element_type(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* row = static_cast<const T*>(q.data) + q.at.at(b, i, h);
    for (int d = threadIdx.x; d < D; d += kRowThreads) {
      qs[d] = scale * to_float(row[d]);
      acc[d] = 0.0f;
    }
  });
  __syncthreads();

  const K* k_head = k + b * ks.b + kv_head * ks.h;
  const V* v_head = v + b * vs.b + kv_head * vs.h;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int64_t j0 = 0; j0 < keys; j0 += kWarps) {
    const int64_t j = j0 + warp;
    float dot = 0.0f;
    if (j < keys) {
      const K* k_row = k_head + j * ks.t;
      for (int d = lane; d < D; d += warp_size()) dot = fmaf(qs[d], to_float(k_row[d]), dot);
    }
    dot = warp_sum(dot);
    if (lane == 0) score[warp] = j < keys ? dot : -INFINITY;
    __syncthreads();
    // Every thread computes the same weights from the same scores.
    float p[kWarps], step_max = m_run;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) step_max = fmaxf(step_max, score[w]);
    const float alpha = exp_from(m_run, step_max);
    float step_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      p[w] = exp_from(score[w], step_max);
      step_sum += p[w];
    }
    l_run = l_run * alpha + step_sum;
    m_run = step_max;
    for (int d = threadIdx.x; d < D; d += kRowThreads) {
      float a = acc[d] * alpha;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        if (j0 + w < keys) a = fmaf(p[w], to_float(v_head[(j0 + w) * vs.t + d]), a);
      acc[d] = a;
    }
    __syncthreads();  // score[] is rewritten by the next step
  }

  const float inv_l = 1.0f / l_run;
  with_element_type(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* row = static_cast<T*>(out.data) + out.at.at(b, i, h);
    for (int d = threadIdx.x; d < D; d += kRowThreads) row[d] = from_float<T>(acc[d] * inv_l);
  });
}

void launch_rows(GpuStream& s, Operand out, Operand q, const Tensor& k, Strides3 ks, const Tensor& v, Strides3 vs,
                 const RowShape& sh, float scale) {
  const size_t shared = 2 * sizeof(float) * size_t(sh.D);
  if (shared > s.props().shared_per_block_optin)
    throw Error(ErrorCode::not_implemented,
                "attention on the GPU: head dim D = " + std::to_string(sh.D) + " needs " + std::to_string(shared) +
                    " bytes of shared memory per block; this device allows " +
                    std::to_string(s.props().shared_per_block_optin));
  const int64_t blocks = sh.B * sh.Tq * sh.H;
  with_float_type(k.dtype, [&](auto k_tag) {
    with_float_type(v.dtype, [&](auto v_tag) {
      using K = decltype(k_tag);
      using V = decltype(v_tag);
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(&attention_row_kernel<K, V>), int(shared)));
      attention_row_kernel<K, V><<<unsigned(blocks), kRowThreads, shared, s.handle()>>>(
          out, q, static_cast<const K*>(k.data), ks, static_cast<const V*>(v.data), vs, sh, scale);
    });
  });
  DING_GPU_CHECK_LAUNCH("attention_row_kernel");
}

// ---- decode: flash-decoding -------------------------------------------------------------------
//
// Block (b, kv head, head block, split): up to HPB query heads of one kv head's group over the
// split's keys [split·chunk, min(seq_len, (split + 1)·chunk)), so every K/V row loaded serves all
// of those heads. A key is scored by a group of `lanes` lanes (a power of two ≥ D/8, ≤ 32), each
// lane holding 8 elements of q per head and 8 of the row (one 16-byte load for f16/bf16, two for
// f32). A key group takes U keys per step, issues all their K/V loads before any math (so each
// warp keeps U rows in flight instead of waiting out one load latency per key) and folds them
// into the online softmax as one batch (one rescale and no data-dependent branch per step). Each key
// group keeps its own (m, l, acc) per head; at the end they are merged by shuffles inside a warp,
// then across warps through shared memory, and written as the split's partial (or, with one
// split, as the output). A split that starts past seq_len writes the neutral partial (m = -inf,
// l = 0), which the combine skips.
constexpr int kDecodeThreads = 128;
constexpr int kDecodeMaxLanes = 32;  // lanes per key: 8 elements each, so D ≤ 256
constexpr int kMinKeysPerSplit = 128;

struct DecodeShape {
  int64_t H, S, Hkv, group;  // S: cache capacity
  int D;
  int heads;        // query heads per block (≤ HPB)
  int head_blocks;  // blocks per kv head: ceil(group / heads)
  int splits;
  int64_t chunk;    // keys per split
  int lanes;        // lanes per key
};

// The splits' partial states: m and l [B, H, splits], acc [B, H, splits, D].
struct Partials {
  float* m;
  float* l;
  float* acc;
};

// Elements [e0, e0 + 8) of a cache row in their storage type: one 16-byte word for f16/bf16, two
// for f32. Kept packed until used, so the U rows in flight cost 4 or 8 registers each.
template <class T>
struct Slice8 {
  static constexpr int kWords = int(sizeof(T)) * 8 / 16, kPerWord = 8 / kWords;
  Pack<T, kPerWord> word[kWords];
  __device__ float operator[](int c) const { return to_float(word[c / kPerWord].v[c % kPerWord]); }
};

// `at` points at element e0 of a row. `vec`: D is a multiple of 8 and the row start 16-byte
// aligned, so the slice is whole aligned words (or wholly past D, which the caller skips).
// Otherwise element by element, zero from D on.
template <class T>
__device__ inline Slice8<T> load_slice8(const T* at, int e0, int D, bool vec) {
  Slice8<T> x;
  constexpr int kPerWord = Slice8<T>::kPerWord;
  if (vec) {
#pragma unroll
    for (int w = 0; w < Slice8<T>::kWords; ++w) x.word[w] = *reinterpret_cast<const Pack<T, kPerWord>*>(at + w * kPerWord);
    return x;
  }
#pragma unroll
  for (int c = 0; c < 8; ++c) x.word[c / kPerWord].v[c % kPerWord] = e0 + c < D ? at[c] : T{};
  return x;
}

template <class T>
__device__ inline Slice8<T> zero_slice8() {
  Slice8<T> x;
#pragma unroll
  for (int c = 0; c < 8; ++c) x.word[c / Slice8<T>::kPerWord].v[c % Slice8<T>::kPerWord] = T{};
  return x;
}

// At least 4 blocks (16 warps) per SM: the registers' cap (128) still holds q, acc and the U
// slices in flight without spilling for up to 4 heads.
template <class KV, int HPB>
__global__ void __launch_bounds__(kDecodeThreads, launch_min_blocks(kDecodeThreads, 4))
    attention_decode_kernel(Operand out, Operand q, const KV* k, Strides3 ks, const KV* v, Strides3 vs, bool kv_vec,
                            const int32_t* seq_lens, DecodeShape sh, float scale, Partials part) {
  constexpr int kWarps = kDecodeThreads / warp_size();
  constexpr int U = HPB == 1 ? 4 : 2;  // keys in flight per key group (registers: U · 2 slices)
  static_assert(HPB <= 4, "q and acc of more heads do not fit the 128-register budget");
  __shared__ float red_m[kWarps][HPB], red_l[kWarps][HPB], red_w[kWarps][HPB], red_scale[HPB];
  __shared__ float red_acc[kWarps][HPB][8 * kDecodeMaxLanes];

  int64_t idx = blockIdx.x;
  // Head blocks of one kv head and split are neighbours in launch order: the second reads the
  // K/V rows the first brought into L2.
  const int hb = int(idx % sh.head_blocks);
  idx /= sh.head_blocks;
  const int split = int(idx % sh.splits);
  idx /= sh.splits;
  const int64_t kv_head = idx % sh.Hkv, b = idx / sh.Hkv;
  const int64_t h0 = kv_head * sh.group + int64_t(hb) * sh.heads;
  const int heads = int(min(int64_t(sh.heads), sh.group - int64_t(hb) * sh.heads));
  // The length lives on the device: clamp it, never trust it (a host backend would raise).
  const int64_t len = min(max(int64_t(seq_lens[b]), int64_t(1)), sh.S);
  const int64_t begin = int64_t(split) * sh.chunk, end = min(len, begin + sh.chunk);
  const int D = sh.D;

  if (begin >= end) {  // uniform over the block, before any barrier or shuffle
    if (int(threadIdx.x) < heads) {
      const int64_t state = (b * sh.H + h0 + threadIdx.x) * sh.splits + split;
      part.m[state] = -INFINITY;
      part.l[state] = 0.0f;
    }
    return;
  }

  const int lanes = sh.lanes;
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int key_lane = lane % lanes, e0 = 8 * key_lane;
  const int groups_per_warp = warp_size() / lanes;
  const int key_group = warp * groups_per_warp + lane / lanes, key_groups = kWarps * groups_per_warp;

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

  float m_run[HPB], l_run[HPB], acc[HPB][8];
#pragma unroll
  for (int g = 0; g < HPB; ++g) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[g][c] = 0.0f;
  }

  // This key group's rows start at key begin + key_group and advance key_groups rows per key:
  // pointers stepped by a fixed stride, not 64-bit multiplies per key.
  const KV* k_row = k + b * ks.b + kv_head * ks.h + (begin + key_group) * ks.t + e0;
  const KV* v_row = v + b * vs.b + kv_head * vs.h + (begin + key_group) * vs.t + e0;
  const int64_t k_step = key_groups * ks.t, v_step = key_groups * vs.t;
  // Every lane runs the same number of steps (the shuffles need the whole warp); a key past
  // `end` loads nothing and leaves the state alone.
  for (int64_t j0 = begin; j0 < end; j0 += U * key_groups) {
    Slice8<KV> kx[U], vx[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (j0 + u * key_groups + key_group < end && e0 < D) {
        kx[u] = load_slice8(k_row, e0, D, kv_vec);
        vx[u] = load_slice8(v_row, e0, D, kv_vec);
      } else {
        kx[u] = vx[u] = zero_slice8<KV>();
      }
      k_row += k_step;
      v_row += v_step;
    }
    // The U keys as one batch of the online softmax: one rescale per batch, no branches.
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
        score[u] = j0 + u * key_groups + key_group < end ? s : -INFINITY;
        batch_max = fmaxf(batch_max, score[u]);
      }
      // A key group past `end` has batch_max = m_run = -inf: alpha and every p are 0, so its
      // state stays (0, 0, -inf).
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
  // ... then the warps, through shared memory: key group 0 of each warp publishes its state.
  if (lane < lanes) {
#pragma unroll
    for (int g = 0; g < HPB; ++g) {
#pragma unroll
      for (int c = 0; c < 8; ++c) red_acc[warp][g][e0 + c] = acc[g][c];
      if (lane == 0) red_m[warp][g] = m_run[g], red_l[warp][g] = l_run[g];
    }
  }
  __syncthreads();
  if (threadIdx.x < HPB) {
    const int g = threadIdx.x;
    float m_all = -INFINITY, l_all = 0.0f;
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w][g]);
    for (int w = 0; w < kWarps; ++w) {
      red_w[w][g] = exp_from(red_m[w][g], m_all);
      l_all += red_w[w][g] * red_l[w][g];
    }
    if (sh.splits == 1) {
      red_scale[g] = 1.0f / l_all;
    } else if (g < heads) {
      const int64_t state = (b * sh.H + h0 + g) * sh.splits + split;
      part.m[state] = m_all;
      part.l[state] = l_all;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < heads * D; t += kDecodeThreads) {
    const int g = t / D, d = t % D;
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += red_w[w][g] * red_acc[w][g][d];
    if (sh.splits == 1) {
      with_element_type(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        static_cast<T*>(out.data)[out.at.at(b, 0, h0 + g) + d] = from_float<T>(o * red_scale[g]);
      });
    } else {
      part.acc[((b * sh.H + h0 + g) * sh.splits + split) * D + d] = o;
    }
  }
}

// out[b, h] = Σ_s e^(m_s - M) acc_s / Σ_s e^(m_s - M) l_s over the splits with l_s > 0, M = max m_s.
// One block per (b, h). The weights go to shared memory first, so the loop over the splits only
// loads acc (independent loads the compiler can batch); warp w sums the splits s ≡ w (mod warps),
// its lanes over d, and the warps' sums meet in shared memory.
constexpr int kCombineThreads = 256;

__global__ void __launch_bounds__(kCombineThreads)
    attention_decode_combine_kernel(Operand out, Partials part, int64_t H, int D, int splits) {
  constexpr int kWarps = kCombineThreads / warp_size(), kPerLane = 8 * kDecodeMaxLanes / warp_size();
  extern __shared__ float weight[];  // [splits]
  __shared__ float red[32];
  __shared__ float warp_o[kWarps][8 * kDecodeMaxLanes];
  const int lane = threadIdx.x % warp_size(), warp = threadIdx.x / warp_size();
  const int64_t bh = blockIdx.x, b = bh / H, h = bh % H;
  const float* m = part.m + bh * splits;
  const float* l = part.l + bh * splits;
  const float* acc = part.acc + bh * splits * D;
  float m_all = -FLT_MAX;
  for (int s = threadIdx.x; s < splits; s += kCombineThreads)
    if (l[s] > 0) m_all = fmaxf(m_all, m[s]);
  m_all = block_max(m_all, red);
  float l_sum = 0.0f;
  for (int s = threadIdx.x; s < splits; s += kCombineThreads) {
    weight[s] = l[s] > 0 ? expf(m[s] - m_all) : 0.0f;
    l_sum += weight[s] * l[s];
  }
  const float inv_l = 1.0f / block_sum(l_sum, red);  // block_sum's barriers also publish weight[]

  float o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) o[i] = 0.0f;
#pragma unroll 4
  for (int s = warp; s < splits; s += kWarps) {
    const float w = weight[s];
    if (w == 0.0f) continue;  // empty splits never wrote acc: skip them, never multiply stale scratch by 0
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + i * warp_size();
      if (d < D) o[i] = fmaf(w, acc[int64_t(s) * D + d], o[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * warp_size();
    if (d < D) warp_o[warp][d] = o[i];
  }
  __syncthreads();
  with_element_type(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* row = static_cast<T*>(out.data) + out.at.at(b, 0, h);
    for (int d = threadIdx.x; d < D; d += kCombineThreads) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += warp_o[w][d];
      row[d] = from_float<T>(total * inv_l);
    }
  });
}

}  // namespace

void kv_append(Stream& stream, const ops::KvAppendArgs& a) {
  const int64_t B = a.k.dim(0), T = a.k.dim(1), S = a.k_cache.dim(1), Hkv = a.k.dim(2), D = a.k.dim(3);
  if (B * T * Hkv * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const int threads = int(std::min<int64_t>(256, ceil_div(Hkv * D, 32) * 32));
  with_float_type(a.k_cache.dtype, [&](auto cache_tag) {
    with_float_type(a.k.dtype, [&](auto in_tag) {
      using Cache = decltype(cache_tag);
      using In = decltype(in_tag);
      kv_append_kernel<Cache, In><<<unsigned(B * T), threads, 0, s.handle()>>>(
          static_cast<Cache*>(a.k_cache.data), strides3(a.k_cache), static_cast<Cache*>(a.v_cache.data),
          strides3(a.v_cache), static_cast<const In*>(a.k.data), strides3(a.k), static_cast<const In*>(a.v.data),
          strides3(a.v),
          static_cast<const int32_t*>(a.start.data), T, S, Hkv, D);
    });
  });
  DING_GPU_CHECK_LAUNCH("kv_append_kernel");
}

void attention_prefill(Stream& stream, const ops::AttentionPrefillArgs& a) {
  const int64_t B = a.q.dim(0), Tq = a.q.dim(1), H = a.q.dim(2), D = a.q.dim(3);
  const int64_t Tk = a.k.dim(1), Hkv = a.k.dim(2);
  if (B * Tq * H * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const float scale = ops::attention_scale(a.params, D);
  const Operand out = operand(a.out, strides3(a.out)), q = operand(a.q, strides3(a.q));
  const Operand k = operand(a.k, strides3(a.k)), v = operand(a.v, strides3(a.v));

  auto launch_tiled = [&](auto dp) {
    constexpr int DP = decltype(dp)::value;
    using Tile = PrefillTile<DP>;
    if (Tile::shared_bytes > s.props().shared_per_block_optin) return false;
    const PrefillShape sh{B, Tq, Tk, H, H / Hkv, int(D), ceil_div(Tq, Tile::BQ), a.params.causal};
    DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(&attention_prefill_kernel<DP>),
                                               int(Tile::shared_bytes)));
    attention_prefill_kernel<DP><<<unsigned(sh.q_tiles * B * H), kPrefillThreads, Tile::shared_bytes, s.handle()>>>(
        out, q, k, v, sh, scale);
    DING_GPU_CHECK_LAUNCH("attention_prefill_kernel");
    return true;
  };
#if defined(DING_GPU_NVIDIA)
  // Tensor cores: one 16-bit dtype for q, k, v, a bf16 output (the precision argument above),
  // D = 64 or 128, and rows whose starts allow the 16-byte staging and the paired stores.
  const DType t = a.q.dtype;
  const bool mma = s.props().has_mma_sync() && (t == DType::f16 || t == DType::bf16) && a.k.dtype == t &&
                   a.v.dtype == t && a.out.dtype == DType::bf16 && (D == 64 || D == 128) && rows_aligned(a.q, 8) &&
                   rows_aligned(a.k, 8) && rows_aligned(a.v, 8) && rows_aligned(a.out, 2);
  if (mma) {
    const PrefillShape sh{B, Tq, Tk, H, H / Hkv, int(D), ceil_div(Tq, kMmaRows), a.params.causal};
    auto launch = [&](auto tag, auto dh) {
      using T = decltype(tag);
      constexpr int DH = decltype(dh)::value;
      const size_t shared = MmaTile<DH>::shared_bytes;
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(&attention_prefill_mma_kernel<T, DH>),
                                                 int(shared)));
      attention_prefill_mma_kernel<T, DH><<<unsigned(sh.q_tiles * B * H), kMmaThreads, shared, s.handle()>>>(
          out, static_cast<const T*>(a.q.data), strides3(a.q), static_cast<const T*>(a.k.data), strides3(a.k),
          static_cast<const T*>(a.v.data), strides3(a.v), sh, scale);
    };
    if (t == DType::bf16) {
      if (D == 64) launch(ding::bf16{}, std::integral_constant<int, 64>{});
      else launch(ding::bf16{}, std::integral_constant<int, 128>{});
    } else {
      if (D == 64) launch(ding::f16{}, std::integral_constant<int, 64>{});
      else launch(ding::f16{}, std::integral_constant<int, 128>{});
    }
    DING_GPU_CHECK_LAUNCH("attention_prefill_mma_kernel");
    return;
  }
#endif
  bool done = false;
  if (D <= 64) done = launch_tiled(std::integral_constant<int, 64>{});
  else if (D <= 128) done = launch_tiled(std::integral_constant<int, 128>{});
  else if (D <= 256) done = launch_tiled(std::integral_constant<int, 256>{});
  if (!done)
    launch_rows(s, out, q, a.k, strides3(a.k), a.v, strides3(a.v),
                RowShape{B, Tq, Tk, H, H / Hkv, int(D), a.params.causal, nullptr}, scale);
}

void attention_decode(Stream& stream, const ops::AttentionDecodeArgs& a) {
  const int64_t B = a.q.dim(0), H = a.q.dim(1), D = a.q.dim(2);
  const int64_t S = a.k_cache.dim(1), Hkv = a.k_cache.dim(2), group = H / Hkv;
  if (B * H * D == 0) return;
  GpuStream& s = gpu_stream(stream);
  const float scale = ops::attention_scale(a.params, D);
  const Operand out = operand(a.out, strides_bhd(a.out)), q = operand(a.q, strides_bhd(a.q));
  const int32_t* seq_lens = static_cast<const int32_t*>(a.seq_lens.data);
  if (D > 8 * kDecodeMaxLanes || a.k_cache.dtype != a.v_cache.dtype) {
    launch_rows(s, out, q, a.k_cache, strides3(a.k_cache), a.v_cache, strides3(a.v_cache),
                RowShape{B, 1, S, H, group, int(D), false, seq_lens}, scale);
    return;
  }

  // The launch depends on shapes and the device only, never on the lengths (they live on the
  // device and grow between replays of a recorded graph).
  DecodeShape sh{};
  sh.H = H, sh.S = S, sh.Hkv = Hkv, sh.group = group, sh.D = int(D);
  // Heads per block: the group's heads (3 rounded up to 4, the extra slot idle), at most 4 so
  // that q and acc stay in registers at 4 blocks per SM (8 heads cost 240 registers and ran at
  // half the bandwidth); larger groups take several blocks per kv head.
  const int hpb = group > 2 ? 4 : int(group);
  sh.heads = hpb;
  sh.head_blocks = int(ceil_div(group, hpb));
  sh.lanes = 1;
  while (8 * sh.lanes < D) sh.lanes *= 2;
  // Splits: enough blocks for about two waves of 2 blocks per SM, but ≥ kMinKeysPerSplit keys
  // each (a split's fixed cost, loading q and merging its state, needs that many keys to hide).
  const int64_t per_split = B * Hkv * sh.head_blocks;
  const int64_t target = 4 * int64_t(s.props().sm_count);
  const int64_t splits = std::clamp<int64_t>(ceil_div(target, per_split), 1, ceil_div(S, kMinKeysPerSplit));
  sh.chunk = ceil_div(S, splits);
  sh.splits = int(ceil_div(S, sh.chunk));  // no split starts past S
  const int64_t blocks = per_split * sh.splits;

  const int64_t states = B * H * sh.splits;
  Partials part{nullptr, nullptr, nullptr};
  if (sh.splits > 1) {
    float* scratch = static_cast<float*>(s.scratch(sizeof(float) * size_t(states * (2 + D))));
    part = {scratch, scratch + states, scratch + 2 * states};
  }
  const bool kv_vec = D % 8 == 0 && rows_aligned(a.k_cache, 16 / int64_t(dtype_size(a.k_cache.dtype))) &&
                      rows_aligned(a.v_cache, 16 / int64_t(dtype_size(a.v_cache.dtype)));
  with_float_type(a.k_cache.dtype, [&](auto kv_tag) {
    using KV = decltype(kv_tag);
    const KV* k = static_cast<const KV*>(a.k_cache.data);
    const KV* v = static_cast<const KV*>(a.v_cache.data);
    auto launch = [&](auto kernel) {
      kernel<<<unsigned(blocks), kDecodeThreads, 0, s.handle()>>>(out, q, k, strides3(a.k_cache), v, strides3(a.v_cache),
                                                                 kv_vec, seq_lens, sh, scale, part);
    };
    switch (hpb) {
      case 4: launch(attention_decode_kernel<KV, 4>); break;
      case 2: launch(attention_decode_kernel<KV, 2>); break;
      default: launch(attention_decode_kernel<KV, 1>); break;
    }
  });
  DING_GPU_CHECK_LAUNCH("attention_decode_kernel");
  if (sh.splits > 1) {
    // Weights padded to whole 16-byte words: the compiler may read the tail of the array as one.
    const size_t weight_bytes = sizeof(float) * size_t(ceil_div(sh.splits, 4) * 4);
    attention_decode_combine_kernel<<<unsigned(B * H), kCombineThreads, weight_bytes, s.handle()>>>(out, part, H, int(D),
                                                                                                  sh.splits);
    DING_GPU_CHECK_LAUNCH("attention_decode_combine_kernel");
  }
}

}  // namespace ding::gpu
