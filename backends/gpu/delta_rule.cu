// gated_delta_rule on the GPU (ops/delta_rule.h), in three kernels:
//  - the recurrent form (decode, and where a chunk of 1 is asked for): a block per tile of state
//    columns, the state in registers, the tokens in order;
//  - the chunk-wise form on tensor cores (NVIDIA sm_80+, prefill): a block per tile of state
//    columns walks the chunks, each chunk's work a handful of tf32 matrix products;
//  - the chunk-wise form in f32 FMAs, where tensor cores are not at hand (HIP, older chips, key
//    dims the mma tiles do not divide) and a chunk is asked for.
// Columns of S (f32 [Dk, Dv]) evolve independently ((Sᵀk)[e], the update of column e and (Sᵀq)[e]
// involve no other column), so every kernel splits a head's state by columns across blocks.
//
// The portable chunk-wise kernel: a block per (sequence, value head, tile of kTileColumns state
// columns) walks the chunks in order with the chunk's K, Q, the tile of S and the n × n products
// in shared memory: A = KKᵀ and the decayed QKᵀ, W = (I + L)^(-1) by forward substitution (a row
// per step), R = β(V − γ·K S_0), U = W R, O = γ·Q S_0 + QK U, S ← γ_n S_0 + Kᵀ(decayed U); each
// block recomputes the chunk's n × n products. The cumulative log decay is kept in double
// (ops/delta_rule.h).
#include <algorithm>
#include <cstdint>
#include <string>

#include "access.cuh"
#include "attention.cuh"
#include "check.h"
#include "kernels.h"
#include "mma_sync.cuh"
#include "reduce.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {


struct DeltaShape {
  int64_t B, T, Hk, Hv;
  int Dk, Dv;
  float scale;
  attn::Strides3 q, k, v, out, g, beta;  // of [B, T, H, D] and [B, T, H] tensors
  bool gated;                              // params.gates
  bool delta, has_g, has_beta;             // params.delta; g and beta present (else α = 1, β = 1)
  AnyFloat a_log, dt_bias;
};

__device__ inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Token t's log decay and write strength for value head h, through the gates where given.
__device__ inline float2 decay_and_strength(const DeltaShape& sh, AnyFloat g, AnyFloat beta, int64_t b, int64_t t, int64_t h) {
  const float g_in = sh.has_g ? g.load(sh.g.at(b, t, h)) : 0.0f, b_in = sh.has_beta ? beta.load(sh.beta.at(b, t, h)) : 1.0f;
  const float log_decay = sh.gated ? -expf(sh.a_log.load(h)) * softplus(g_in + sh.dt_bias.load(h)) : g_in;
  const float strength = sh.gated ? 1.0f / (1.0f + expf(-b_in)) : b_in;
  return make_float2(log_decay, strength);
}

constexpr int kTileColumns = 32;    // state columns per block of the chunk-wise kernel
constexpr int kChunkThreads = 256;

// Shared memory of the chunk-wise kernel for chunks of n tokens and key dim Dk, in floats (and
// the doubles of G before them).
__host__ __device__ inline int64_t chunk_floats(int n, int Dk) {
  return 2 * int64_t(n) * Dk          // K, Q (scaled)
         + int64_t(Dk) * kTileColumns  // the tile of S
         + 2 * int64_t(n) * kTileColumns  // R, U
         + 2 * int64_t(n) * n          // W, QK
         + 2 * int64_t(n);             // β, e^(G_n − G_j)
}
__host__ __device__ inline int64_t chunk_shared_bytes(int n, int Dk) { return int64_t(n) * 8 + chunk_floats(n, Dk) * 4; }

