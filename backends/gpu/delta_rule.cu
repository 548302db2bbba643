// gated_delta_rule on the GPU (ops/delta_rule.h), in three forms:
//  - the recurrent form (decode, and where a chunk of 1 is asked for): a block per tile of state
//    columns, the state in registers, the tokens in order;
//  - the chunk-wise form on tensor cores (NVIDIA sm_80+, prefill), two kernels: one prepares every
//    chunk at once, then a block per tile of state columns walks the chunks, three matrix
//    products a chunk (bf16 pairs with the state in registers for bf16 inputs and a 16-bit
//    output, tf32 over tiles of shared memory otherwise);
//  - the chunk-wise form in f32 FMAs, where tensor cores are not at hand (HIP, older chips, key
//    dims the mma tiles do not divide) and a chunk is asked for.
// Unit q and k (params.l2_normalize_qk): the recurrent kernel normalises the rows it stages; the
// chunk-wise forms run on unit copies that one launch writes first.
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
// Helpers of the tensor-core paths alone are [[maybe_unused]]: HIP compiles those paths out.

struct DeltaShape {
  int64_t B, T, Hk, Hv;
  int Dk, Dv;
  float scale;
  attn::Strides3 q, k, v, out, g, beta;  // of [B, T, H, D] and [B, T, H] tensors
  bool gated;                              // params.gates
  bool delta, has_g, has_beta;             // params.delta; g and beta present (else α = 1, β = 1)
  bool l2_normalize;                       // params.l2_normalize_qk (the recurrent kernel's own)
  bool state_settled;                      // params.state_from_earlier_op (the recurrent kernel's)
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

// ops::GatedDeltaRuleParams::l2_normalize_qk's factor (Σx² + ε)^-½ for a row whose squares the
// warp's lanes hold in parts: in double, as the op defines it.
__device__ inline double l2_inverse(double squares) { return rsqrt(warp_sum(squares) + double(ops::kDeltaRuleL2Eps)); }

// The recurrent form. A block owns a tile of `lanes` state columns of one (sequence, value head):
// lane l holds column e0 + l, warp w the rows d = w, w + kRowWarps, …, in registers for the whole
// call, so the state is read and written a row of the tile at a time (coalesced) and each token's
// two sums over d are a warp's partial sums added across the block through shared memory:
//   r = Σ_d S[d]·k[d];  u = β (v[e] − α r);  S[d] ← α S[d] + k[d]·u;  o = s Σ_d S[d]·q[d]
// The block stages kStageTokens tokens' k, q, its v columns and gates in shared memory with one
// set of loads, so the token loop waits on no global memory, and normalises them there when the op
// asks for unit q and k (a warp per row). The kernel is chained (vendor.h): at decode its start
// overlaps the kernel before.
constexpr int kRowWarps = 16;
constexpr int kMaxRowsPerLane = int(ops::kMaxDeltaRuleKeyDim) / kRowWarps;
#if defined(DING_GPU_AMD)
constexpr int kMaxLanes = 64;
#else
constexpr int kMaxLanes = 32;
#endif
constexpr int kStageTokens = 16;

// The op's out_norm inside the recurrent kernel (NVIDIA sm_90+, a head of at most kMaxNormTiles
// tiles of columns): the head's tiles run as one cluster. Per token each block's warp 0 rounds its
// columns of o to out's dtype (what rms_norm after the rule would read), adds their squares, and
// stores the sum into every block of the cluster; after the cluster's barrier each block adds the
// tiles' sums in tile order (the same total in every block) and normalises its own columns. No
// launch and no trip to global memory for the norm.
constexpr int kMaxNormTiles = 8;  // a portable cluster
struct FusedOutNorm {
  AnyFloat weight, gate;
  attn::Strides3 gate_s{};  // of [B, T, Hv, Dv]
  float eps = 0.0f;
};

// RowsPerLane: the rows of S a lane holds, ⌈Dk / kRowWarps⌉ rounded up to 8 or kMaxRowsPerLane (its
// loops are unrolled to it; sized to Dk, the kernel is half as long). Each block normalises the
// k and q rows it stages itself: the Hv/Hk value heads and column tiles that share a key head
// repeat that small step rather than wait for one another.
template <int RowsPerLane, bool kClusterNorm>
__global__ void __launch_bounds__(kRowWarps * kMaxLanes)
    gated_delta_rule_kernel(AnyFloat out, AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, float* state,
                            DeltaShape sh, FusedOutNorm norm) {
  __shared__ float partial[3][kRowWarps][kMaxLanes];  // the warps' shares of r, then of o by token parity
  __shared__ float keys[kStageTokens][ops::kMaxDeltaRuleKeyDim], queries[kStageTokens][ops::kMaxDeltaRuleKeyDim];
  __shared__ float values[kStageTokens][kMaxLanes];
  __shared__ float2 gates[kStageTokens];  // (α, β)
  // kClusterNorm: the norm's gate columns, and every tile's sum of squares by token parity.
  __shared__ float norm_gate[kClusterNorm ? kStageTokens : 1][kClusterNorm ? kMaxLanes : 1];
  __shared__ float norm_squares[2][kClusterNorm ? kMaxNormTiles : 1];
  if constexpr (kClusterNorm) cluster_arrive();  // this block has started (waited for before the first remote store)
  const int lanes = warp_size(), threads = kRowWarps * lanes, tid = int(threadIdx.x);
  const int lane = tid % lanes, warp = tid / lanes;
  // The grid holds at most INT32_MAX blocks (delta_rule_grid): block indices fit 32 bits.
  const int tiles = (sh.Dv + lanes - 1) / lanes, Hv = int(sh.Hv);
  const int bh = int(blockIdx.x) / tiles;
  const int e0 = int(blockIdx.x) % tiles * lanes, e = e0 + lane;
  const bool in = e < sh.Dv;  // lanes past Dv keep zeros and still take part in the block's sums
  const int b = bh / Hv, h = bh % Hv, kh = h / (Hv / int(sh.Hk));
  float* const column = state + int64_t(bh) * sh.Dk * sh.Dv + e;  // S[d][e] at column[d · Dv]
  float S[RowsPerLane];
  auto load_state = [&] {
#pragma unroll
    for (int i = 0; i < RowsPerLane; ++i) {
      const int d = warp + i * kRowWarps;
      S[i] = in && d < sh.Dk ? column[int64_t(d) * sh.Dv] : 0.0f;
    }
  };
  // A state written two or more ops back comes in over the previous kernel's tail, as do the
  // norm's weights.
  if (sh.state_settled) load_state();
  const float norm_w = kClusterNorm && in ? norm.weight.load(e) : 0.0f;
  wait_for_prior_kernels();
  release_dependents();
  if (!sh.state_settled) load_state();
  for (int64_t t0 = 0; t0 < sh.T; t0 += kStageTokens) {
    const int m = int(sh.T - t0 < kStageTokens ? sh.T - t0 : int64_t(kStageTokens));
    __syncthreads();  // the previous tokens are done with the staged rows
    // Rolled loops from here to the token loop: at a decode step each runs once or not at all.
    // One loop over the staged items (k and q elements, v columns, gates), so that at a decode step
    // each thread stages at most one and the block waits one round trip to global memory, not one
    // a kind of item.
    const int key_items = m * sh.Dk, value_items = m * lanes, gate_items = kClusterNorm ? value_items : 0;
#pragma unroll 1
    for (int i = tid; i < key_items + value_items + gate_items + m; i += threads) {
      if (i < key_items) {
        const int j = i / sh.Dk, d = i % sh.Dk;
        keys[j][d] = k.load(sh.k.at(b, t0 + j, kh) + d);
        queries[j][d] = q.load(sh.q.at(b, t0 + j, kh) + d);
      } else if (i < key_items + value_items) {
        const int j = (i - key_items) / lanes, c = (i - key_items) % lanes;
        values[j][c] = e0 + c < sh.Dv ? v.load(sh.v.at(b, t0 + j, h) + e0 + c) : 0.0f;
      } else if (i < key_items + value_items + gate_items) {
        const int j = (i - key_items - value_items) / lanes, c = (i - key_items - value_items) % lanes;
        if constexpr (kClusterNorm)
          norm_gate[j][c] = e0 + c < sh.Dv ? norm.gate.load(norm.gate_s.at(b, t0 + j, h) + e0 + c) : 0.0f;
      } else {
        const int j = i - key_items - value_items - gate_items;
        const float2 ds = decay_and_strength(sh, g, beta, b, t0 + j, h);
        gates[j] = make_float2(expf(ds.x), ds.y);
      }
    }
    __syncthreads();
    if (sh.l2_normalize) {  // block-uniform; a warp per staged row of k or q
      for (int p = warp; p < 2 * m; p += kRowWarps) {
        float* const row = p % 2 ? queries[p / 2] : keys[p / 2];
        const AnyFloat x = p % 2 ? q : k;
        double squares = 0.0;
#pragma unroll 1
        for (int d = lane; d < sh.Dk; d += lanes) squares += double(row[d]) * row[d];
        const double inverse = l2_inverse(squares);
#pragma unroll 1
        for (int d = lane; d < sh.Dk; d += lanes) row[d] = x.round(float(row[d] * inverse));
      }
      __syncthreads();
    }
    if (kClusterNorm && t0 == 0) cluster_wait();  // every block of the cluster has started
    for (int j = 0; j < m; ++j) {
      const float alpha = gates[j].x, strength = gates[j].y;
      float r = 0.0f;
      if (sh.delta) {  // block-uniform
#pragma unroll
        for (int i = 0; i < RowsPerLane; ++i) {
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
      for (int i = 0; i < RowsPerLane; ++i) {
        const int d = warp + i * kRowWarps;
        if (d < sh.Dk) {
          S[i] = fmaf(alpha, S[i], keys[j][d] * u);
          o = fmaf(S[i], queries[j][d], o);
        }
      }
      // partial[0] is free again: every thread read it before this token's second barrier. The o
      // shares alternate between two slots: without the delta there is no first barrier, so the
      // next token's shares may land while warp 0 still sums these; the one after that waits for
      // warp 0 at the next token's barrier.
      const int slot = 1 + (j & 1);
      partial[slot][warp][lane] = o;
      __syncthreads();
      if (warp == 0) {
        o = 0.0f;
#pragma unroll
        for (int w = 0; w < kRowWarps; ++w) o += partial[slot][w][lane];
        if constexpr (kClusterNorm) {
          o = in ? out.round(sh.scale * o) : 0.0f;
          const float squares = warp_sum(o * o);
          if (lane < tiles) cluster_store(&norm_squares[j & 1][cluster_rank()], unsigned(lane), squares);
        } else if (in) {
          out.store(sh.out.at(b, t0 + j, h) + e, sh.scale * o);
        }
      }
      if constexpr (kClusterNorm) {
        // Every tile's squares of this token are here. Slot j & 1 is written again at token j + 2,
        // after every block has passed token j + 1's barrier, so after it read this one.
        cluster_sync();
        if (warp == 0 && in) {
          float squares = 0.0f;
          for (int tile = 0; tile < tiles; ++tile) squares += norm_squares[j & 1][tile];
          const float rstd = 1.0f / sqrtf(squares / float(sh.Dv) + norm.eps);
          out.store(sh.out.at(b, t0 + j, h) + e, silu_times(norm_gate[j][lane], o * rstd * norm_w));
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RowsPerLane; ++i) {
    const int d = warp + i * kRowWarps;
    if (in && d < sh.Dk) column[int64_t(d) * sh.Dv] = S[i];
  }
}

// The chunk-wise form on tensor cores (NVIDIA sm_80+), in two passes per segment of the tokens:
//  1. prepare, a block per (sequence, value head, chunk), all chunks at once: everything of a chunk
//     that does not depend on the state it starts from (ops/delta_rule.h's notation, T = (I + L)^(-1)):
//       W = T diag(βγ) K  [C][Dk],   U' = T diag(β) V  [C][Dv],   A = decayed s·QKᵀ (j ≤ i)  [C][C],
//       γ_i and e^(G_n − G_i)  [C] each,
//     and the chunk's q and k, all laid out for the second pass (fragment order, below) and copied
//     into its shared memory by cp.async while the products before their use run;
//  2. walk, a block per (sequence, value head, tile of kMmaColumns state columns), the chunks in
//     order with the tile of S in registers; per chunk three products:
//       U = U' − W S_0,   O = s γ ⊙ (Q S_0) + A U,   S ← γ_n S_0 + Kᵀ (e^(G_n − G_j) U_j).
// So the walk, the sequential part, holds no substitution and no n × n product of q and k.
// The products take one of two forms (Parts), chosen by the dtypes and
// OpTuning::delta_rule_bf16_pairs, each with a walk of its own:
//  - bf16 pairs (m16n8k16), the default where q, k and v are bf16 and the output 16-bit: each
//    computed operand (W, A, S, U, the decayed U) enters as hi = round(x), lo = round(x − hi), the
//    lo × lo term dropped: ~2^-17 relative, 2^8 below a 16-bit output's rounding. A k step of 16
//    then takes 5 mmas for W S_0 and Q S_0 where tf32 takes 10, the computed operands are half the
//    bytes to copy and read, and the bf16 Q and Kᵀ are the mma's own operands. Its walk
//    (gated_delta_rule_register_walk_kernel) gives each warp 8 whole columns of S, so S, U and the
//    decayed U pass from accumulators to B operands by movmatrix, never through shared memory.
//  - tf32 (m16n8k8): operands that are not exact in tf32 (anything computed, and f32 inputs) enter
//    as head + tail (split_tf32), so every product is good to ~2^-21, not tf32's 2^-11; bf16 and f16
//    q, k and v are exact in one part. For f32 outputs, whose bound is 2e-11 NMSE, and f16 inputs.
//    Its walk (gated_delta_rule_tiled_walk_kernel) deals 16 × 8 tiles of each product to 16 warps
//    and passes S and U between them through shared memory (32-bit operands do not movmatrix).
// Where q, k and v are 16-bit the first pass's key products take m16n8k16 on the rows as they are,
// and where they are bf16 also its products with T, whose computed side enters as three bf16 parts
// (~2^-24): fewer instructions, no less accuracy. A product's parts accumulate apart where a warp
// has few tiles (PartSums). G is summed in double (a warp scan), as the SIMT kernel does. The
// passes run over equal segments of at most kSegmentBytes of first-pass output (the stream's
// scratch), so a long prompt needs no workspace that grows with it. The chunk is the largest of
// 64, 32, 16 whose shared memory fits (mma_chunk): by the layouts' sizes at bf16 and 128-wide
// heads, 64 in an H100's 227 KB a block (the register walk takes 161 KB, two chunks' operands; the
// tiled walk 193 KB); in an RTX 4090's 99 KB 32 in bf16 pairs (73 KB), 16 in tf32 (chunks of 32
// take 105 KB).
constexpr int kMmaWarps = 8, kMmaThreads = kMmaWarps * 32;
// The tiled walk's warps: its products are short chains per warp (a tile or two of U and O, two of
// S), so more warps than the first pass's hide more of their latency; each needs at most 128
// registers.
constexpr int kWalkWarps = 16, kWalkThreads = kWalkWarps * 32;
constexpr int kMmaColumns = 32;
// Each segment costs the walk a start and an end (the state loaded and stored, blocks finishing
// unevenly) and the first pass a partial last wave, so fewer and larger segments run faster
// (docs/PERFORMANCE.md, issue 21); 192 MB holds 40 chunks of 64 tokens of Qwen3-Next's 32 value
// heads, and a long prompt's workspace stays bounded all the same.
[[maybe_unused]] constexpr size_t kSegmentBytes = size_t(192) << 20;

// The chunk-wise products in one of the two forms above: kPairs false is tf32, true bf16 pairs.
template <bool kPairs>
struct Parts {
  static constexpr int kK = kPairs ? 16 : 8;           // the mma's k step
  static constexpr int kSplitWords = kPairs ? 1 : 2;  // 4-byte words of a computed operand's element
};

// acc += Σ_{k0 ≤ κ < k1} a(r, κ)·b(κ, c) over one 16 × 8 tile (r, c relative to it): PA, PB = 1 for
// an operand exact in tf32, 2 for one split into head and tail (the tail × tail term dropped). The
// tail terms sum apart from acc and join it at the end, so a k step's mmas do not wait on one
// another: a single tile has no other tile's mmas to fill that wait with.
template <int PA, int PB, class FA, class FB>
__device__ inline void mma_tf32_tile(float (&acc)[4], FA a, FB b, int k0, int k1, int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  const int g = lane >> 2, c = lane & 3;
  float ht[4] = {}, th[4] = {};
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
    if constexpr (PB == 2) mma_1688_tf32(ht, ah, bt);
    if constexpr (PA == 2) mma_1688_tf32(th, at, bh);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] += ht[e] + th[e];
#else
  (void)acc, (void)a, (void)b, (void)k0, (void)k1, (void)lane;
#endif
}

// acc[t] += a · b_t for the first `tiles` of N tiles that share a (split once a k step where PA =
// 2): b(t, κ, c) is tile t's B operand. `tiles` is uniform over the warp.
template <int PA, int PB, int N, class FA, class FB>
__device__ inline void mma_tf32_tiles_shared_a(float (&acc)[N][4], int tiles, FA a, FB b, int k0, int k1, int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  const int g = lane >> 2, c = lane & 3;
  for (int k = k0; k < k1; k += 8) {
    const float av[4] = {a(g, k + c), a(g + 8, k + c), a(g, k + c + 4), a(g + 8, k + c + 4)};
    uint32_t ah[4], at[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (PA == 2) split_tf32(av[i], ah[i], at[i]);
      else ah[i] = __float_as_uint(av[i]);
    }
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (t >= tiles) break;
      const float bv[2] = {b(t, k + c, g), b(t, k + c + 4, g)};
      uint32_t bh[2], bt[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if constexpr (PB == 2) split_tf32(bv[i], bh[i], bt[i]);
        else bh[i] = __float_as_uint(bv[i]);
      }
      mma_1688_tf32(acc[t], ah, bh);
      if constexpr (PB == 2) mma_1688_tf32(acc[t], ah, bt);
      if constexpr (PA == 2) mma_1688_tf32(acc[t], at, bh);
    }
  }
#else
  (void)acc, (void)tiles, (void)a, (void)b, (void)k0, (void)k1, (void)lane;
#endif
}

// x as head and tail tf32 bit patterns, stored as floats.
[[maybe_unused]] __device__ inline void store_split(float* head, float* tail, float x) {
#if defined(DING_GPU_NVIDIA_MMA)
  uint32_t h, t;
  split_tf32(x, h, t);
  *head = __uint_as_float(h), *tail = __uint_as_float(t);
#else
  *head = x, *tail = 0.0f;
#endif
}

// Element e of a warp's accumulator of tile (mi, ni): row 16 mi + g4 + 8 (e / 2), column 8 ni +
// 2 c4 + e % 2, (g4, c4) = (lane / 4, lane % 4).
[[maybe_unused]] __device__ inline int tile_row(int mi, int e, int lane) { return 16 * mi + (lane >> 2) + 8 * (e >> 1); }
[[maybe_unused]] __device__ inline int tile_col(int ni, int e, int lane) { return 8 * ni + 2 * (lane & 3) + (e & 1); }

// Fragment order: how the first pass lays out an mma operand the second pass reads many times, so
// a lane fetches its part of a k step with one 8- or 16-byte shared-memory read (two for a split
// one) and splits nothing. For an A operand M (rows r, columns κ; 16 × 8 tiles, `steps` of them along κ) lane
// (g, c) holds M[g][c], M[g + 8][c], M[g][c + 4], M[g + 8][c + 4] (mma_1688_tf32's order); for a
// B operand (rows κ, columns n; 8 × 8 tiles) it holds M[c][g], M[c + 4][g]. `slot` is the place
// within the lane's group.
struct FragmentPlace {
  int group;  // (tile, k step, lane), counted in the operand's groups
  int slot;
};
// Element e of a warp's accumulator tile (mi, ni) (tile_row, tile_col) as an A operand: group
// ((r / 16) steps + κ / 8) 32 + (r % 8) 4 + κ % 4, slot (r % 16) / 8 + 2 ((κ % 8) / 4), with those
// worked out from the tile and the lane (no division); as a B operand: group ((n / 8) steps + κ /
// 8) 32 + (n % 8) 4 + κ % 4, slot (κ % 8) / 4.
[[maybe_unused]] __device__ inline FragmentPlace a_fragment_of_tile(int mi, int ni, int e, int lane, int steps) {
  const int g = lane >> 2, col = 2 * (lane & 3) + (e & 1);  // r = 16 mi + g + 8 (e / 2), κ = 8 ni + col
  return {(mi * steps + ni) * 32 + g * 4 + (col & 3), (e >> 1) + 2 * (col >> 2)};
}
[[maybe_unused]] __device__ inline FragmentPlace b_fragment_of_tile(int mi, int ni, int e, int lane, int steps) {
  const int g = lane >> 2, col = 2 * (lane & 3) + (e & 1);  // κ = 16 mi + g + 8 (e / 2), n = 8 ni + col
  return {(ni * steps + 2 * mi + (e >> 1)) * 32 + col * 4 + (g & 3), g >> 2};
}
// Where a split A operand keeps group `group`'s heads (its tails are 128 floats on): a k step's 32
// lanes' heads, then their tails, so each half is one contiguous 16-byte read a lane.
__device__ inline int split_a_heads(int group) { return (group / 32) * 256 + (group % 32) * 4; }

// The bf16 pairs' fragment order, mma_16816's registers: for an A operand lane (g, c) of (row tile,
// k step of 16) holds M[g][2c, 2c + 1], M[g + 8][2c, 2c + 1], M[g][2c + 8, 2c + 9], M[g + 8][2c + 8,
// 2c + 9] (a B operand, M[2c, 2c + 1][g], M[2c + 8, 2c + 9][g], the register walk forms in its
// registers: b_pairs_of_tile). A split A operand keeps a group's four hi registers where
// split_a_heads puts a tf32 group's heads and its lo ones 128 words on.
// Row half `half` of accumulator tile (mi, ni) (its elements 2 half, 2 half + 1) is one register of
// the same lane's A operand: k step ni / 2, register half + 2 (ni % 2); its word in a split buffer:
[[maybe_unused]] __device__ inline int a_pair_word(int mi, int ni, int half, int lane, int steps) {
  return split_a_heads((mi * steps + ni / 2) * 32 + lane) + half + 2 * (ni & 1);
}

// Accumulator tile (mi, ni) into a split A operand in the form's fragment order (`steps` k steps
// of its width along the operand's columns).
template <bool kPairs>
__device__ inline void store_a_tile(float* a, int mi, int ni, int lane, int steps, const float (&x)[4]) {
#if defined(DING_GPU_NVIDIA_MMA)
  if constexpr (kPairs) {
    uint32_t* const words = reinterpret_cast<uint32_t*>(a);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t parts[2][4];
      split_pair<ding::bf16, 2>(x[2 * half], x[2 * half + 1], parts, 0);
      const int at = a_pair_word(mi, ni, half, lane, steps);
      words[at] = parts[0][0], words[at + 128] = parts[1][0];
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const FragmentPlace at = a_fragment_of_tile(mi, ni, e, lane, steps);
      float* const heads = a + split_a_heads(at.group) + at.slot;
      store_split(heads, heads + 128, x[e]);
    }
  }
#else
  (void)a, (void)mi, (void)ni, (void)lane, (void)steps, (void)x;
#endif
}

// The first pass's output for one segment, every block a multiple of 16 bytes. Per (sequence,
// value head, chunk) `per_value()` words of 4 bytes: W and A as A operands in fragment order, split
// (split_a_heads; `split_words` an element); U' row-major f32 [C][Dv]; γ; e^(G_n − G_i). Then per
// (sequence, key head, chunk) Q [C][Dk] and Kᵀ [Dk][C] as A operands in fragment order, elements
// of the kernels' E.
struct ChunkWorkspace {
  int C, Dk, Dv;
  int split_words;  // Parts::kSplitWords
  int64_t chunks;   // in the segment
  float* values;
  void* rows;
  bool async_rows;  // q, k and v rows are whole 16-byte pieces of E: the first pass copies them by cp.async
  __host__ __device__ int64_t per_value() const { return int64_t(C) * (split_words * (Dk + C) + Dv + 2); }
  __host__ __device__ float* w(int64_t bh, int64_t c) const { return values + (bh * chunks + c) * per_value(); }
  __host__ __device__ float* scores(int64_t bh, int64_t c) const { return w(bh, c) + int64_t(split_words) * C * Dk; }
  __host__ __device__ float* u(int64_t bh, int64_t c) const { return scores(bh, c) + int64_t(split_words) * C * C; }
  __host__ __device__ float* gamma(int64_t bh, int64_t c) const { return u(bh, c) + int64_t(C) * Dv; }
  __host__ __device__ float* tail(int64_t bh, int64_t c) const { return gamma(bh, c) + C; }
  template <class E>
  __host__ __device__ E* queries(int64_t bkh, int64_t c) const {
    return static_cast<E*>(rows) + (bkh * chunks + c) * 2 * int64_t(C) * Dk;
  }
  template <class E>
  __host__ __device__ E* keys(int64_t bkh, int64_t c) const { return queries<E>(bkh, c) + int64_t(C) * Dk; }
};

// Row pitches (in elements) that keep a warp's fragment reads on distinct banks: rows of E (f32 or
// 16-bit) read as an mma's A operand, and rows read as its B operand.
__host__ __device__ inline int a_pitch(int cols, int elem_bytes) { return cols + (elem_bytes == 4 ? 4 : 8); }
__host__ __device__ inline int b_pitch(int cols) { return (cols + 7) / 8 * 8 + 8; }

// Shared memory of the first pass: G (doubles), then floats, then the chunk's rows as E. With
// `t_in_queries` T takes the bytes of the chunk's queries, which nothing reads once A is formed
// (step 1), before T is (step 3): 17 KB less at 128-wide keys and chunks of 64, so that three
// blocks fit an H100's multiprocessor instead of two (queries_hold_t says where it fits).
struct PrepareLayout {
  int C, Dk, Dv, esize, cp, kp, vp;
  bool t_in_queries;
  __host__ __device__ PrepareLayout(int chunk, int dk, int dv, int elem_bytes, bool t_over_queries = false)
      : C(chunk), Dk(dk), Dv(dv), esize(elem_bytes), cp(chunk + 4), kp(a_pitch(dk, elem_bytes)), vp(b_pitch(dv)),
        t_in_queries(t_over_queries) {}
  __host__ __device__ bool queries_hold_t() const { return int64_t(C) * kp * esize >= int64_t(C) * cp * 4; }
  // floats after the doubles
  __host__ __device__ int64_t beta() const { return 0; }
  __host__ __device__ int64_t gamma() const { return C; }
  __host__ __device__ int64_t lower() const { return 2 * C; }                     // L: [C][cp]
  __host__ __device__ int64_t inverse() const { return lower() + int64_t(C) * cp; }  // T: [C][cp] (unless t_in_queries)
  __host__ __device__ int64_t blocks() const { return inverse() + (t_in_queries ? 0 : int64_t(C) * cp); }  // D_I: [C / 16][16][20]
  __host__ __device__ int64_t floats() const { return blocks() + int64_t(C) * 20; }
  // E elements after the floats
  __host__ __device__ int64_t keys() const { return 0; }  // [C][kp]
  __host__ __device__ int64_t queries() const { return int64_t(C) * kp; }
  __host__ __device__ int64_t values() const { return 2 * int64_t(C) * kp; }  // [C][vp]
  __host__ __device__ int64_t elements() const { return values() + int64_t(C) * vp; }
  __host__ __device__ size_t bytes() const { return size_t(C) * 8 + size_t(floats()) * 4 + size_t(elements()) * esize; }
};

// Element i of an input the kernels read as E: a 16-bit E is the input's own dtype (chunk_passes
// takes it only where q, k and v share it), read as such; an f32 E reads any input.
template <class E>
__device__ inline float load_element(const AnyFloat& x, int64_t i) {
  if constexpr (std::is_same_v<E, float>) return x.load(i);
  else return to_float(static_cast<const E*>(x.p)[i]);
}

template <class E>
__device__ inline E from_loaded(float x) {
  if constexpr (std::is_same_v<E, float>) return x;
  else return from_float<E>(x);  // exact: x was read from an E
}

// kk[t] += K_rows · K_cols(t)ᵀ (where `delta`) and qk[t] += Q_rows · K_cols(t)ᵀ for the first
// `tiles` of N 16 × 8 tiles: rows row0 … row0 + 15 of the chunk's keys and queries against key rows
// col0 + 8t … col0 + 8t + 7, all [C][pitch] 16-bit E in shared memory (N even; rows past the
// last tile read are the chunk's own).
template <int N, class E>
__device__ inline void key_products(float (&kk)[N][4], float (&qk)[N][4], bool delta, int tiles, const E* Ks, const E* Qs,
                                    int pitch, int row0, int col0, int Dk, int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  static_assert(N % 2 == 0, "key tiles go by pairs");
  for (int k0 = 0; k0 < Dk; k0 += 16) {
    uint32_t ka[4], qa[4];
    const int a_at = (row0 + lane % 16) * pitch + k0 + (lane / 16) * 8;
    if (delta) ldmatrix_x4(ka, Ks + a_at);
    ldmatrix_x4(qa, Qs + a_at);
#pragma unroll
    for (int t = 0; t < N; t += 2) {
      if (t >= tiles) break;
      uint32_t b[4];  // tile t's keys at k0 and k0 + 8, then tile t + 1's
      load_b_pair(b, Ks + (col0 + 8 * t) * pitch + k0, pitch, lane);
      if (delta) mma_16816<E>(kk[t], ka, b[0], b[1]);
      mma_16816<E>(qk[t], qa, b[0], b[1]);
      if (t + 1 < tiles) {
        if (delta) mma_16816<E>(kk[t + 1], ka, b[2], b[3]);
        mma_16816<E>(qk[t + 1], qa, b[2], b[3]);
      }
    }
  }
#else
  (void)kk, (void)qk, (void)delta, (void)tiles, (void)Ks, (void)Qs, (void)pitch, (void)row0, (void)col0, (void)Dk, (void)lane;
#endif
}

// acc[t] += (T diag(s))[row0 … row0 + 15, 0 … k_end) · B[0 … k_end, col0 + 8t …] for the first
// `tiles` of N 16 × 8 tiles, T f32 [.][t_pitch] and B bf16 rows [k][b_pitch] in shared memory (N
// even, k_end a multiple of 16; columns of a last odd tile's partner are padding). T diag(s)
// enters as three bf16 parts, together good to ~2^-24 as the tf32 head and tail are to ~2^-21,
// and B's rows are the mma's own operands, by ldmatrix: a k step of 16 takes three m16n8k16 a tile
// where the tf32 form took four m16n8k8 and a load and a split per element.
template <int N, class Scale>
__device__ inline void scaled_t_products(float (&acc)[N][4], int tiles, const float* T, int t_pitch, int row0, int k_end,
                                         Scale s, const ding::bf16* B, int b_pitch, int col0, int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  static_assert(N % 2 == 0, "column tiles go by pairs");
  const int g = lane >> 2, c = lane & 3;
  for (int k0 = 0; k0 < k_end; k0 += 16) {
    uint32_t a[3][4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const int r = row0 + g + 8 * (reg & 1), k = k0 + 2 * c + 8 * (reg >> 1);
      const float2 t = *reinterpret_cast<const float2*>(T + r * t_pitch + k);
      split_pair<ding::bf16, 3>(t.x * s(k), t.y * s(k + 1), a, reg);
    }
#pragma unroll
    for (int t = 0; t < N; t += 2) {
      if (t >= tiles) break;
      uint32_t b[4];  // k0 and k0 + 8 of tile t, then tile t + 1's
      load_b_pair_trans(b, B + k0 * b_pitch + col0 + 8 * t, b_pitch, lane);
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        mma_16816<ding::bf16>(acc[t], a[p], b[0], b[1]);
        mma_16816<ding::bf16>(acc[t + 1], a[p], b[2], b[3]);
      }
    }
  }
#else
  (void)acc, (void)tiles, (void)T, (void)t_pitch, (void)row0, (void)k_end, (void)s, (void)B, (void)b_pitch, (void)col0, (void)lane;
#endif
}

// The chunk's rows of k, q ([C][kp]) and v ([C][vp]) by cp.async, a warp per row, rows past n
// zero-filled, v's padding columns zeroed; the thread's copies are one committed group, waited for
// here (the caller's barrier then publishes them). Only where every row is whole 16-byte pieces of
// E (ws.async_rows).
template <class E>
__device__ inline void stage_rows_async(E* Ks, E* Qs, E* Vs, const PrepareLayout& lay, AnyFloat q, AnyFloat k, AnyFloat v,
                                        const DeltaShape& sh, int64_t b, int64_t t0, int64_t kh, int64_t h, int n, int warp,
                                        int lane) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr int kPiece = 16 / int(sizeof(E));  // elements a copy
  const int key_pieces = lay.Dk / kPiece, pieces = 2 * key_pieces + lay.Dv / kPiece;
  const E* const q_in = static_cast<const E*>(q.p);
  const E* const k_in = static_cast<const E*>(k.p);
  const E* const v_in = static_cast<const E*>(v.p);
  for (int j = warp; j < lay.C; j += kMmaWarps) {
    const bool in = j < n;
    const int64_t tj = in ? t0 + j : 0;
    const E* const k_row = k_in + sh.k.at(b, tj, kh);
    const E* const q_row = q_in + sh.q.at(b, tj, kh);
    const E* const v_row = v_in + sh.v.at(b, tj, h);
    for (int p = lane; p < pieces; p += 32) {
      const E* src;
      E* dst;
      if (p < key_pieces) src = k_row + kPiece * p, dst = Ks + j * lay.kp + kPiece * p;
      else if (p < 2 * key_pieces) src = q_row + kPiece * (p - key_pieces), dst = Qs + j * lay.kp + kPiece * (p - key_pieces);
      else src = v_row + kPiece * (p - 2 * key_pieces), dst = Vs + j * lay.vp + kPiece * (p - 2 * key_pieces);
      cp_async_16(smem_address(dst), src, in ? 16 : 0);
    }
    if (lane == 0) *reinterpret_cast<uint4*>(Vs + j * lay.vp + lay.Dv) = make_uint4(0, 0, 0, 0);  // vp = Dv + 8
  }
  cp_async_commit();
  cp_async_wait<0>();
#else
  (void)Ks, (void)Qs, (void)Vs, (void)lay, (void)q, (void)k, (void)v, (void)sh, (void)b, (void)t0, (void)kh, (void)h, (void)n,
      (void)warp, (void)lane;
#endif
}

// M (rows × cols of E, [rows][pitch] in shared memory, or its transpose where `transposed`: M[r][κ]
// = src[κ][r]) out as an A operand in the form's fragment order (a_fragment_of_tile, or the bf16
// pairs' registers): a lane's elements of a group together, so a warp stores 32 consecutive groups,
// a warp per (row tile, k step).
template <bool kPairs, class E>
__device__ inline void write_fragments(E* out, const E* src, int pitch, int rows, int cols, bool transposed, int warp, int lane) {
  struct alignas(4 * sizeof(E)) Group {
    E x[4];
  };
  struct alignas(8 * sizeof(E)) PairGroup {
    E x[8];
  };
  const int steps = cols / Parts<kPairs>::kK;
  auto at = [&](int r, int kk) { return transposed ? src[kk * pitch + r] : src[r * pitch + kk]; };
  for (int mi = 0; mi < rows / 16; ++mi)
    for (int ks = warp; ks < steps; ks += kMmaWarps) {
      const int r = 16 * mi + lane / 4, group = (mi * steps + ks) * 32 + lane;
      if constexpr (kPairs) {
        const int kk = 16 * ks + 2 * (lane % 4);
        reinterpret_cast<PairGroup*>(out)[group] = PairGroup{{at(r, kk), at(r, kk + 1), at(r + 8, kk), at(r + 8, kk + 1),
                                                              at(r, kk + 8), at(r, kk + 9), at(r + 8, kk + 8), at(r + 8, kk + 9)}};
      } else {
        const int kk = 8 * ks + lane % 4;
        reinterpret_cast<Group*>(out)[group] = Group{{at(r, kk), at(r + 8, kk), at(r, kk + 4), at(r + 8, kk + 4)}};
      }
    }
}

// Elements col and col + 1 (col even) of a row of T, those below `width`, from a lane's accumulator
// pair: one store of the pair (Typed::store<2>) where `pairs` says the row's even columns are
// aligned for it (rows at even strides of an aligned tensor), else one element at a time.
template <class T>
__device__ inline void store_row_pair(T* row, int col, int width, bool pairs, float x0, float x1) {
  const Typed<T> out{row};
  if (pairs && col + 1 < width) {
    const float x[2] = {x0, x1};
    out.template store<2>(col, x);
    return;
  }
  if (col < width) out.store(col, x0);
  if (col + 1 < width) out.store(col + 1, x1);
}

// kBlocksPerSm: 2, or 3 with T over the queries (PrepareLayout) and at most 80 registers a thread.
template <int C, class E, bool kPairs, int kBlocksPerSm = 2>
__global__ void __launch_bounds__(kMmaThreads, kBlocksPerSm)
    gated_delta_rule_prepare_kernel(AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, DeltaShape sh,
                                    int64_t t_begin, ChunkWorkspace ws) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr int kBlocks = C / 16;
  constexpr int PE = std::is_same_v<E, float> ? 2 : 1;  // parts of an input operand
  const PrepareLayout lay(C, sh.Dk, sh.Dv, int(sizeof(E)), kBlocksPerSm == 3);
  const int Dk = sh.Dk, Dv = sh.Dv, cp = lay.cp, kp = lay.kp, vp = lay.vp;
  extern __shared__ double shared_mem[];
  double* const G = shared_mem;
  float* const base = reinterpret_cast<float*>(shared_mem + C);
  float* const Bt = base + lay.beta();
  float* const gam = base + lay.gamma();
  float* const L = base + lay.lower();
  float* const Dinv = base + lay.blocks();
  E* const ebase = reinterpret_cast<E*>(base + lay.floats());
  E* const Ks = ebase + lay.keys();
  E* const Qs = ebase + lay.queries();
  E* const Vs = ebase + lay.values();
  float* const Tm = lay.t_in_queries ? reinterpret_cast<float*>(Qs) : base + lay.inverse();  // written from step 3 on

