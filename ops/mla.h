// Multi-head latent attention (MLA; DeepSeek-AI 2024, "DeepSeek-V2", §2.1). The cache holds, per
// token t, only a latent c_t ∈ ℝ^L (the normalised kv_a projection) and one rotated key
// k_t^R ∈ ℝ^Dr that every head shares:
//   cache[b, t] = [c_t ; k_t^R]                                   (L + Dr elements)
// Head h's key and value are up-projections of the latent by W = kv_b_proj's weight viewed
// [H, Dn + Dv, L] (per head, Dn rows of W_uk^h then Dv rows of W_uv^h):
//   k_t^h = [W_uk^h c_t ; k_t^R],   v_t^h = W_uv^h c_t
// and query q^h = [q_nope^h ; q_rope^h] (Dn + Dr, its rope part already rotated) attends as usual:
//   o^h = Σ_t softmax_t(s · q^h·k_t^h) · v_t^h                    (Dv elements)
// Two forms of the same product (equal in exact arithmetic):
//   expanded (mla_prefill's reference): k_t^h and v_t^h formed for every key, then attention;
//     Tq·H·(Dn + Dv)·L work per chunk to form them, cheap per query: the form for long chunks.
//   absorbed (mla_decode's reference): W_uk folded into the query and W_uv applied after:
//     q_lat^h = (W_uk^h)ᵀ q_nope^h,   score_t = s · (q_lat^h·c_t + q_rope^h·k_t^R),
//     o^h = W_uv^h · Σ_t p_t c_t
//     so attention reads only the cache, L + Dr elements per key for all heads together: the form
//     for decode, where the cache is what a step must read.
// A backend may compute either form for either op; the tolerances allow for both. Where q, the
// cache and W share a 16-bit dtype and the output is 16-bit too (an f32 output asks for f32
// accuracy), either op may round to that dtype, to attend on 16-bit hardware paths: in the expanded form k^h and v^h (as transformers' 16-bit forward rounds
// kv_b_proj's output), in the absorbed form the scaled query [q_lat^h ; q_rope^h], and in either
// the softmax weights that multiply the values (or latents).
// mla_prefill: Tq queries (the last Tq of Tk positions, causal: query i sees keys j ≤ i + Tk − Tq).
// mla_decode: one query per sequence; sequence b sees cache positions [0, seq_lens[b]). Given
//   latent_new ([B, L + Dr], the token's [c ; k^R]) it first stores it at position seq_lens[b] − 1,
//   as attention_decode does with k_new, so a recorded decode step appends on the device.
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct MlaParams {
  float scale = 0.0f;  // s; 0 = 1/√(Dn + Dr). DeepSeek-V2 with YaRN: (Dn + Dr)^-½ · mscale²
};

struct MlaPrefillArgs {
  Tensor out;    // [B, Tq, H, Dv], f32/f16/bf16
  Tensor q;      // [B, Tq, H, Dn + Dr]
  Tensor cache;  // [B, Tk, L + Dr], Tk ≥ Tq: the keys' latents, the chunk's own included
  Tensor w_kv;   // [H, Dn + Dv, L]
  MlaParams params;
};

struct MlaDecodeArgs {
  Tensor out;         // [B, H, Dv], f32/f16/bf16
  Tensor q;           // [B, H, Dn + Dr]
  Tensor cache;       // [B, S, L + Dr]
  Tensor seq_lens;    // i32 [B], each in [1, S]; a host backend raises Error for any other value
  Tensor w_kv;        // [H, Dn + Dv, L]
  MlaParams params;
  Tensor latent_new;  // optional [B, L + Dr], f32/f16/bf16 (converted), last dim contiguous
};

// The sizes both ops read off their tensors: L from w_kv, Dr = cache's last dim − L,
// Dn = q's last dim − Dr, Dv = w_kv's dim 1 − Dn.
struct MlaDims {
  int64_t heads, latent, rope, nope, value;
};
MlaDims mla_dims(const Tensor& q, const Tensor& cache, const Tensor& w_kv);
float mla_scale(const MlaParams& p, const MlaDims& d);

void validate(const Device& device, const MlaPrefillArgs& a);
void validate(const Device& device, const MlaDecodeArgs& a);
// Prefill counts the expanded form (the cheaper one for a chunk); decode the absorbed one, whose
// bytes are the cache a step reads plus W once.
Cost cost(const MlaPrefillArgs& a);
Cost cost(const MlaDecodeArgs& a);
void mla_prefill(Stream& stream, Tensor out, Tensor q, Tensor cache, Tensor w_kv, const MlaParams& params = {});
void mla_decode(Stream& stream, Tensor out, Tensor q, Tensor cache, Tensor seq_lens, Tensor w_kv,
                const MlaParams& params = {}, Tensor latent_new = {});

}  // namespace ding::ops