__global__ void __launch_bounds__(kChunkThreads)
    gated_delta_rule_chunk_kernel(AnyFloat out, AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, float* state,
                                  DeltaShape sh, int chunk) {
  extern __shared__ double shared_mem[];
  const int Dk = sh.Dk, n_max = chunk;
  double* const G = shared_mem;                                   // [n] cumulative log decay
  float* const K = reinterpret_cast<float*>(shared_mem + n_max);  // [n][Dk]
  float* const Q = K + n_max * Dk;                                // [n][Dk], times the scale
  float* const S = Q + n_max * Dk;                                // [Dk][kTileColumns]
  float* const R = S + Dk * kTileColumns;                         // [n][kTileColumns]
  float* const U = R + n_max * kTileColumns;                      // [n][kTileColumns]
  float* const W = U + n_max * kTileColumns;                      // [n][n]
  float* const QK = W + n_max * n_max;                            // [n][n]
  float* const B = QK + n_max * n_max;                            // [n] β
  float* const tail = B + n_max;                                  // [n] e^(G_n − G_j)
  const int tiles = (sh.Dv + kTileColumns - 1) / kTileColumns;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int e0 = int(int64_t(blockIdx.x) % tiles) * kTileColumns, width = min(kTileColumns, sh.Dv - e0);
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, kh = h / (sh.Hv / sh.Hk);
  const int tid = int(threadIdx.x), threads = int(blockDim.x);
  float* const state_head = state + bh * int64_t(Dk) * sh.Dv;
  for (int i = tid; i < Dk * kTileColumns; i += threads) {
    const int d = i / kTileColumns, c = i % kTileColumns;
    S[i] = c < width ? state_head[int64_t(d) * sh.Dv + e0 + c] : 0.0f;
  }
  for (int64_t t0 = 0; t0 < sh.T; t0 += chunk) {
    const int n = int(sh.T - t0 < chunk ? sh.T - t0 : int64_t(chunk));
    __syncthreads();  // the previous chunk is done with K, Q, W, QK, U
    for (int i = tid; i < n * Dk; i += threads) {
      const int j = i / Dk, d = i % Dk;
      K[i] = k.load(sh.k.at(b, t0 + j, kh) + d);
      Q[i] = sh.scale * q.load(sh.q.at(b, t0 + j, kh) + d);
    }
    if (tid == 0) {
      double sum = 0;
      for (int j = 0; j < n; ++j) {
        const float2 ds = decay_and_strength(sh, g, beta, b, t0 + j, h);
        sum += double(ds.x);
        G[j] = sum;
        B[j] = ds.y;
      }
      for (int j = 0; j < n; ++j) tail[j] = float(exp(G[n - 1] - G[j]));
    }
    __syncthreads();
    // L_ij = β_i e^(G_i − G_j) k_i·k_j (j < i), held in W's strict lower triangle until the
    // substitution; QK_ij = e^(G_i − G_j) q_i·k_j (j ≤ i).
    for (int p = tid; p < n * n; p += threads) {
      const int i = p / n, j = p % n;
      float kk = 0.0f, qk = 0.0f;
      if (j <= i)
        for (int d = 0; d < Dk; ++d) {
          kk = fmaf(K[i * Dk + d], K[j * Dk + d], kk);
          qk = fmaf(Q[i * Dk + d], K[j * Dk + d], qk);
        }
      const float ratio = j <= i ? float(exp(G[i] - G[j])) : 0.0f;
      W[p] = j < i && sh.delta ? B[i] * ratio * kk : 0.0f;
      QK[p] = ratio * qk;
    }
    // R = β(V − γ·K S_0) over the tile (no K S_0 term without the delta correction).
    for (int p = tid; p < n * kTileColumns; p += threads) {
      const int i = p / kTileColumns, c = p % kTileColumns;
      float ks = 0.0f;
      if (sh.delta)
        for (int d = 0; d < Dk; ++d) ks = fmaf(K[i * Dk + d], S[d * kTileColumns + c], ks);
      const float vv = c < width ? v.load(sh.v.at(b, t0 + i, h) + e0 + c) : 0.0f;
      R[p] = B[i] * (vv - float(exp(G[i])) * ks);
    }
    __syncthreads();
    // U = (I + L)^(-1) R by forward substitution: U_i = R_i − Σ_{j<i} L_ij U_j, a row per step.
    for (int i = 0; i < n; ++i) {
      for (int c = tid; c < kTileColumns; c += threads) {
        float u = R[i * kTileColumns + c];
        for (int j = 0; j < i; ++j) u = fmaf(-W[i * n + j], U[j * kTileColumns + c], u);
        U[i * kTileColumns + c] = u;
      }
      __syncthreads();
    }
    // O = γ·Q S_0 + QK U, written out.
    for (int p = tid; p < n * kTileColumns; p += threads) {
      const int i = p / kTileColumns, c = p % kTileColumns;
      if (c >= width) continue;
      float qs = 0.0f, own = 0.0f;
      for (int d = 0; d < Dk; ++d) qs = fmaf(Q[i * Dk + d], S[d * kTileColumns + c], qs);
      for (int j = 0; j <= i; ++j) own = fmaf(QK[i * n + j], U[j * kTileColumns + c], own);
      out.store(sh.out.at(b, t0 + i, h) + e0 + c, fmaf(float(exp(G[i])), qs, own));
    }
    __syncthreads();  // S_0 is read above; now it is replaced
    // S ← γ_n S_0 + Σ_j (γ_n/γ_j) k_j u_jᵀ.
    const float gamma_n = float(exp(G[n - 1]));
    for (int p = tid; p < Dk * kTileColumns; p += threads) {
      const int d = p / kTileColumns, c = p % kTileColumns;
      float s = gamma_n * S[p];
      for (int j = 0; j < n; ++j) s = fmaf(tail[j] * K[j * Dk + d], U[j * kTileColumns + c], s);
      S[p] = s;
    }
  }
  __syncthreads();
  for (int i = tid; i < Dk * kTileColumns; i += threads) {
    const int d = i / kTileColumns, c = i % kTileColumns;
    if (c < width) state_head[int64_t(d) * sh.Dv + e0 + c] = S[i];
  }
}