  const int64_t c = int64_t(blockIdx.x) % ws.chunks, bh = int64_t(blockIdx.x) / ws.chunks;
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, group = sh.Hv / sh.Hk, kh = h / group;
  const int64_t t0 = t_begin + c * C;
  const int n = int(sh.T - t0 < C ? sh.T - t0 : int64_t(C));
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;

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
    float* const gamma_out = ws.gamma(bh, c);
    float* const tail_out = ws.tail(bh, c);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int j = lane + 32 * half;
      if (j < C) {
        G[j] = x[half];
        Bt[j] = st[half];
        gam[j] = float(exp(x[half]));
        gamma_out[j] = gam[j];
        tail_out[j] = float(exp(total - x[half]));
      }
    }
  }
  // The chunk's rows (zero past n) into shared memory: by cp.async where they are 16-byte pieces
  // (ws.async_rows), else a warp per two rows, every load of a row pair issued before any is stored
  // so they are in flight together.
  if (ws.async_rows) {
    stage_rows_async<E>(Ks, Qs, Vs, lay, q, k, v, sh, b, t0, kh, h, n, warp, lane);
  } else {
    constexpr int kPerLane = int(ops::kMaxDeltaRuleKeyDim) / 32;
    for (int j0 = warp; j0 < C; j0 += 2 * kMmaWarps) {
      float kx[2][kPerLane], qx[2][kPerLane];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = j0 + r * kMmaWarps;
        const bool in = j < n;
        const int64_t k_row = in ? sh.k.at(b, t0 + j, kh) : 0, q_row = in ? sh.q.at(b, t0 + j, kh) : 0;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u) {
          const int d = lane + 32 * u;
          kx[r][u] = in && d < Dk ? load_element<E>(k, k_row + d) : 0.0f;
          qx[r][u] = in && d < Dk ? load_element<E>(q, q_row + d) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = j0 + r * kMmaWarps;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u) {
          const int d = lane + 32 * u;
          if (d >= Dk) break;
          Ks[j * kp + d] = from_loaded<E>(kx[r][u]), Qs[j * kp + d] = from_loaded<E>(qx[r][u]);
        }
      }
    }
    for (int j0 = warp; j0 < C; j0 += 2 * kMmaWarps)
      for (int e0 = 0; e0 < vp; e0 += 32 * kPerLane) {
        float vx[2][kPerLane];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int j = j0 + r * kMmaWarps;
          const int64_t v_row = j < n ? sh.v.at(b, t0 + j, h) : 0;
#pragma unroll
          for (int u = 0; u < kPerLane; ++u) {
            const int e = e0 + lane + 32 * u;
            vx[r][u] = j < n && e < Dv ? load_element<E>(v, v_row + e) : 0.0f;
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int u = 0; u < kPerLane; ++u) {
            const int e = e0 + lane + 32 * u;
            if (e < vp) Vs[(j0 + r * kMmaWarps) * vp + e] = from_loaded<E>(vx[r][u]);
          }
      }
  }
  __syncthreads();
  // The first value head of each key head copies q and k out for the walk, in fragment order.
  if (h % group == 0) {
    write_fragments<kPairs>(ws.queries<E>(b * sh.Hk + kh, c), Qs, kp, C, Dk, false, warp, lane);
    write_fragments<kPairs>(ws.keys<E>(b * sh.Hk + kh, c), Ks, kp, Dk, C, true, warp, lane);
  }

  // 1. L_ij = β_i e^(G_i − G_j) k_i·k_j (j < i) and A_ij = s e^(G_i − G_j) q_i·k_j (j ≤ i), zero
  //    elsewhere; L stays here, A goes out (fragment order, split).
  // A warp takes up to four column tiles of one row block, sharing their A fragments.
  constexpr int kRowTiles = C / 8 < 4 ? C / 8 : 4, kGroups = C / 8 / kRowTiles;
  auto row_major = [](const E* m, int pitch, int row0) { return [=](int r, int kk) { return to_float(m[(row0 + r) * pitch + kk]); }; };
  float* const A_out = ws.scores(bh, c);
  for (int p = warp; p < kBlocks * kGroups; p += kMmaWarps) {
    const int mi = p / kGroups, n0 = p % kGroups * kRowTiles;
    const int lower = max(0, min(kRowTiles, 2 * mi + 2 - n0));  // tiles reaching the diagonal or below it
    float kk_acc[kRowTiles][4] = {}, qk_acc[kRowTiles][4] = {};
    auto key_cols = [=](int t, int kk, int cc) { return to_float(Ks[(8 * (n0 + t) + cc) * kp + kk]); };
    if constexpr (std::is_same_v<E, float>) {
      if (sh.delta) mma_tf32_tiles_shared_a<PE, PE>(kk_acc, lower, row_major(Ks, kp, 16 * mi), key_cols, 0, Dk, lane);
      mma_tf32_tiles_shared_a<PE, PE>(qk_acc, lower, row_major(Qs, kp, 16 * mi), key_cols, 0, Dk, lane);
    } else {
      // 16-bit rows are the mma's own operands (their products exact in the f32 sums, as in tf32):
      // m16n8k16 with fragments by ldmatrix, a k step of 16 in three instructions a tile pair
      // where the tf32 form took a load and a conversion per element.
      key_products<kRowTiles>(kk_acc, qk_acc, sh.delta, lower, Ks, Qs, kp, 16 * mi, 8 * n0, Dk, lane);
    }
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      float scores[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = tile_row(mi, e, lane), j = tile_col(n0 + t, e, lane);
        const float ratio = j <= i ? expf(float(G[i] - G[j])) : 0.0f;
        L[i * cp + j] = j < i && sh.delta ? Bt[i] * ratio * kk_acc[t][e] : 0.0f;
        scores[e] = sh.scale * ratio * qk_acc[t][e];
      }
      store_a_tile<kPairs>(A_out, mi, n0 + t, lane, C / Parts<kPairs>::kK, scores);
    }
  }
  __syncthreads();

  // 2. D_I = (I + L_II)^(-1), unit lower triangular: warp I, lane l < 16 solves for column l.
  if (warp < kBlocks && lane < 16) {
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

  // 3. T = (I + L)^(-1) by blocks of 16 rows, T_I = D_I (E_I − L_{I,<I} T_{<I}), a warp per 8
  //    columns, so it needs no block barrier.
  for (int ni = warp; ni < C / 8; ni += kMmaWarps) {
    auto t_col = [=](int row0) { return [=](int kk, int cc) { return Tm[(row0 + kk) * cp + 8 * ni + cc]; }; };
    for (int I = 0; I < kBlocks; ++I) {
      float x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = tile_row(I, e, lane) == tile_col(ni, e, lane) ? 1.0f : 0.0f;
      if (I > 0) mma_tf32_tile<2, 2>(x, [=](int r, int kk) { return -L[(16 * I + r) * cp + kk]; }, t_col(0), 0, 16 * I, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) Tm[tile_row(I, e, lane) * cp + tile_col(ni, e, lane)] = x[e];
      __syncwarp();
      float t[4] = {0, 0, 0, 0};
      mma_tf32_tile<2, 2>(t, [=](int r, int kk) { return Dinv[(16 * I + r) * 20 + kk]; }, t_col(16 * I), 0, 16, lane);
      __syncwarp();
#pragma unroll
      for (int e = 0; e < 4; ++e) Tm[tile_row(I, e, lane) * cp + tile_col(ni, e, lane)] = t[e];
      __syncwarp();
    }
  }
  __syncthreads();

  // 4. U' = T diag(β) V (row-major) and W = T diag(βγ) K (fragment order, split; without the delta
  //    correction W is never read), T lower triangular: row block mi needs columns below 16 (mi + 1).
  //    A warp takes up to four column tiles of U' or of W in one row block.
  const int v_tiles = (Dv + 7) / 8, v_groups = (v_tiles + 3) / 4, w_groups = sh.delta ? (Dk / 8 + 3) / 4 : 0;
  const int groups = v_groups + w_groups;
  float* const U_out = ws.u(bh, c);
  float* const W_out = ws.w(bh, c);
  for (int p = warp; p < kBlocks * groups; p += kMmaWarps) {
    const int mi = p / groups, group = p % groups;
    float acc[4][4] = {};
    if (group < v_groups) {
      const int n0 = 4 * group, tiles = min(4, v_tiles - n0);
      if constexpr (std::is_same_v<E, ding::bf16>)
        scaled_t_products(acc, tiles, Tm, cp, 16 * mi, 16 * mi + 16, [=](int kk) { return Bt[kk]; }, Vs, vp, 8 * n0, lane);
      else
        mma_tf32_tiles_shared_a<2, PE>(acc, tiles, [=](int r, int kk) { return Tm[(16 * mi + r) * cp + kk] * Bt[kk]; },
                                       [=](int t, int kk, int cc) { return to_float(Vs[kk * vp + 8 * (n0 + t) + cc]); }, 0,
                                       16 * mi + 16, lane);
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = tile_row(mi, 2 * half, lane), col = tile_col(n0 + t, 0, lane);
          if (t < tiles) store_row_pair(U_out + i * Dv, col, Dv, Dv % 2 == 0, acc[t][2 * half], acc[t][2 * half + 1]);
        }
    } else {
      const int n0 = 4 * (group - v_groups), tiles = min(4, Dk / 8 - n0);
      if constexpr (std::is_same_v<E, ding::bf16>)
        scaled_t_products(acc, tiles, Tm, cp, 16 * mi, 16 * mi + 16, [=](int kk) { return Bt[kk] * gam[kk]; }, Ks, kp, 8 * n0, lane);
      else
        mma_tf32_tiles_shared_a<2, PE>(acc, tiles, [=](int r, int kk) { return Tm[(16 * mi + r) * cp + kk] * (Bt[kk] * gam[kk]); },
                                       [=](int t, int kk, int cc) { return to_float(Ks[kk * kp + 8 * (n0 + t) + cc]); }, 0,
                                       16 * mi + 16, lane);
#pragma unroll
      for (int t = 0; t < 4; ++t)
        if (t < tiles) store_a_tile<kPairs>(W_out, mi, n0 + t, lane, Dk / Parts<kPairs>::kK, acc[t]);
    }
  }
