// gated_delta_rule on the GPU (ops/delta_rule.h). Each column e of a state S (f32 [Dk, Dv]) evolves
// on its own: (Sᵀk)[e], the update of column e and (Sᵀq)[e] involve no other column. So a warp
// owns one column of one (sequence, value head): lane l holds S[d][e] for d = l, l + W, … (W the
// warp size; at most kMaxDeltaRuleKeyDim / 32 per lane) in registers for the whole call, walks the
// tokens in order, and forms the two sums over d with warp reductions:
//   r = Σ_d S[d]·k[d];  u = β (v[e] − α r);  S[d] ← α S[d] + k[d]·u;  o = Σ_d S[d]·(s·q[d])
// A block's 8 warps (4 on 64-lane warps) take consecutive columns of one head, so its q and k
// rows come from L1 after the first warp. The state is read at the start and written at the end.
// This is the recurrent form for any params.chunk (a backend may compute either form): a long prompt
// is a token loop here; the chunk-wise form's matrix products are not written for the GPU yet.
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
    const float g_in = sh.has_g ? g.load(sh.g.at(b, t, h)) : 0.0f, b_in = sh.has_beta ? beta.load(sh.beta.at(b, t, h)) : 1.0f;
    const float alpha = sh.gated ? expf(-expf(sh.a_log.load(h)) * softplus(g_in + sh.dt_bias.load(h))) : expf(g_in);
    const float strength = sh.gated ? 1.0f / (1.0f + expf(-b_in)) : b_in;
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