// The recurrent form. A block owns a tile of `lanes` state columns of one (sequence, value head):
// lane l holds column e0 + l, warp w the rows d = w, w + kRowWarps, …, in registers for the whole
// call, so the state is read and written a row of the tile at a time (coalesced) and each token's
// two sums over d are a warp's partial sums added across the block through shared memory:
//   r = Σ_d S[d]·k[d];  u = β (v[e] − α r);  S[d] ← α S[d] + k[d]·u;  o = s Σ_d S[d]·q[d]
// The block stages kStageTokens tokens' k, q, its v columns and gates in shared memory with one
// set of loads, so the token loop waits on no global memory.
constexpr int kRowWarps = 16;
constexpr int kMaxRowsPerLane = int(ops::kMaxDeltaRuleKeyDim) / kRowWarps;
#if defined(DING_GPU_AMD)
constexpr int kMaxLanes = 64;
#else
constexpr int kMaxLanes = 32;
#endif
constexpr int kStageTokens = 16;

__global__ void __launch_bounds__(kRowWarps * kMaxLanes)
    gated_delta_rule_kernel(AnyFloat out, AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, float* state,
                            DeltaShape sh) {
  __shared__ float partial[2][kRowWarps][kMaxLanes];  // the warps' shares of r, then of o
  __shared__ float keys[kStageTokens][ops::kMaxDeltaRuleKeyDim], queries[kStageTokens][ops::kMaxDeltaRuleKeyDim];
  __shared__ float values[kStageTokens][kMaxLanes];
  __shared__ float2 gates[kStageTokens];  // (α, β)
  const int lanes = warp_size(), threads = kRowWarps * lanes, tid = int(threadIdx.x);
  const int lane = tid % lanes, warp = tid / lanes;
  const int64_t tiles = (sh.Dv + lanes - 1) / lanes;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int e0 = int(int64_t(blockIdx.x) % tiles) * lanes, e = e0 + lane;
  const bool in = e < sh.Dv;  // lanes past Dv keep zeros and still take part in the block's sums
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, kh = h / (sh.Hv / sh.Hk);
  float* const column = state + bh * int64_t(sh.Dk) * sh.Dv + e;  // S[d][e] at column[d · Dv]

  float S[kMaxRowsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxRowsPerLane; ++i) {
    const int d = warp + i * kRowWarps;
    S[i] = in && d < sh.Dk ? column[int64_t(d) * sh.Dv] : 0.0f;
  }
  for (int64_t t0 = 0; t0 < sh.T; t0 += kStageTokens) {
    const int m = int(sh.T - t0 < kStageTokens ? sh.T - t0 : int64_t(kStageTokens));
    __syncthreads();  // the previous tokens are done with the staged rows
    for (int i = tid; i < m * sh.Dk; i += threads) {
      const int j = i / sh.Dk, d = i % sh.Dk;
      keys[j][d] = k.load(sh.k.at(b, t0 + j, kh) + d);
      queries[j][d] = q.load(sh.q.at(b, t0 + j, kh) + d);
    }
    for (int i = tid; i < m * lanes; i += threads) {
      const int j = i / lanes, c = i % lanes;
      values[j][c] = e0 + c < sh.Dv ? v.load(sh.v.at(b, t0 + j, h) + e0 + c) : 0.0f;
    }
    if (tid < m) {
      const float2 ds = decay_and_strength(sh, g, beta, b, t0 + tid, h);
      gates[tid] = make_float2(expf(ds.x), ds.y);
    }
    __syncthreads();
    for (int j = 0; j < m; ++j) {
      const float alpha = gates[j].x, strength = gates[j].y;
      float r = 0.0f;
      if (sh.delta) {  // block-uniform
#pragma unroll
        for (int i = 0; i < kMaxRowsPerLane; ++i) {
          const int d = warp + i * kRowWarps;
          if (d < sh.Dk) r = fmaf(S[i], keys[j][d], r);
        }
        partial[0][warp][lane] = r;
        __syncthreads();
        r = 0.0f;
#pragma unroll
        for (int w = 0; w < kRowWarps; ++w) r += partial[0][w][lane];
      }
      const float u = strength * (values[j][lane] - alpha * r);
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxRowsPerLane; ++i) {
        const int d = warp + i * kRowWarps;
        if (d < sh.Dk) {
          S[i] = fmaf(alpha, S[i], keys[j][d] * u);
          o = fmaf(S[i], queries[j][d], o);
        }
      }
      // partial[0] is free again: every thread read it before this token's second barrier, and
      // partial[1] before the next token's first.
      partial[1][warp][lane] = o;
      __syncthreads();
      if (warp == 0 && in) {
        o = 0.0f;
#pragma unroll
        for (int w = 0; w < kRowWarps; ++w) o += partial[1][w][lane];
        out.store(sh.out.at(b, t0 + j, h) + e, sh.scale * o);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxRowsPerLane; ++i) {
    const int d = warp + i * kRowWarps;
    if (in && d < sh.Dk) column[int64_t(d) * sh.Dv] = S[i];
  }
}

// The chunk-wise form on tensor cores (NVIDIA sm_80+): a block of kMmaWarps warps per (sequence,
// value head, tile of kMmaColumns state columns) walks the chunks of C tokens in order, with the
// chunk's K and Q, its tile of S, R / U, L and the decayed QKᵀ in shared memory as f32, each
// product an m16n8k8 tf32 mma. Operands that are not exact in tf32 (anything computed, and f32
// inputs) enter as head + tail (split_tf32), so every product is good to ~2^-21, not tf32's
// 2^-11; bf16 and f16 q and k are exact in one part. Per chunk (ops/delta_rule.h's notation):
//   1. KKᵀ and QKᵀ (the lower tiles) → L_ij = β_i e^(G_i − G_j) k_i·k_j (j < i) and the decayed,
//      scaled QKᵀ (j ≤ i); K S_0 → R = β(V − γ K S_0); Q S_0 kept in registers.
//   2. The inverses of the 16 × 16 diagonal blocks of I + L, a column per lane (16 steps).
//   3. U = (I + L)^(-1) R by blocks of 16 rows: U_I = D_I (R_I − L_{I,<I} U_{<I}), a warp per
//      8 columns of the tile, so the substitution needs no block barrier.
//   4. O = s γ Q S_0 + (QKᵀ ⊙ decay) U, written out; S ← γ_n S_0 + Kᵀ (e^(G_n − G_j) U_j).
// G is summed in double (a warp scan), as the SIMT kernel does.
constexpr int kMmaWarps = 8, kMmaThreads = kMmaWarps * 32;
constexpr int kMmaColumns = 32;

// acc += Σ_{k0 ≤ κ < k1} a(r, κ)·b(κ, c) over one 16 × 8 tile (r, c relative to it): PA, PB = 1 for
// an operand exact in tf32, 2 for one split into head and tail (the tail × tail term dropped).
template <int PA, int PB, class FA, class FB>
__device__ inline void mma_tf32_tile(float (&acc)[4], FA a, FB b, int k0, int k1, int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  const int g = lane >> 2, c = lane & 3;
  for (int k = k0; k < k1; k += 8) {
    const float av[4] = {a(g, k + c), a(g + 8, k + c), a(g, k + c + 4), a(g + 8, k + c + 4)};
    const float bv[2] = {b(k + c, g), b(k + c + 4, g)};
    uint32_t ah[4], at[4], bh[2], bt[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (PA == 2) split_tf32(av[i], ah[i], at[i]);
      else ah[i] = __float_as_uint(av[i]);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (PB == 2) split_tf32(bv[i], bh[i], bt[i]);
      else bh[i] = __float_as_uint(bv[i]);
    }
    mma_1688_tf32(acc, ah, bh);
    if constexpr (PB == 2) mma_1688_tf32(acc, ah, bt);
    if constexpr (PA == 2) mma_1688_tf32(acc, at, bh);
  }
#else
  (void)acc, (void)a, (void)b, (void)k0, (void)k1, (void)lane;
#endif
}

// Shared memory of the tensor-core kernel, in floats after C doubles (G), with row pitches that
// keep a warp's fragment loads on distinct banks.
struct MmaChunkLayout {
  int C, Dk, kp, sp, cp;
  __host__ __device__ MmaChunkLayout(int chunk, int dk) : C(chunk), Dk(dk), kp(dk + 4), sp(kMmaColumns + 8), cp(chunk + 4) {}
  __host__ __device__ int64_t beta() const { return 0; }  // [C]
  __host__ __device__ int64_t gamma() const { return C; }
  __host__ __device__ int64_t tail() const { return 2 * C; }
  __host__ __device__ int64_t keys() const { return 3 * C; }  // [C][kp]
  __host__ __device__ int64_t queries() const { return keys() + int64_t(C) * kp; }
  __host__ __device__ int64_t state() const { return queries() + int64_t(C) * kp; }  // [Dk][sp]
  __host__ __device__ int64_t writes() const { return state() + int64_t(Dk) * sp; }  // R, then U: [C][sp]
  __host__ __device__ int64_t lower() const { return writes() + int64_t(C) * sp; }  // L: [C][cp]
  __host__ __device__ int64_t scores() const { return lower() + int64_t(C) * cp; }  // decayed s·QKᵀ: [C][cp]
  __host__ __device__ int64_t inverses() const { return scores() + int64_t(C) * cp; }  // [C / 16][16][20]
  __host__ __device__ int64_t floats() const { return inverses() + int64_t(C) * 20; }
  __host__ __device__ size_t bytes() const { return size_t(C) * 8 + size_t(floats()) * 4; }
};

template <int C, int PK>
__global__ void __launch_bounds__(kMmaThreads)
    gated_delta_rule_mma_kernel(AnyFloat out, AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, float* state,
                                DeltaShape sh) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr int kBlocks = C / 16;
  const MmaChunkLayout lay(C, sh.Dk);
  const int Dk = sh.Dk, kp = lay.kp, sp = lay.sp, cp = lay.cp;
  extern __shared__ double shared_mem[];
  double* const G = shared_mem;
  float* const base = reinterpret_cast<float*>(shared_mem + C);
  float* const Bt = base + lay.beta();
  float* const gam = base + lay.gamma();
  float* const tail = base + lay.tail();
  float* const Ks = base + lay.keys();
  float* const Qs = base + lay.queries();
  float* const S = base + lay.state();
  float* const Rv = base + lay.writes();
  float* const L = base + lay.lower();
  float* const QK = base + lay.scores();
  float* const Dinv = base + lay.inverses();

  const int tiles = (sh.Dv + kMmaColumns - 1) / kMmaColumns;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int e0 = int(int64_t(blockIdx.x) % tiles) * kMmaColumns, width = min(kMmaColumns, sh.Dv - e0);
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, kh = h / (sh.Hv / sh.Hk);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g4 = lane >> 2, c4 = lane & 3;
  float* const state_head = state + bh * int64_t(Dk) * sh.Dv;
  for (int i = tid; i < Dk * kMmaColumns; i += kMmaThreads) {
    const int d = i / kMmaColumns, c = i % kMmaColumns;
    S[d * sp + c] = c < width ? state_head[int64_t(d) * sh.Dv + e0 + c] : 0.0f;
  }
  // Element e of a warp's accumulator of tile (mi, ni): row 16 mi + g4 + 8 (e / 2), column 8 ni + 2 c4 + e % 2.
  auto row_of = [&](int mi, int e) { return 16 * mi + g4 + 8 * (e >> 1); };
  auto col_of = [&](int ni, int e) { return 8 * ni + 2 * c4 + (e & 1); };
  constexpr int kWriteTiles = kBlocks * (kMmaColumns / 8);  // tiles of [C][kMmaColumns]: ≤ 2 per warp
  float qs[2][4];

  for (int64_t t0 = 0; t0 < sh.T; t0 += C) {
    const int n = int(sh.T - t0 < C ? sh.T - t0 : int64_t(C));
    __syncthreads();  // the previous chunk is done with every buffer
    if (warp == 0) {
      // Each token's log decay and strength (zero past n: no decay, no write), G by a warp scan.
      double x[2] = {0.0, 0.0};
      float st[2] = {0.0f, 0.0f};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = lane + 32 * half;
        if (j < n) {
          const float2 ds = decay_and_strength(sh, g, beta, b, t0 + j, h);
          x[half] = double(ds.x), st[half] = ds.y;
        }
      }
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const double y0 = __shfl_up_sync(0xffffffffu, x[0], off), y1 = __shfl_up_sync(0xffffffffu, x[1], off);
        if (lane >= off) x[0] += y0, x[1] += y1;
      }
      x[1] += __shfl_sync(0xffffffffu, x[0], 31);
      const double total = C > 32 ? __shfl_sync(0xffffffffu, x[1], 31) : __shfl_sync(0xffffffffu, x[0], C - 1);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = lane + 32 * half;
        if (j < C) {
          G[j] = x[half];
          Bt[j] = st[half];
          gam[j] = float(exp(x[half]));
          tail[j] = float(exp(total - x[half]));
        }
      }
    }
    for (int i = tid; i < C * Dk; i += kMmaThreads) {
      const int j = i / Dk, d = i % Dk;
      Ks[j * kp + d] = j < n ? k.load(sh.k.at(b, t0 + j, kh) + d) : 0.0f;
      Qs[j * kp + d] = j < n ? q.load(sh.q.at(b, t0 + j, kh) + d) : 0.0f;
    }
    __syncthreads();

    // 1. The lower tiles of KKᵀ and QKᵀ (tile (mi, ni) for ni ≤ 2 mi + 1, mi (mi + 1) of them before row mi).
    auto key_row = [&](int row0) { return [=](int r, int kk) { return Ks[(row0 + r) * kp + kk]; }; };
    auto query_row = [&](int row0) { return [=](int r, int kk) { return Qs[(row0 + r) * kp + kk]; }; };
    for (int p = warp; p < kBlocks * (kBlocks + 1); p += kMmaWarps) {
      int mi = 0;
      while ((mi + 1) * (mi + 2) <= p) ++mi;
      const int ni = p - mi * (mi + 1);
      auto key_col = [=](int kk, int c) { return Ks[(8 * ni + c) * kp + kk]; };
      float kk_acc[4] = {0, 0, 0, 0}, qk_acc[4] = {0, 0, 0, 0};
      if (sh.delta) mma_tf32_tile<PK, PK>(kk_acc, key_row(16 * mi), key_col, 0, Dk, lane);
      mma_tf32_tile<PK, PK>(qk_acc, query_row(16 * mi), key_col, 0, Dk, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row_of(mi, e), j = col_of(ni, e);
        const float ratio = j <= i ? expf(float(G[i] - G[j])) : 0.0f;
        L[i * cp + j] = j < i && sh.delta ? Bt[i] * ratio * kk_acc[e] : 0.0f;
        QK[i * cp + j] = sh.scale * ratio * qk_acc[e];
      }
    }
    // K S_0 → R, and Q S_0 kept: the tiles of [C][kMmaColumns], warp w's are w and w + kMmaWarps.
    auto state_col = [&](int ni) { return [=](int kk, int c) { return S[kk * sp + 8 * ni + c]; }; };
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int p = warp + s * kMmaWarps;
      if (p >= kWriteTiles) break;
      const int mi = p / (kMmaColumns / 8), ni = p % (kMmaColumns / 8);
      float ks[4] = {0, 0, 0, 0};