#else
  (void)q, (void)k, (void)v, (void)g, (void)beta, (void)sh, (void)t_begin, (void)ws;
#endif  // DING_GPU_NVIDIA_MMA
}

// Shared memory of the tiled walk, in 4-byte words then E elements: the tile of S
// [Dk][kMmaColumns], the chunk's U and e^(G_n − G_j) U_j [C][kMmaColumns] as split B operands in
// fragment order (`split_words` an element); the chunk's W, A, Q and Kᵀ as the first pass laid them
// out; γ and e^(G_n − G_j) twice (this chunk's, and the next one's arriving with W).
struct TiledWalkLayout {
  int C, Dk, esize, split_words;
  __host__ __device__ TiledWalkLayout(int chunk, int dk, int elem_bytes, int split)
      : C(chunk), Dk(dk), esize(elem_bytes), split_words(split) {}
  __host__ __device__ int64_t state() const { return 0; }
  __host__ __device__ int64_t writes() const { return int64_t(split_words) * Dk * kMmaColumns; }  // U, then decayed U
  __host__ __device__ int64_t w() const { return writes() + 2 * int64_t(split_words) * C * kMmaColumns; }
  __host__ __device__ int64_t scores() const { return w() + int64_t(split_words) * C * Dk; }
  __host__ __device__ int64_t decays() const { return scores() + int64_t(split_words) * C * C; }  // [2][γ: C, tail: C]
  __host__ __device__ int64_t floats() const { return decays() + 4 * int64_t(C); }
  __host__ __device__ int64_t queries() const { return 0; }  // E elements after the floats
  __host__ __device__ int64_t keys() const { return int64_t(C) * Dk; }
  __host__ __device__ size_t bytes() const { return size_t(floats()) * 4 + size_t(2 * int64_t(C) * Dk) * esize; }
};

