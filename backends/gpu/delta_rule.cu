// gated_delta_rule on the GPU (ops/delta_rule.h). Each column e of a state S (f32 [Dk, Dv]) evolves
// on its own: (Sᵀk)[e], the update of column e and (Sᵀq)[e] involve no other column. So a warp
// owns one column of one (sequence, value head): lane l holds S[d][e] for d = l, l + W, … (W the
// warp size; at most kMaxDeltaRuleKeyDim / 32 per lane) in registers for the whole call, walks the
// tokens in order, and forms the two sums over d with warp reductions:
//   r = Σ_d S[d]·k[d];  u = β (v[e] − α r);  S[d] ← α S[d] + k[d]·u;  o = Σ_d S[d]·(s·q[d])
// A block's 8 warps (4 on 64-lane warps) take consecutive columns of one head, so its q and k
// rows come from L1 after the first warp. The state is read at the start and written at the end.
// That recurrent form is the default. params.chunk > 1 asks for the chunk-wise form: a block per
// (sequence, value head, tile of kTileColumns state columns) walks the chunks in order with the
// chunk's K, Q, the tile of S and the n × n products in shared memory, f32 FMAs (no tensor cores
// yet): A = KKᵀ and the decayed QKᵀ, W = (I + L)^(-1) by forward substitution (a row per step),
// R = β(V − γ·K S_0), U = W R, O = γ·Q S_0 + QK U, S ← γ_n S_0 + Kᵀ(decayed U). The columns of S are
// independent, so tiles split a head across blocks; each recomputes the chunk's n × n products.
// The cumulative log decay is kept in double (ops/delta_rule.h).
#include <algorithm>
#include <cstdint>
#include <string>

#include "access.cuh"
#include "attention.cuh"
#include "check.h"
#include "kernels.h"
#include "reduce.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPerLane = int(ops::kMaxDeltaRuleKeyDim) / 32;

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

__global__ void __launch_bounds__(kThreads)
    gated_delta_rule_kernel(AnyFloat out, AnyFloat q, AnyFloat k, AnyFloat v, AnyFloat g, AnyFloat beta, float* state,
                            DeltaShape sh) {
  const int lanes = warp_size(), warps = kThreads / lanes;
  const int lane = int(threadIdx.x) % lanes, warp = int(threadIdx.x) / lanes;
  const int64_t column_groups = (sh.Dv + warps - 1) / warps;
  const int64_t bh = int64_t(blockIdx.x) / column_groups;
  const int e = int(int64_t(blockIdx.x) % column_groups) * warps + warp;
  if (e >= sh.Dv) return;  // warp-uniform: no reduction below is left short of lanes
  const int64_t b = bh / sh.Hv, h = bh % sh.Hv, kh = h / (sh.Hv / sh.Hk);
  float* const column = state + bh * int64_t(sh.Dk) * sh.Dv + e;  // S[d][e] at column[d · Dv]

  float S[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + i * lanes;
    S[i] = d < sh.Dk ? column[int64_t(d) * sh.Dv] : 0.0f;
  }
  for (int64_t t = 0; t < sh.T; ++t) {
    const int64_t qk_row = sh.q.at(b, t, kh), k_row = sh.k.at(b, t, kh);
    const float2 ds = decay_and_strength(sh, g, beta, b, t, h);
    const float alpha = expf(ds.x), strength = ds.y;
    float kd[kMaxPerLane], r = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + i * lanes;
      kd[i] = d < sh.Dk ? k.load(k_row + d) : 0.0f;
      r = fmaf(S[i], kd[i], r);
    }
    r = sh.delta ? warp_sum(r) : 0.0f;  // warp-uniform
    const float u = strength * (v.load(sh.v.at(b, t, h) + e) - alpha * r);
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + i * lanes;
      S[i] = fmaf(alpha, S[i], kd[i] * u);
      if (d < sh.Dk) o = fmaf(S[i], sh.scale * q.load(qk_row + d), o);
    }
    o = warp_sum(o);
    if (lane == 0) out.store(sh.out.at(b, t, h) + e, o);
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + i * lanes;
    if (d < sh.Dk) column[int64_t(d) * sh.Dv] = S[i];
  }
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
  if (sh.gated) sh.a_log = any_float(a.params.gates.a_log), sh.dt_bias = any_float(a.params.gates.dt_bias);
  // The chunk-wise form where asked for: chunks of up to 64 tokens (fewer where shared memory is
  // short: Dk = 256 on an sm_89), the recurrent form for a single token.
  if (a.params.chunk > 1 && sh.T > 1) {
    int chunk = int(std::min<int64_t>(a.params.chunk, 64));
    while (chunk > 2 && size_t(chunk_shared_bytes(chunk, sh.Dk)) > s.props().shared_per_block_optin) chunk /= 2;
    const size_t bytes = size_t(chunk_shared_bytes(chunk, sh.Dk));
    if (bytes <= s.props().shared_per_block_optin) {
      const int64_t chunk_blocks = sh.B * sh.Hv * ((sh.Dv + kTileColumns - 1) / kTileColumns);
      if (chunk_blocks > INT32_MAX)
        throw Error(ErrorCode::not_implemented,
                    "gated_delta_rule on the GPU: " + std::to_string(chunk_blocks) + " blocks exceed the launch grid");
      DING_GPU_CHECK(func_set_max_dynamic_shared(reinterpret_cast<const void*>(gated_delta_rule_chunk_kernel), int(bytes)));
      gated_delta_rule_chunk_kernel<<<unsigned(chunk_blocks), kChunkThreads, bytes, s.handle()>>>(
          any_float(a.out), any_float(a.q), any_float(a.k), any_float(a.v), any_float(a.g), any_float(a.beta),
          a.state.ptr<float>(), sh, chunk);
      DING_GPU_CHECK_LAUNCH("gated_delta_rule_chunk_kernel");
      return;
    }
  }
  const int64_t warps = kThreads / s.props().warp_size;
  const int64_t blocks = sh.B * sh.Hv * ((sh.Dv + warps - 1) / warps);
  if (blocks > INT32_MAX)
    throw Error(ErrorCode::not_implemented, "gated_delta_rule on the GPU: " + std::to_string(blocks) + " blocks exceed the launch grid");
  gated_delta_rule_kernel<<<unsigned(blocks), kThreads, 0, s.handle()>>>(any_float(a.out), any_float(a.q), any_float(a.k),
                                                                        any_float(a.v), any_float(a.g), any_float(a.beta),
                                                                        a.state.ptr<float>(), sh);
  DING_GPU_CHECK_LAUNCH("gated_delta_rule_kernel");
}

DING_GPU_END