#pragma unroll
      for (int e = 0; e < 4; ++e) qs[s][e] = 0.0f;
      if (sh.delta) mma_tf32_tile<PK, 2>(ks, key_row(16 * mi), state_col(ni), 0, Dk, lane);
      mma_tf32_tile<PK, 2>(qs[s], query_row(16 * mi), state_col(ni), 0, Dk, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row_of(mi, e), c = col_of(ni, e);
        const float vv = i < n && c < width ? v.load(sh.v.at(b, t0 + i, h) + e0 + c) : 0.0f;
        Rv[i * sp + c] = Bt[i] * (vv - gam[i] * ks[e]);
      }
    }
    __syncthreads();

    // 2. D_I = (I + L_II)^(-1), unit lower triangular: warp I, lane l < 16 solves for column l.
    if (sh.delta && warp < kBlocks && lane < 16) {
      const float* const Lb = L + (16 * warp) * cp + 16 * warp;
      float col[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float x = i == lane ? 1.0f : 0.0f;
#pragma unroll
        for (int j = 0; j < i; ++j) x = fmaf(-Lb[i * cp + j], col[j], x);
        col[i] = x;
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) Dinv[(16 * warp + i) * 20 + lane] = col[i];
    }
    __syncthreads();

    // 3. U = (I + L)^(-1) R, in place of R: warp w < kMmaColumns / 8 owns columns 8w … 8w + 7.
    if (sh.delta && warp < kMmaColumns / 8) {
      auto writes_col = [&](int row0) { return [=](int kk, int c) { return Rv[(row0 + kk) * sp + 8 * warp + c]; }; };
      for (int I = 0; I < kBlocks; ++I) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = Rv[row_of(I, e) * sp + col_of(warp, e)];
        if (I > 0)
          mma_tf32_tile<2, 2>(x, [=](int r, int kk) { return -L[(16 * I + r) * cp + kk]; }, writes_col(0), 0, 16 * I, lane);
#pragma unroll
        for (int e = 0; e < 4; ++e) Rv[row_of(I, e) * sp + col_of(warp, e)] = x[e];
        __syncwarp();
        float u[4] = {0, 0, 0, 0};
        mma_tf32_tile<2, 2>(u, [=](int r, int kk) { return Dinv[(16 * I + r) * 20 + kk]; }, writes_col(16 * I), 0, 16, lane);
        __syncwarp();
#pragma unroll
        for (int e = 0; e < 4; ++e) Rv[row_of(I, e) * sp + col_of(warp, e)] = u[e];
        __syncwarp();
      }
    }
    __syncthreads();

    // 4. O = s γ Q S_0 + (decayed s QKᵀ) U over the tiles of step 1's second part; then S.
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int p = warp + s * kMmaWarps;
      if (p >= kWriteTiles) break;
      const int mi = p / (kMmaColumns / 8), ni = p % (kMmaColumns / 8);
      float o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = sh.scale * gam[row_of(mi, e)] * qs[s][e];
      mma_tf32_tile<2, 2>(o, [=](int r, int kk) { return QK[(16 * mi + r) * cp + kk]; },
                          [=](int kk, int c) { return Rv[kk * sp + 8 * ni + c]; }, 0, 16 * mi + 16, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = row_of(mi, e), c = col_of(ni, e);
        if (i < n && c < width) out.store(sh.out.at(b, t0 + i, h) + e0 + c, o[e]);
      }
    }
    const float gamma_n = float(exp(G[C - 1]));  // G past n stays G_n
    for (int p = warp; p < (Dk / 16) * (kMmaColumns / 8); p += kMmaWarps) {
      const int mi = p / (kMmaColumns / 8), ni = p % (kMmaColumns / 8);
      float acc[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = gamma_n * S[row_of(mi, e) * sp + col_of(ni, e)];
      mma_tf32_tile<PK, 2>(acc, [=](int r, int kk) { return Ks[kk * kp + 16 * mi + r]; },
                           [=](int kk, int c) { return tail[kk] * Rv[kk * sp + 8 * ni + c]; }, 0, C, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) S[row_of(mi, e) * sp + col_of(ni, e)] = acc[e];
    }
  }
  __syncthreads();
  for (int i = tid; i < Dk * kMmaColumns; i += kMmaThreads) {
    const int d = i / kMmaColumns, c = i % kMmaColumns;
    if (c < width) state_head[int64_t(d) * sh.Dv + e0 + c] = S[d * sp + c];
  }