// `bytes` (a multiple of 16) from global to shared memory, 16 bytes per cp.async, over a walk's
// block of kThreads, in rounds of the whole block: a size known when compiling unrolls into
// copies at fixed offsets (a walk issues 16 to 40 a thread a chunk).
template <int kThreads>
__device__ inline void copy_async(void* dst, const void* src, int bytes, int tid) {
#if defined(DING_GPU_NVIDIA_MMA)
  constexpr int kRound = 16 * kThreads;
#pragma unroll
  for (int r = 0; r < (bytes + kRound - 1) / kRound; ++r) {
    const int i = r * kRound + 16 * tid;
    if (bytes % kRound == 0 || i < bytes)
      cp_async_16(smem_address(static_cast<char*>(dst) + i), static_cast<const char*>(src) + i, 16);
  }
#else
  (void)dst, (void)src, (void)bytes, (void)tid;
#endif
}

// A lane's A operand of one tf32 k step from a fragment-order group of E, as tf32 bit patterns
// (16-bit E is exact in tf32; f32 is split into heads and tails).
template <class E>
__device__ inline void load_a_tf32(const E* group, uint32_t (&head)[4], uint32_t (&tail)[4]) {
#if defined(DING_GPU_NVIDIA_MMA)
  if constexpr (std::is_same_v<E, float>) {
    const float4 x = *reinterpret_cast<const float4*>(group);
    split_tf32(x.x, head[0], tail[0]), split_tf32(x.y, head[1], tail[1]);
    split_tf32(x.z, head[2], tail[2]), split_tf32(x.w, head[3], tail[3]);
  } else if constexpr (std::is_same_v<E, ding::bf16>) {
    // A bf16 is the top half of its f32: one shift or mask an element.
    const uint2 x = *reinterpret_cast<const uint2*>(group);
    head[0] = x.x << 16, head[1] = x.x & 0xffff0000u, head[2] = x.y << 16, head[3] = x.y & 0xffff0000u;
    (void)tail;
  } else {
    const uint2 x = *reinterpret_cast<const uint2*>(group);
    const uint32_t halves[4] = {x.x & 0xffffu, x.x >> 16, x.y & 0xffffu, x.y >> 16};
#pragma unroll
    for (int i = 0; i < 4; ++i) head[i] = __float_as_uint(to_float(E{uint16_t(halves[i])}));
    (void)tail;
  }
#else
  (void)group, (void)head, (void)tail;
#endif
}

// acc += a · b for one tile of tf32 m16n8k8 with a and b as heads (h) and tails (t): the three
// products that matter, or two where a is exact (no tail).
template <bool kSplitA>
__device__ inline void mma_parts(float (&acc)[4], const uint32_t (&ah)[4], const uint32_t (&at)[4], const uint32_t (&bh)[2],
                                 const uint32_t (&bt)[2]) {
#if defined(DING_GPU_NVIDIA_MMA)
  mma_1688_tf32(acc, ah, bh);
  mma_1688_tf32(acc, ah, bt);
  if constexpr (kSplitA) mma_1688_tf32(acc, at, bh);
#else
  (void)acc, (void)ah, (void)at, (void)bh, (void)bt;
#endif
}

// A product's accumulator as its three parts (head × head, head × tail, tail × head), each in its
// own registers: a k step's mmas then wait on no other mma of that step, and the chain the k loop
// builds is a third as long (half, where A is exact). Where a warp has few tiles to interleave (U,
// Q S_0 and A U), the mma latency along that chain, not the issue rate, set the walk's pace.
struct PartSums {
  float hh[4] = {}, ht[4] = {}, th[4] = {};
  __device__ float operator[](int e) const { return hh[e] + (ht[e] + th[e]); }
};

template <bool kSplitA>
__device__ inline void mma_parts(PartSums& acc, const uint32_t (&ah)[4], const uint32_t (&at)[4], const uint32_t (&bh)[2],
                                 const uint32_t (&bt)[2]) {
#if defined(DING_GPU_NVIDIA_MMA)
  mma_1688_tf32(acc.hh, ah, bh);
  mma_1688_tf32(acc.ht, ah, bt);
  if constexpr (kSplitA) mma_1688_tf32(acc.th, at, bh);
#else
  (void)acc, (void)ah, (void)at, (void)bh, (void)bt;
#endif
}

// Accumulator tile (mi, ni), x, into a split tf32 B operand in fragment order (`steps` k steps of
// 8 along the operand's rows; k the tile's row, n its column).
[[maybe_unused]] __device__ inline void store_b_tile(float* b, int mi, int ni, int lane, int steps, const float (&x)[4]) {
#if defined(DING_GPU_NVIDIA_MMA)
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const FragmentPlace at = b_fragment_of_tile(mi, ni, e, lane, steps);
    store_split(b + at.group * 4 + at.slot, b + at.group * 4 + 2 + at.slot, x[e]);
  }
#else
  (void)b, (void)mi, (void)ni, (void)lane, (void)steps, (void)x;
#endif
}

// A lane's split A operand of row tile mi, k step ks from a fragment-order buffer of `steps` k
// steps (heads or hi parts, then tails or lo parts; split_a_heads).
[[maybe_unused]] __device__ inline void load_a_split(const float* buffer, int steps, int mi, int ks, int lane, uint32_t (&head)[4],
                                    uint32_t (&tail)[4]) {
  const float* const heads = buffer + split_a_heads((mi * steps + ks) * 32 + lane);
  const float4 x = *reinterpret_cast<const float4*>(heads), y = *reinterpret_cast<const float4*>(heads + 128);
  head[0] = __float_as_uint(x.x), head[1] = __float_as_uint(x.y), head[2] = __float_as_uint(x.z), head[3] = __float_as_uint(x.w);
  tail[0] = __float_as_uint(y.x), tail[1] = __float_as_uint(y.y), tail[2] = __float_as_uint(y.z), tail[3] = __float_as_uint(y.w);
}

// A lane's elements of U' of chunk c (f32 [C][Dv] in the workspace) for the first `tiles` of N
// accumulator tiles, row tiles mi0 + stride·t, column tile ni of the block's columns e0 …: zero
// past the block's width; nothing is loaded for a chunk past the segment. The one operand of a
// chunk that a walk reads from global memory without cp.async, a chunk ahead of its use.
// kWholeFirst: a branch-free copy of the loads for whole blocks of even Dv, where a walk has the
// registers for it (the register walk; the tiled walk's f32 instance spills 20 bytes with it).
template <int N, bool kWholeFirst = false>
__device__ inline void load_u_tiles(float (&u)[N][4], const ChunkWorkspace& ws, int64_t bh, int64_t c, int Dv, int e0,
                                    int width, int ni, int mi0, int stride, int tiles, int lane) {
  if (c >= ws.chunks) return;
  const float* const u_in = ws.u(bh, c);
  const int col = tile_col(ni, 0, lane);
  if (kWholeFirst && width == kMmaColumns && Dv % 2 == 0) {  // every lane's pair whole and 8-byte aligned
#pragma unroll
    for (int t = 0; t < N; ++t)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float* const row = u_in + tile_row(mi0 + stride * t, 2 * half, lane) * Dv + e0;
        const float2 x = t < tiles ? *reinterpret_cast<const float2*>(row + col) : make_float2(0.0f, 0.0f);
        u[t][2 * half] = x.x, u[t][2 * half + 1] = x.y;
      }
    return;
  }
#pragma unroll
  for (int t = 0; t < N; ++t)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float* const row = u_in + tile_row(mi0 + stride * t, 2 * half, lane) * Dv + e0;
      float2 x = make_float2(0.0f, 0.0f);
      if (t < tiles && col + 1 < width && Dv % 2 == 0) {
        x = *reinterpret_cast<const float2*>(row + col);  // U' rows start 8-byte aligned where Dv is even
      } else if (t < tiles) {
        if (col < width) x.x = row[col];
        if (col + 1 < width) x.y = row[col + 1];
      }
      u[t][2 * half] = x.x, u[t][2 * half + 1] = x.y;
    }
}

// A head's state f32 [Dk][Dv] at `head`, the first `tiles` of N accumulator tiles of a lane (row
// tiles mi0 + stride·t, column tile ni of the block's columns e0 …): loaded (zero past the block's
// width and past `tiles`) when a walk starts, and stored back when it ends.
template <int N>
__device__ inline void load_state_tiles(float (&S)[N][4], const float* head, int Dv, int e0, int width, int ni, int mi0,
                                        int stride, int tiles, int lane) {
#pragma unroll
  for (int t = 0; t < N; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = tile_row(mi0 + stride * t, e, lane), col = tile_col(ni, e, lane);
      S[t][e] = t < tiles && col < width ? head[int64_t(d) * Dv + e0 + col] : 0.0f;
    }
}
template <int N>
__device__ inline void store_state_tiles(const float (&S)[N][4], float* head, int Dv, int e0, int width, int ni, int mi0,
                                         int stride, int tiles, int lane) {
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (t >= tiles) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = tile_row(mi0 + stride * t, e, lane), col = tile_col(ni, e, lane);
      if (col < width) head[int64_t(d) * Dv + e0 + col] = S[t][e];
    }
  }
}

// What a walk is told beside the shapes: whether every output row's even columns start a pair it
// may store as one (store_row_pair), and whether it may copy a chunk's operands by the copy
// engine's bulk copies (sm_90+; the register walk; otherwise cp.async by every thread).
struct WalkOptions {
  bool out_pairs, bulk;
};