#else
  (void)out, (void)q, (void)k, (void)v, (void)g, (void)beta, (void)state, (void)sh;
#endif  // DING_GPU_NVIDIA_MMA
}

#if defined(DING_GPU_NVIDIA)
// The tensor-core kernel's chunk for a call asking for `requested` tokens a chunk (0: any): the
// largest of 64, 32, 16 within it whose shared memory fits; 0 where the kernel cannot run (no
// mma.sync, a key dim not a multiple of 16, or not even 16 tokens a chunk fit).
int mma_chunk(const Props& props, int Dk, int64_t requested) {
  if (!props.has_mma_sync() || Dk % 16 != 0) return 0;
  for (int C : {64, 32, 16})
    if ((requested == 0 || C <= requested) && MmaChunkLayout(C, Dk).bytes() <= props.shared_per_block_optin) return C;
  return 0;
}
#endif

// Calls with at least this many tokens take the chunk-wise form where the backend chooses
// (params.chunk = 0): below it a chunk is mostly padding.
constexpr int64_t kChunkwiseFrom = 16;

}  // namespace

void gated_delta_rule(Stream& stream, const ops::GatedDeltaRuleArgs& a) {
  GpuStream& s = gpu_stream(stream);
  DeltaShape sh{};
  sh.B = a.q.dim(0), sh.T = a.q.dim(1), sh.Hk = a.q.dim(2), sh.Hv = a.v.dim(2);
  sh.Dk = int(a.q.dim(3)), sh.Dv = int(a.v.dim(3));
  sh.scale = ops::delta_rule_scale(a);
  sh.q = attn::strides3(a.q), sh.k = attn::strides3(a.k), sh.v = attn::strides3(a.v), sh.out = attn::strides3(a.out);
  sh.g = attn::strides3(a.g), sh.beta = attn::strides3(a.beta);
  sh.gated = a.params.gates.given();
  sh.delta = a.params.delta, sh.has_g = a.g.defined(), sh.has_beta = a.beta.defined();
  if (sh.gated) sh.a_log = any_float(a.params.gates.a_log), sh.dt_bias = any_float(a.params.gates.dt_bias);
  if (sh.B * sh.T * sh.Hv * sh.Dv == 0) return;
  auto check_grid = [](int64_t blocks) {
    if (blocks > INT32_MAX)
      throw Error(ErrorCode::not_implemented, "gated_delta_rule on the GPU: " + std::to_string(blocks) + " blocks exceed the launch grid");
    return unsigned(blocks);
  };
  const int64_t chunk = a.params.chunk;
  const bool chunkwise = sh.T > 1 && (chunk > 1 || (chunk == 0 && sh.T >= kChunkwiseFrom));
#if defined(DING_GPU_NVIDIA)
  // Tensor cores where they run: q and k of 16 bits are exact tf32 operands (one part), f32 ones split.
  if (const int C = chunkwise ? mma_chunk(s.props(), sh.Dk, chunk) : 0) {
    const bool exact = a.q.dtype != DType::f32 && a.k.dtype != DType::f32;
    auto launch = [&](auto kernel) {
      const size_t bytes = MmaChunkLayout(C, sh.Dk).bytes();
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), int(bytes)));
      kernel<<<check_grid(sh.B * sh.Hv * ((sh.Dv + kMmaColumns - 1) / kMmaColumns)), kMmaThreads, bytes, s.handle()>>>(
          any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta),
          a.state.ptr<float>(), sh);
    };
    if (C == 64) launch(exact ? gated_delta_rule_mma_kernel<64, 1> : gated_delta_rule_mma_kernel<64, 2>);
    else if (C == 32) launch(exact ? gated_delta_rule_mma_kernel<32, 1> : gated_delta_rule_mma_kernel<32, 2>);
    else launch(exact ? gated_delta_rule_mma_kernel<16, 1> : gated_delta_rule_mma_kernel<16, 2>);
    DING_GPU_CHECK_LAUNCH("gated_delta_rule_mma_kernel");
    return;
  }