// The tiled walk (tf32). DK: the key dim where it is known when compiling (0: sh.Dk), so that the
// loops over it unroll and their shared-memory offsets fold into the instructions: the walk is
// issue-bound, and a rolled loop's counters, branches and address arithmetic were most of its
// instructions.
template <int C, class E, int DK>
__global__ void __launch_bounds__(kWalkThreads)
    gated_delta_rule_tiled_walk_kernel(AnyFloat out, float* state, DeltaShape sh, int64_t t_begin, ChunkWorkspace ws, WalkOptions opt) {
#if defined(DING_GPU_NVIDIA_MMA)
  using P = Parts<false>;
  constexpr int kBlocks = C / 16, kSteps = C / P::kK;
  constexpr bool kSplitE = std::is_same_v<E, float>;
  constexpr int kOutTiles = (kBlocks * (kMmaColumns / 8) + kWalkWarps - 1) / kWalkWarps;  // of U and O, per warp
  constexpr int kStateTiles = int(DK > 0 ? DK : ops::kMaxDeltaRuleKeyDim) / 16 * (kMmaColumns / 8) / kWalkWarps;  // of S, per warp at most
  constexpr int kRowGroups = kWalkWarps / (kMmaColumns / 8);  // warps per column tile
  constexpr int kKeyUnroll = DK > 0 ? DK / P::kK : 1;
  const int Dk = DK > 0 ? DK : sh.Dk, key_steps = Dk / P::kK;
  const TiledWalkLayout lay(C, Dk, int(sizeof(E)), P::kSplitWords);
  extern __shared__ float4 walk_mem[];
  float* const base = reinterpret_cast<float*>(walk_mem);
  float* const Sb = base + lay.state();
  float* const Ub = base + lay.writes();
  float* const Db = Ub + P::kSplitWords * C * kMmaColumns;  // e^(G_n − G_j) U_j
  float* const Wf = base + lay.w();
  float* const Af = base + lay.scores();
  float* const decays = base + lay.decays();
  E* const Qf = reinterpret_cast<E*>(base + lay.floats()) + lay.queries();
  E* const Kf = reinterpret_cast<E*>(base + lay.floats()) + lay.keys();

  const int tiles = (sh.Dv + kMmaColumns - 1) / kMmaColumns;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int e0 = int(int64_t(blockIdx.x) % tiles) * kMmaColumns, width = min(kMmaColumns, sh.Dv - e0);
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, bkh = b * sh.Hk + h / (sh.Hv / sh.Hk);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  float* const state_head = state + bh * int64_t(Dk) * sh.Dv;
  // Warp w's tiles of [C][kMmaColumns] and of S's [Dk][kMmaColumns] are w, w + kWalkWarps, ...: rows
  // 16 (w / 4 + kRowGroups t), the same 8 columns (w % 4), so they share the B operand and their mma
  // chains interleave.
  const int ni = warp % 4;
  // Where the tiles deal out evenly (chunks of 64; 128-wide keys) every warp has the most, a
  // count known when compiling: no branch or predicate around the mmas, which would also make the
  // compiler put a warp sync before each.
  constexpr bool kEvenOut = kBlocks * 4 % kWalkWarps == 0, kEvenState = DK > 0 && DK / 16 * 4 % kWalkWarps == 0;
  const int out_tiles = kEvenOut ? kOutTiles : (kBlocks * 4 - warp + kWalkWarps - 1) / kWalkWarps;
  const int state_tiles = kEvenState ? kStateTiles : ((Dk / 16) * 4 - warp + kWalkWarps - 1) / kWalkWarps;
  auto mi_of = [&](int t) { return warp / 4 + kRowGroups * t; };

  // The copies of a chunk's operands, each issued once its buffer's last reader is done: W, Q and
  // the decays (read first) while the chunk before writes O and S, A and Kᵀ while the chunk before
  // ends and this one computes U. Two block barriers a chunk: U written (W and Q free), and S
  // written (A and Kᵀ free, the next W and Q landed).
  auto copy_wq = [&](int64_t c) {
    if (c < ws.chunks) {
      if (sh.delta) copy_async<kWalkThreads>(Wf, ws.w(bh, c), 4 * P::kSplitWords * C * Dk, tid);
      copy_async<kWalkThreads>(Qf, ws.queries<E>(bkh, c), C * Dk * int(sizeof(E)), tid);
      copy_async<kWalkThreads>(decays + (c & 1) * 2 * C, ws.gamma(bh, c), 8 * C, tid);  // γ, then e^(G_n − G_j)
    }
    cp_async_commit();
  };
  auto copy_a = [&](int64_t c) {
    if (c < ws.chunks) copy_async<kWalkThreads>(Af, ws.scores(bh, c), 4 * P::kSplitWords * C * C, tid);
    cp_async_commit();
  };
  auto copy_k = [&](int64_t c) {
    if (c < ws.chunks) copy_async<kWalkThreads>(Kf, ws.keys<E>(bkh, c), C * Dk * int(sizeof(E)), tid);
    cp_async_commit();
  };
  copy_wq(0);
  copy_a(0);
  copy_k(0);

  float S[kStateTiles][4];
  auto write_state = [&] {
#pragma unroll
    for (int t = 0; t < kStateTiles; ++t) {
      if (t >= state_tiles) break;
      store_b_tile(Sb, mi_of(t), ni, lane, key_steps, S[t]);
    }
  };
  load_state_tiles(S, state_head, sh.Dv, e0, width, ni, warp / 4, kRowGroups, state_tiles, lane);
  write_state();
  cp_async_wait<2>();  // W, Q, γ and the tail weights of chunk 0
  __syncthreads();     // ... and everyone's, and S

  // A lane's B operand of k step ks from a fragment-order buffer of `steps` steps, column tile ni.
  auto load_b = [&](const float* buffer, int steps, int ks, uint32_t (&bh_)[2], uint32_t (&bt_)[2]) {
    const uint4 x = reinterpret_cast<const uint4*>(buffer)[(ni * steps + ks) * 32 + lane];
    bh_[0] = x.x, bh_[1] = x.y, bt_[0] = x.z, bt_[1] = x.w;
  };

  // A warp's elements of U' for chunk c, loaded a chunk ahead.
  float u_next[kOutTiles][4];
  auto load_u = [&](int64_t c) { load_u_tiles(u_next, ws, bh, c, sh.Dv, e0, width, ni, warp / 4, kRowGroups, out_tiles, lane); };
  load_u(0);

  for (int64_t c = 0; c < ws.chunks; ++c) {
    const int64_t t0 = t_begin + c * C;
    const int n = int(sh.T - t0 < C ? sh.T - t0 : int64_t(C));
    const float* const gam = decays + (c & 1) * 2 * C;
    const float* const tail = gam + C;

    // U = U' − W S_0, and Q S_0 kept for O: one k loop over S's rows.
    float u[kOutTiles][4];
    PartSums q_s[kOutTiles], w_s[kOutTiles];
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) u[t][e] = u_next[t][e];
    // One loop for each value of sh.delta, so that no mma in it is predicated.
    auto state_products = [&](auto delta) {
#pragma unroll kKeyUnroll
      for (int ks = 0; ks < key_steps; ++ks) {
        uint32_t bh_[2], bt_[2];
        load_b(Sb, key_steps, ks, bh_, bt_);
#pragma unroll
        for (int t = 0; t < kOutTiles; ++t) {
          if (t >= out_tiles) break;
          uint32_t ah_[4], at_[4];
          if constexpr (decltype(delta)::value) {
            load_a_split(Wf, key_steps, mi_of(t), ks, lane, ah_, at_);
            mma_parts<true>(w_s[t], ah_, at_, bh_, bt_);
          }
          load_a_tf32(Qf + ((mi_of(t) * key_steps + ks) * 32 + lane) * (P::kK / 2), ah_, at_);
          mma_parts<kSplitE>(q_s[t], ah_, at_, bh_, bt_);
        }
      }
    };
    if (sh.delta) state_products(std::true_type{});
    else state_products(std::false_type{});
    float qs[kOutTiles][4];  // Q S_0 summed, so its parts' registers are free for A U's
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) qs[t][e] = q_s[t][e];
#pragma unroll
    for (int t = 0; t < kOutTiles; ++t) {
      if (t >= out_tiles) break;
      float x[4], decayed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[e] = u[t][e] - w_s[t][e];
        decayed[e] = tail[tile_row(mi_of(t), e, lane)] * x[e];
      }
      store_b_tile(Ub, mi_of(t), ni, lane, kSteps, x);
      store_b_tile(Db, mi_of(t), ni, lane, kSteps, decayed);
    }
    cp_async_wait<0>();  // A and Kᵀ of chunk c
    __syncthreads();     // U is written; W and Q are free
    copy_wq(c + 1);
    load_u(c + 1);

    // O = s γ ⊙ (Q S_0) + A U (A is zero above its diagonal, so the last tile's rows bound k).
    PartSums au[kOutTiles];
    const int causal_steps = out_tiles > 0 ? 16 * (mi_of(out_tiles - 1) + 1) / P::kK : 0;
    for (int ks = 0; ks < causal_steps; ++ks) {
      uint32_t bh_[2], bt_[2];
      load_b(Ub, kSteps, ks, bh_, bt_);
#pragma unroll
      for (int t = 0; t < kOutTiles; ++t) {
        if (t >= out_tiles) break;
        uint32_t ah_[4], at_[4];
        load_a_split(Af, kSteps, mi_of(t), ks, lane, ah_, at_);
        mma_parts<true>(au[t], ah_, at_, bh_, bt_);
      }
    }
    // Typed once a chunk, not switched on per element: a dtype switch and a row address per
    // element would be a tenth of the walk's instructions.
    auto store_o = [&](auto* o) {
#pragma unroll
      for (int t = 0; t < kOutTiles; ++t) {
        if (t >= out_tiles) break;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = tile_row(mi_of(t), 2 * half, lane);
          if (i >= n) continue;
          const float f = sh.scale * gam[i];
          store_row_pair(o + sh.out.at(b, t0 + i, h) + e0, tile_col(ni, 0, lane), width, opt.out_pairs,
                         fmaf(f, qs[t][2 * half], au[t][2 * half]), fmaf(f, qs[t][2 * half + 1], au[t][2 * half + 1]));
        }
      }
    };
    if (out.dtype == DType::bf16) store_o(static_cast<ding::bf16*>(out.p));
    else if (out.dtype == DType::f16) store_o(static_cast<ding::f16*>(out.p));
    else store_o(static_cast<float*>(out.p));

    // S ← γ_n S_0 + Kᵀ (e^(G_n − G_j) U_j); γ past n stays γ_n.
    const float gamma_n = gam[C - 1];
    // The write's parts in accumulators of their own (PartSums' reason), joined to S at the end;
    // one accumulator a tile where a warp has more than two tiles (their parts' registers spill).
    std::conditional_t<kStateTiles <= 2, PartSums, float[4]> write[kStateTiles] = {};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t bh_[2], bt_[2];
      load_b(Db, kSteps, ks, bh_, bt_);
#pragma unroll
      for (int t = 0; t < kStateTiles; ++t) {
        if (t >= state_tiles) break;
        uint32_t ah_[4], at_[4];
        load_a_tf32(Kf + ((mi_of(t) * kSteps + ks) * 32 + lane) * (P::kK / 2), ah_, at_);
        mma_parts<kSplitE>(write[t], ah_, at_, bh_, bt_);
      }
    }
#pragma unroll
    for (int t = 0; t < kStateTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[t][e] = fmaf(gamma_n, S[t][e], write[t][e]);
    write_state();
    cp_async_wait<0>();  // W, Q, γ and the tail weights of chunk c + 1
    __syncthreads();     // ... and everyone's; S is written; A and Kᵀ are free
    copy_a(c + 1);
    copy_k(c + 1);
  }
  cp_async_wait<0>();
  store_state_tiles(S, state_head, sh.Dv, e0, width, ni, warp / 4, kRowGroups, state_tiles, lane);
#else
  (void)out, (void)state, (void)sh, (void)t_begin, (void)ws, (void)opt;
#endif  // DING_GPU_NVIDIA_MMA
}

// The bf16-pairs walk with the state in registers: a block of kRegisterWalkWarps warps per
// (sequence, value head, tile of kMmaColumns state columns), warp w owning the tile's 8 columns
// 8w … 8w + 7 over every key row. A warp then needs no other warp's share of any product: S
// ([Dk][8]) stays in its accumulators, and S, U and e^(G_n − G_j) U_j reach the mmas that read them
// as B operands by movmatrix from those accumulators (b_pairs_of_tile), not through shared memory.
// Shared memory holds only what every warp reads, the chunk's W, A, Q, Kᵀ and decays, for two
// chunks, so the next chunk's copies overlap this one's products under one barrier a chunk. Each
// A fragment is read once a warp, for one 8-column tile: the tiled walk's warps (16 × 8 tiles of
// a 64 × 32 product over 16 warps) read every A and B fragment four times and passed U and S
// through shared memory, which bounded it (docs/PERFORMANCE.md, issue 21).
constexpr int kRegisterWalkWarps = kMmaColumns / 8, kRegisterWalkThreads = kRegisterWalkWarps * 32;

// The widest keys the register walk takes in chunks of C: a warp holds [Dk][8] of S and a chunk's
// C × Dk products' fragments, and at chunks of 64 and wider keys than 128 those spill (and the two
// buffers pass 190 KB); such keys take chunks of 32.
[[maybe_unused]] constexpr int register_walk_key_dim(int C) { return C >= 64 ? 128 : int(ops::kMaxDeltaRuleKeyDim); }

// One buffer of the register walk's shared memory, in 4-byte words: W [C·Dk] and A [C·C] as split
// A operands in fragment order (a hi and a lo bf16 a word), Q and Kᵀ (bf16, C·Dk / 2 words each) as
// A operands, γ and e^(G_n − G_j) [C] each: the first pass's layouts, copied as they are.
struct RegisterWalkLayout {
  int C, Dk;
  __host__ __device__ RegisterWalkLayout(int chunk, int dk) : C(chunk), Dk(dk) {}
  __host__ __device__ int64_t w() const { return 0; }
  __host__ __device__ int64_t scores() const { return int64_t(C) * Dk; }
  __host__ __device__ int64_t queries() const { return scores() + int64_t(C) * C; }  // then Kᵀ
  __host__ __device__ int64_t decays() const { return queries() + int64_t(C) * Dk; }
  __host__ __device__ int64_t words() const { return decays() + 2 * int64_t(C); }
  __host__ __device__ size_t bytes() const { return 2 * size_t(words()) * 4; }  // two buffers
};

// A lane's A operand of one m16n8k16 k step from a fragment-order group of bf16: its four
// registers as they are.
[[maybe_unused]] __device__ inline void load_a_pairs(const ding::bf16* group, uint32_t (&a)[4]) {
  const uint4 x = *reinterpret_cast<const uint4*>(group);
  a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w;
}

// An accumulator tile x (its 16 rows one k step, its 8 columns an n tile) as that step's B
// registers in bf16 pairs, hi = round(x), lo = round(x − hi): a row half's pairs are an 8 × 8 matrix
// as movmatrix holds it, and its transpose is the B register of those 8 rows.
struct PairsB {
  uint32_t hi[2], lo[2];
};
[[maybe_unused]] __device__ inline PairsB b_pairs_of_tile(const float (&x)[4]) {
  PairsB r{};
#if defined(DING_GPU_NVIDIA_MMA)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t parts[2][4];
    split_pair<ding::bf16, 2>(x[2 * half], x[2 * half + 1], parts, 0);
    r.hi[half] = transpose_8x8(parts[0][0]), r.lo[half] = transpose_8x8(parts[1][0]);
  }
#else
  (void)x;
#endif
  return r;
}

// DK as for the tiled walk (0: sh.Dk).
template <int C, int DK>
__global__ void __launch_bounds__(kRegisterWalkThreads, 1)
    gated_delta_rule_register_walk_kernel(AnyFloat out, float* state, DeltaShape sh, int64_t t_begin, ChunkWorkspace ws,
                                          WalkOptions opt) {
#if defined(DING_GPU_NVIDIA_MMA)
  using ding::bf16;
  constexpr int kRows = C / 16;  // row tiles of U and O, and k steps of A U and Kᵀ D
  constexpr int kKeySteps = (DK > 0 ? DK : register_walk_key_dim(C)) / 16;  // at most
  const int Dk = DK > 0 ? DK : sh.Dk, key_steps = Dk / 16;
  const RegisterWalkLayout lay(C, Dk);
  extern __shared__ float4 register_walk_mem[];
  float* const buffers = reinterpret_cast<float*>(register_walk_mem);

  const int tiles = (sh.Dv + kMmaColumns - 1) / kMmaColumns;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  const int e0 = int(int64_t(blockIdx.x) % tiles) * kMmaColumns, width = min(kMmaColumns, sh.Dv - e0);
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, bkh = b * sh.Hk + h / (sh.Hv / sh.Hk);
  const int tid = int(threadIdx.x), lane = tid & 31, ni = tid >> 5;  // the warp's column tile
  float* const state_head = state + bh * int64_t(Dk) * sh.Dv;

  // A chunk's operands into buffer c % 2: on sm_90 by one thread's four bulk copies, which an
  // mbarrier a buffer counts as they land (phase c / 2 of that buffer's); before, by every thread's
  // cp.async (40 a thread at chunks of 64 and 128-wide keys, each with its 64-bit addresses).
#if __CUDA_ARCH__ >= 900
  const bool bulk = opt.bulk;
#else
  constexpr bool bulk = false;
#endif
  __shared__ uint64_t landed[2];
  if (bulk && tid == 0) {
#if __CUDA_ARCH__ >= 900
    mbar_init(smem_address(&landed[0]), 1), mbar_init(smem_address(&landed[1]), 1);
    fence_mbarrier_init();
#endif
  }
  __syncthreads();
  auto copy_chunk = [&](int64_t c) {
    float* const buffer = buffers + (c & 1) * lay.words();
    if (bulk) {
#if __CUDA_ARCH__ >= 900
      if (tid == 0 && c < ws.chunks) {
        const uint32_t bar = smem_address(&landed[c & 1]);
        mbar_expect_tx(bar, uint32_t(4 * ((sh.delta ? C * Dk : 0) + C * C + C * Dk + 2 * C)));
        if (sh.delta) bulk_copy_to_shared(smem_address(buffer + lay.w()), ws.w(bh, c), 4 * C * Dk, bar);
        bulk_copy_to_shared(smem_address(buffer + lay.scores()), ws.scores(bh, c), 4 * C * C, bar);
        bulk_copy_to_shared(smem_address(buffer + lay.queries()), ws.queries<bf16>(bkh, c), 4 * C * Dk, bar);  // Q, Kᵀ
        bulk_copy_to_shared(smem_address(buffer + lay.decays()), ws.gamma(bh, c), 8 * C, bar);  // γ, e^(G_n − G_j)
      }
#endif
      return;
    }
    if (c < ws.chunks) {
      if (sh.delta) copy_async<kRegisterWalkThreads>(buffer + lay.w(), ws.w(bh, c), 4 * C * Dk, tid);
      copy_async<kRegisterWalkThreads>(buffer + lay.scores(), ws.scores(bh, c), 4 * C * C, tid);
      copy_async<kRegisterWalkThreads>(buffer + lay.queries(), ws.queries<bf16>(bkh, c), 4 * C * Dk, tid);  // Q, Kᵀ
      copy_async<kRegisterWalkThreads>(buffer + lay.decays(), ws.gamma(bh, c), 8 * C, tid);  // γ, e^(G_n − G_j)
    }
    cp_async_commit();
  };
  copy_chunk(0);

  float S[kKeySteps][4];
  load_state_tiles(S, state_head, sh.Dv, e0, width, ni, 0, 1, key_steps, lane);
  float u_next[kRows][4];  // U' of the next chunk, loaded a chunk ahead
  load_u_tiles<kRows, true>(u_next, ws, bh, 0, sh.Dv, e0, width, ni, 0, 1, kRows, lane);

  for (int64_t c = 0; c < ws.chunks; ++c) {
    if (bulk) mbar_wait(smem_address(&landed[c & 1]), uint32_t(c >> 1) & 1);
    else cp_async_wait<0>();
    __syncthreads();  // chunk c's operands have landed; every warp is done with chunk c − 1's buffer
    copy_chunk(c + 1);
    const float* const buffer = buffers + (c & 1) * lay.words();
    const float* const Wf = buffer + lay.w();
    const float* const Af = buffer + lay.scores();
    const bf16* const Qf = reinterpret_cast<const bf16*>(buffer + lay.queries());
    const bf16* const Kf = Qf + C * Dk;
    const float* const gam = buffer + lay.decays();
    const float* const tail = gam + C;
    const int64_t t0 = t_begin + c * C;
    const int n = int(sh.T - t0 < C ? sh.T - t0 : int64_t(C));
    // γ and e^(G_n − G_j) of the lane's rows (g and g + 8 of each row tile), read before the
    // products so that their latency hides under them.
    float gamma_rows[kRows][2], tail_rows[kRows][2];
#pragma unroll
    for (int mt = 0; mt < kRows; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = tile_row(mt, 2 * half, lane);
        gamma_rows[mt][half] = sh.scale * gam[i], tail_rows[mt][half] = tail[i];
      }

    // W S_0 and Q S_0, a k step a row tile of S. The mmas of a step go part by part over the row
    // tiles, so that consecutive ones add to different accumulators.
    float w_s[kRows][4] = {}, q_s[kRows][4] = {};
    auto state_products = [&](auto delta) {
#pragma unroll
      for (int ks = 0; ks < kKeySteps; ++ks) {
        if (ks >= key_steps) break;
        const PairsB s = b_pairs_of_tile(S[ks]);
        uint32_t wh[kRows][4], wl[kRows][4], q[kRows][4];
#pragma unroll
        for (int mt = 0; mt < kRows; ++mt) {
          if constexpr (decltype(delta)::value) load_a_split(Wf, key_steps, mt, ks, lane, wh[mt], wl[mt]);
          load_a_pairs(Qf + ((mt * key_steps + ks) * 32 + lane) * 8, q[mt]);
        }
#pragma unroll
        for (int mt = 0; mt < kRows; ++mt) {
          if constexpr (decltype(delta)::value) mma_16816<bf16>(w_s[mt], wh[mt], s.hi);
          mma_16816<bf16>(q_s[mt], q[mt], s.hi);
        }
#pragma unroll
        for (int mt = 0; mt < kRows; ++mt) {
          if constexpr (decltype(delta)::value) mma_16816<bf16>(w_s[mt], wh[mt], s.lo);
          mma_16816<bf16>(q_s[mt], q[mt], s.lo);
        }
        if constexpr (decltype(delta)::value)
#pragma unroll
          for (int mt = 0; mt < kRows; ++mt) mma_16816<bf16>(w_s[mt], wl[mt], s.hi);
      }
    };
    if (sh.delta) state_products(std::true_type{});
    else state_products(std::false_type{});

    // U = U' − W S_0 and e^(G_n − G_j) U_j, as the B operands of A U and Kᵀ (…).
    PairsB u_b[kRows], d_b[kRows];
#pragma unroll
    for (int mt = 0; mt < kRows; ++mt) {
      float x[4], decayed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[e] = u_next[mt][e] - w_s[mt][e];
        decayed[e] = tail_rows[mt][e >> 1] * x[e];
      }
      u_b[mt] = b_pairs_of_tile(x), d_b[mt] = b_pairs_of_tile(decayed);
    }
    load_u_tiles<kRows, true>(u_next, ws, bh, c + 1, sh.Dv, e0, width, ni, 0, 1, kRows, lane);

    // O = s γ ⊙ (Q S_0) + A U (A is zero above its diagonal: row tile mt takes k steps 0 … mt).
    float au[kRows][4] = {};
#pragma unroll
    for (int ks = 0; ks < kRows; ++ks) {
      uint32_t ah[kRows][4], al[kRows][4];
#pragma unroll
      for (int mt = ks; mt < kRows; ++mt) load_a_split(Af, kRows, mt, ks, lane, ah[mt], al[mt]);
#pragma unroll
      for (int mt = ks; mt < kRows; ++mt) mma_16816<bf16>(au[mt], ah[mt], u_b[ks].hi);
#pragma unroll
      for (int mt = ks; mt < kRows; ++mt) mma_16816<bf16>(au[mt], ah[mt], u_b[ks].lo);
#pragma unroll
      for (int mt = ks; mt < kRows; ++mt) mma_16816<bf16>(au[mt], al[mt], u_b[ks].hi);
    }
    // A lane's rows are 8 apart: one pointer stepped by 8 rows. Where the chunk and the block's
    // columns are whole, each row's pair goes out as one 4-byte store without a check.
    const bool whole = n == C && width == kMmaColumns && opt.out_pairs;
    auto store_o = [&](auto* o) {
      using T = std::remove_pointer_t<decltype(o)>;
      auto* row = o + sh.out.at(b, t0 + (lane >> 2), h) + e0;
      const int64_t eight_rows = 8 * sh.out.t;
      const int col = tile_col(ni, 0, lane);
      auto value = [&](int mt, int half, int e) { return fmaf(gamma_rows[mt][half], q_s[mt][2 * half + e], au[mt][2 * half + e]); };
      if (whole) {
#pragma unroll
        for (int mt = 0; mt < kRows; ++mt)
#pragma unroll
          for (int half = 0; half < 2; ++half, row += eight_rows) {
            const float x[2] = {value(mt, half, 0), value(mt, half, 1)};
            Typed<T>{row}.template store<2>(col, x);
          }
        return;
      }
#pragma unroll
      for (int mt = 0; mt < kRows; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half, row += eight_rows)
          if (tile_row(mt, 2 * half, lane) < n) store_row_pair(row, col, width, opt.out_pairs, value(mt, half, 0), value(mt, half, 1));
    };
    if (out.dtype == DType::bf16) store_o(static_cast<bf16*>(out.p));
    else store_o(static_cast<ding::f16*>(out.p));

    // S ← γ_n S_0 + Kᵀ (e^(G_n − G_j) U_j); γ past n stays γ_n.
    const float gamma_n = gam[C - 1];
    float write[kKeySteps][4] = {};
#pragma unroll
    for (int ks = 0; ks < kRows; ++ks) {
      uint32_t k[kKeySteps][4];
#pragma unroll
      for (int dt = 0; dt < kKeySteps; ++dt) {
        if (dt >= key_steps) break;
        load_a_pairs(Kf + ((dt * kRows + ks) * 32 + lane) * 8, k[dt]);
        mma_16816<bf16>(write[dt], k[dt], d_b[ks].hi);
      }
#pragma unroll
      for (int dt = 0; dt < kKeySteps; ++dt) {
        if (dt >= key_steps) break;
        mma_16816<bf16>(write[dt], k[dt], d_b[ks].lo);
      }
    }
#pragma unroll
    for (int dt = 0; dt < kKeySteps; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[dt][e] = fmaf(gamma_n, S[dt][e], write[dt][e]);
  }
  cp_async_wait<0>();
  store_state_tiles(S, state_head, sh.Dv, e0, width, ni, 0, 1, key_steps, lane);
#else
  (void)out, (void)state, (void)sh, (void)t_begin, (void)ws, (void)opt;
#endif  // DING_GPU_NVIDIA_MMA
}

#if defined(DING_GPU_NVIDIA)
// The tensor-core passes' chunk for a call asking for `requested` tokens a chunk (0: any): the
// largest of 64, 32, 16 within it whose passes' shared memory fits; 0 where they cannot run (no
// mma.sync, a key dim not a multiple of 16, or not even 16 tokens a chunk fit).
int mma_chunk(const Props& props, int Dk, int Dv, int elem_bytes, bool pairs, int64_t requested) {
  if (!props.has_mma_sync() || Dk % 16 != 0) return 0;
  for (int C : {64, 32, 16}) {
    if (pairs && Dk > register_walk_key_dim(C)) continue;
    const size_t walk_bytes = pairs ? RegisterWalkLayout(C, Dk).bytes() : TiledWalkLayout(C, Dk, elem_bytes, Parts<false>::kSplitWords).bytes();
    if ((requested == 0 || C <= requested) && PrepareLayout(C, Dk, Dv, elem_bytes).bytes() <= props.shared_per_block_optin &&
        walk_bytes <= props.shared_per_block_optin)
      return C;
  }
  return 0;
}
#endif

// Unit copies of q and k (params.l2_normalize_qk) for the chunk-wise kernels, which then read them
// as given: row r of blockIdx.y's tensor (0: q, 1: k) by a warp, x·(Σx² + ε)^-½ stored contiguous in
// x's dtype (the store rounds).
constexpr int kNormalizeThreads = 256;

__global__ void __launch_bounds__(kNormalizeThreads)
    l2_normalize_rows_kernel(AnyFloat q_unit, AnyFloat k_unit, AnyFloat q, AnyFloat k, attn::Strides3 q_rows,
                             attn::Strides3 k_rows, int64_t T, int64_t H, int64_t rows, int D) {
  const bool is_k = blockIdx.y == 1;
  const AnyFloat x = is_k ? k : q, unit = is_k ? k_unit : q_unit;
  const attn::Strides3 x_rows = is_k ? k_rows : q_rows;
  const int lanes = warp_size(), warps = int(blockDim.x) / lanes;
  const int warp = int(threadIdx.x) / lanes, lane = int(threadIdx.x) % lanes;
  for (int64_t r = int64_t(blockIdx.x) * warps + warp; r < rows; r += int64_t(gridDim.x) * warps) {
    const int64_t from = x_rows.at(r / (T * H), r / H % T, r % H);
    double squares = 0.0;
    for (int d = lane; d < D; d += lanes) {
      const double v = x.load(from + d);
      squares += v * v;
    }
    const double inverse = l2_inverse(squares);
    for (int d = lane; d < D; d += lanes) unit.store(r * D + d, float(x.load(from + d) * inverse));
  }
}

// Calls with at least this many tokens take the chunk-wise form where the backend chooses
// (params.chunk = 0): below it a chunk is mostly padding.
constexpr int64_t kChunkwiseFrom = 16;

unsigned delta_rule_grid(int64_t blocks) {
  if (blocks > INT32_MAX)
    throw Error(ErrorCode::not_implemented, "gated_delta_rule on the GPU: " + std::to_string(blocks) + " blocks exceed the launch grid");
  return unsigned(blocks);
}

#if defined(DING_GPU_NVIDIA)
// Whether every row of q, k and v is whole 16-byte pieces of a 16-bit E, 16-byte aligned (the
// first pass's cp.async copies).
template <class E>
bool rows_in_pieces(const ops::GatedDeltaRuleArgs& a, const DeltaShape& sh) {
  if constexpr (std::is_same_v<E, float>) {
    return false;
  } else {
    constexpr int64_t kPiece = 16 / int64_t(sizeof(E));
    auto aligned = [&](const Tensor& x, const attn::Strides3& st) {
      return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && st.b % kPiece == 0 && st.t % kPiece == 0 && st.h % kPiece == 0 &&
             x.strides[3] == 1;
    };
    return sh.Dk % kPiece == 0 && sh.Dv % kPiece == 0 && aligned(a.q, sh.q) && aligned(a.k, sh.k) && aligned(a.v, sh.v);
  }
}