#endif
  // The portable chunk-wise kernel where a chunk is asked for: chunks of up to 64 tokens (fewer
  // where shared memory is short). Where the backend chooses, the recurrent kernel: faster than it.
  if (chunkwise && chunk > 1) {
    int C = int(std::min<int64_t>(chunk, 64));
    while (C > 2 && size_t(chunk_shared_bytes(C, sh.Dk)) > s.props().shared_per_block_optin) C /= 2;
    const size_t bytes = size_t(chunk_shared_bytes(C, sh.Dk));
    if (bytes <= s.props().shared_per_block_optin) {
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(gated_delta_rule_chunk_kernel), int(bytes)));
      gated_delta_rule_chunk_kernel<<<check_grid(sh.B * sh.Hv * ((sh.Dv + kTileColumns - 1) / kTileColumns)), kChunkThreads,
                                      bytes, s.handle()>>>(any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v),
                                                           any_float(a.g), any_float(a.beta), a.state.ptr<float>(), sh, C);
      DING_GPU_CHECK_LAUNCH("gated_delta_rule_chunk_kernel");
      return;
    }
  }
  const int lanes = s.props().warp_size;
  gated_delta_rule_kernel<<<check_grid(sh.B * sh.Hv * ((sh.Dv + lanes - 1) / lanes)), kRowWarps * lanes, 0, s.handle()>>>(
      any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta),
      a.state.ptr<float>(), sh);
  DING_GPU_CHECK_LAUNCH("gated_delta_rule_kernel");
}

DING_GPU_END