// The two tensor-core passes over segments of the call's chunks, each segment's first-pass output
// in the stream's scratch (at most kSegmentBytes, or the tuning's chunks per segment).
template <int C, class E, bool kPairs>
void chunk_passes(GpuStream& s, const ops::GatedDeltaRuleArgs& a, const DeltaShape& sh) {
  constexpr int kSplitWords = Parts<kPairs>::kSplitWords;
  ChunkWorkspace ws{C, sh.Dk, sh.Dv, kSplitWords, 0, nullptr, nullptr, rows_in_pieces<E>(a, sh)};
  const int64_t chunks = (sh.T + C - 1) / C;
  const size_t value_bytes = size_t(sh.B * sh.Hv * ws.per_value()) * 4, row_bytes = size_t(sh.B * sh.Hk * 2 * C * sh.Dk) * sizeof(E);
  const int64_t tuned = s.op_tuning().delta_rule_segment_chunks;
  // Without a tuning, segments of equal size: the fewest the bound allows, none left short.
  const int64_t most = std::max<int64_t>(1, int64_t(kSegmentBytes / (value_bytes + row_bytes)));
  const int64_t segments = (chunks + most - 1) / most;
  const int64_t per_segment = tuned > 0 ? std::min(chunks, tuned) : (chunks + segments - 1) / segments;
  float* const values = static_cast<float*>(s.scratch(size_t(per_segment) * (value_bytes + row_bytes)));
  // The first pass at three blocks an SM (16-bit rows in chunks of 64 only, so that no other
  // instance doubles; T over the queries) where T fits there and, unless the tuning says, where
  // the segment's blocks then take fewer waves: three blocks share an SM's issue slots, so a wave
  // of them takes longer than a wave of two, and only a wave saved pays for that.
  auto prepare = gated_delta_rule_prepare_kernel<C, E, kPairs>;
  bool three = false;
  if constexpr (C == 64 && !std::is_same_v<E, float>) {
    const int asked = s.op_tuning().delta_rule_prepare_blocks;
    const PrepareLayout over_queries(C, sh.Dk, sh.Dv, int(sizeof(E)), true);
    int fit = 0;
    if (asked != 2 && over_queries.queries_hold_t()) {
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(gated_delta_rule_prepare_kernel<C, E, kPairs, 3>),
                                                 int(over_queries.bytes())));
      DING_GPU_CHECK(resident_blocks(&fit, gated_delta_rule_prepare_kernel<C, E, kPairs, 3>, kMmaThreads, over_queries.bytes()));
    }
    const int64_t blocks = sh.B * sh.Hv * per_segment, sms = s.props().sm_count;
    three = fit >= 3 && (asked == 3 || ceil_div(blocks, 3 * sms) < ceil_div(blocks, 2 * sms));
    if (three) prepare = gated_delta_rule_prepare_kernel<C, E, kPairs, 3>;
  }
  const size_t prepare_bytes = PrepareLayout(C, sh.Dk, sh.Dv, int(sizeof(E)), three).bytes();
  DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(prepare), int(prepare_bytes)));
  // Qwen3-Next's key dim (128) gets a walk compiled for it; 16-bit rows only, the f32 ones being
  // the rare case of mixed input dtypes. bf16 pairs take the walk with the state in registers.
  constexpr bool kSixteenBit = !std::is_same_v<E, float>;
  void (*walk)(AnyFloat, float*, DeltaShape, int64_t, ChunkWorkspace, WalkOptions);
  size_t walk_bytes;
  int walk_threads;
  if constexpr (kPairs) {
    walk = sh.Dk == 128 ? gated_delta_rule_register_walk_kernel<C, 128> : gated_delta_rule_register_walk_kernel<C, 0>;
    walk_bytes = RegisterWalkLayout(C, sh.Dk).bytes();
    walk_threads = kRegisterWalkThreads;
  } else {
    walk = kSixteenBit && sh.Dk == 128 ? gated_delta_rule_tiled_walk_kernel<C, E, kSixteenBit ? 128 : 0>
                                       : gated_delta_rule_tiled_walk_kernel<C, E, 0>;
    walk_bytes = TiledWalkLayout(C, sh.Dk, int(sizeof(E)), kSplitWords).bytes();
    walk_threads = kWalkThreads;
  }
  DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(walk), int(walk_bytes)));
  const int64_t column_tiles = (sh.Dv + kMmaColumns - 1) / kMmaColumns;
  // Whether every output row's even columns start a pair the walk may store as one (store_row_pair).
  const WalkOptions options{attn::rows_aligned(a.out, 2), s.props().has_bulk_copies() && s.op_tuning().delta_rule_bulk_copies};
  s.note_form("gated_delta_rule", options.bulk ? "walk operands by bulk copies" : "walk operands by cp.async");
  for (int64_t c0 = 0; c0 < chunks; c0 += per_segment) {
    ws.chunks = std::min(per_segment, chunks - c0);
    ws.values = values;
    ws.rows = values + sh.B * sh.Hv * ws.chunks * ws.per_value();
    prepare<<<delta_rule_grid(sh.B * sh.Hv * ws.chunks), kMmaThreads, prepare_bytes, s.handle()>>>(
        any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta), sh, c0 * C, ws);
    DING_GPU_CHECK_LAUNCH("gated_delta_rule_prepare_kernel");
    walk<<<delta_rule_grid(sh.B * sh.Hv * column_tiles), walk_threads, walk_bytes, s.handle()>>>(
        any_float(a.out), a.state.ptr<float>(), sh, c0 * C, ws, options);
    if constexpr (kPairs) DING_GPU_CHECK_LAUNCH("gated_delta_rule_register_walk_kernel");
    else DING_GPU_CHECK_LAUNCH("gated_delta_rule_tiled_walk_kernel");
  }
}
#endif

// Whether the cluster-norm kernels can run here: a device with clusters (sm_90+) and the kernels'
// loaded code compiled for one (a build for older chips carries them without the cluster code).
// Asked once, as gemm_mma_e4m3.cu asks of its kernels: a decode step without graphs calls this
// every layer.
bool cluster_norm_compiled(const Props& props) {
  static const bool compiled =
      kernel_compiled_for(reinterpret_cast<const void*>(gated_delta_rule_kernel<8, true>), 90);
  return props.has_chained_launch() && compiled;  // sm_90+: clusters and chained launches came together
}

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
  sh.l2_normalize = a.params.l2_normalize_qk;
  sh.state_settled = a.params.state_from_earlier_op;
  if (sh.gated) sh.a_log = any_float(a.params.gates.a_log), sh.dt_bias = any_float(a.params.gates.dt_bias);
  if (sh.B * sh.T * sh.Hv * sh.Dv == 0) return;
  const int64_t chunk = a.params.chunk;
  const bool chunkwise = sh.T > 1 && (chunk > 1 || (chunk == 0 && sh.T >= kChunkwiseFrom));
  // The out_norm inside the recurrent kernel where its column tiles can form a cluster and the
  // blocks are at most one an SM (a decode step of one sequence: at 8, Qwen3-Next-80B's 1024 blocks
  // in clusters took 35 µs against 28 staged on an H100, docs/PERFORMANCE.md); staged through
  // rms_norm otherwise, o in the intermediate scratch (no path of the rule takes it).
  const ops::DeltaRuleOutNorm& out_norm = a.params.out_norm;
  const int64_t norm_tiles = (sh.Dv + s.props().warp_size - 1) / s.props().warp_size;
  const bool fused_norm = out_norm.given() && !chunkwise && s.op_tuning().delta_rule_cluster_norm &&
                          cluster_norm_compiled(s.props()) && norm_tiles <= kMaxNormTiles &&
                          sh.B * sh.Hv * norm_tiles <= s.props().sm_count;
  if (out_norm.given()) s.note_form("gated_delta_rule", fused_norm ? "out_norm in a cluster" : "out_norm staged");
  if (out_norm.given() && !fused_norm) {
    void* const o = s.scratch(size_t(a.out.numel()) * dtype_size(a.out.dtype), GpuStream::ScratchSlot::intermediate);
    return ops::gated_delta_rule_with_staged_norm(
        stream, a, Tensor::view(o, a.out.device, a.out.dtype, a.out.shape.data(), a.out.rank), gated_delta_rule, rms_norm);
  }
  if (sh.l2_normalize && chunkwise) {
    // The recurrent kernel normalises what it stages; the chunk-wise ones take unit copies, in the
    // staged-input scratch (their own scratch is the kernel slot).
    const size_t q_bytes = size_t(a.q.numel()) * dtype_size(a.q.dtype), k_at = (q_bytes + 255) / 256 * 256;
    char* const copies = static_cast<char*>(
        s.scratch(k_at + size_t(a.k.numel()) * dtype_size(a.k.dtype), GpuStream::ScratchSlot::staged_input));
    ops::GatedDeltaRuleArgs unit = a;
    unit.q = Tensor::view(copies, a.q.device, a.q.dtype, {sh.B, sh.T, sh.Hk, sh.Dk});
    unit.k = Tensor::view(copies + k_at, a.k.device, a.k.dtype, {sh.B, sh.T, sh.Hk, sh.Dk});
    unit.params.l2_normalize_qk = false;
    const int64_t rows = sh.B * sh.T * sh.Hk, warps = kNormalizeThreads / s.props().warp_size;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(rows, warps), int64_t(s.props().sm_count) * 16));
    l2_normalize_rows_kernel<<<dim3(blocks, 2), kNormalizeThreads, 0, s.handle()>>>(
        any_float(unit.q), any_float(unit.k), any_float(a.q), any_float(a.k), sh.q, sh.k, sh.T, sh.Hk, rows, sh.Dk);
    DING_GPU_CHECK_LAUNCH("l2_normalize_rows_kernel");
    gated_delta_rule(stream, unit);
    return;
  }
#if defined(DING_GPU_NVIDIA)
  // Tensor cores where they run, q, k and v of one 16-bit dtype as it (exact operands, one part),
  // anything else as f32 (split operands); bf16 pairs (unless switched off) for bf16 rows and a 16-bit output.
  const DType rows = a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype ? a.q.dtype : DType::f32;
  const bool pairs = s.op_tuning().delta_rule_bf16_pairs && rows == DType::bf16 && a.out.dtype != DType::f32;
  if (const int C = chunkwise ? mma_chunk(s.props(), sh.Dk, sh.Dv, int(dtype_size(rows)), pairs, chunk) : 0) {
    s.note_form("gated_delta_rule", pairs ? "chunk products in bf16 pairs" : "chunk products in tf32");
    auto by_rows = [&](auto chunk_tag) {
      constexpr int kC = decltype(chunk_tag)::value;
      if (pairs) chunk_passes<kC, ding::bf16, true>(s, a, sh);
      else if (rows == DType::bf16) chunk_passes<kC, ding::bf16, false>(s, a, sh);
      else if (rows == DType::f16) chunk_passes<kC, ding::f16, false>(s, a, sh);
      else chunk_passes<kC, float, false>(s, a, sh);
    };
    if (C == 64) by_rows(std::integral_constant<int, 64>{});
    else if (C == 32) by_rows(std::integral_constant<int, 32>{});
    else by_rows(std::integral_constant<int, 16>{});
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
      gated_delta_rule_chunk_kernel<<<delta_rule_grid(sh.B * sh.Hv * ((sh.Dv + kTileColumns - 1) / kTileColumns)), kChunkThreads,
                                      bytes, s.handle()>>>(any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v),
                                                           any_float(a.g), any_float(a.beta), a.state.ptr<float>(), sh, C);
      DING_GPU_CHECK_LAUNCH("gated_delta_rule_chunk_kernel");
      return;
    }
  }
  const int lanes = s.props().warp_size;
  const int64_t tiles = (sh.Dv + lanes - 1) / lanes;
  const bool narrow_keys = sh.Dk <= 8 * kRowWarps;
  const dim3 grid(delta_rule_grid(sh.B * sh.Hv * tiles)), block(kRowWarps * lanes);
  if (fused_norm) {
    const FusedOutNorm norm{any_float(out_norm.weight), any_float(out_norm.gate), attn::strides3(out_norm.gate), out_norm.eps};
    DING_GPU_CHECK(launch_chained_in_clusters(
        s.props().has_chained_launch(), unsigned(tiles),
        narrow_keys ? gated_delta_rule_kernel<8, true> : gated_delta_rule_kernel<kMaxRowsPerLane, true>, grid, block, 0,
        s.handle(), any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta),
        a.state.ptr<float>(), sh, norm));
  } else {
    DING_GPU_CHECK(launch_chained(
        s.props().has_chained_launch(),
        narrow_keys ? gated_delta_rule_kernel<8, false> : gated_delta_rule_kernel<kMaxRowsPerLane, false>, grid, block, 0,
        s.handle(), any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta),
        a.state.ptr<float>(), sh, FusedOutNorm{}));
  }
  DING_GPU_CHECK_LAUNCH("gated_delta_rule_kernel");
}

DING_GPU_END
