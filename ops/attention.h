// Scaled dot-product attention, o = softmax(s · q·kᵀ + mask) · v, per query head.
// Grouped heads: H query heads share Hkv key/value heads, query head h reads kv head
// h / (H / Hkv). Hkv = H is MHA, 1 < Hkv < H is GQA, Hkv = 1 is MQA.
//
// attention_prefill: a block of Tq queries against Tk ≥ Tq keys of the same sequence; the
//   queries are the last Tq positions, so with the causal mask query i sees keys j ≤ i + Tk - Tq
//   (Tk = rolling_keys for rolling caches, below).
// attention_decode: one query per sequence against its KV cache; sequence b sees the first
//   seq_lens[b] cached positions (which include the current token).
// Sliding window (Mistral, Qwen2's sliding layers; HF masking_utils' sliding_window_overlay,
//   kv_idx > q_idx − window): a query at position p sees only the keys j with p − window < j ≤ p,
//   `window` keys including its own. Prefill: p = i + Tk − Tq; decode: p = seq_lens[b] − 1, so
//   sequence b reads cache positions [max(0, seq_lens[b] − window), seq_lens[b]).
// Decode given k_new and v_new (the
//   current token's key and value), it first stores them at position seq_lens[b] − 1, as
//   kv_append with start = seq_lens − 1 would: one op for the decode step, so a GPU backend
//   attends to the new key where the QKV product left it instead of after a separate append.
//   Given rope as well, q and k_new are first rotated at that position, as ops::rope with
//   positions = seq_lens and position_offset = −1 into tensors of their dtypes would (q is read
//   rotated, not written; k_new is stored rotated): rope, append and attention of a decode step
//   in one op.
//   Given qk_norm as well (OLMoE, Qwen3, Qwen3-Next's attention layers), q and k_new are first
//   RMS-normalised, as ops::rms_norm into tensors of their dtypes would, then rotated: over each
//   head's D elements, or (whole) over a token's whole projection, its H·D elements of q and
//   Hkv·D of k_new at once.
// Rolling caches (a sliding-window layer need not hold more than its window): with window > 0
//   and a cache of S ≥ window slots, position p lives at slot p mod S. Decode: seq_lens[b] may
//   then exceed S, the window's positions being the ones still held. Prefill: rolling_keys > 0
//   says k and v are such caches holding positions [0, rolling_keys), the queries being the last
//   Tq of them; S ≥ window + Tq − 1, so the chunk's own keys (appended first) overwrote none that
//   its first query sees. kv_append with rolling writes position p at slot p mod S. Below S
//   positions a rolling cache is laid out as a plain one.
// Only the last dimension must be contiguous: k/v may be views into a larger KV cache.
#pragma once
#include <cstdint>

#include <optional>

#include "ding/device.h"
#include "ding/ops/norm.h"
#include "ding/ops/rope.h"
#include "ding/profile.h"

namespace ding::ops {

struct AttentionParams {
  float scale = 0.0f;  // s; 0 = 1/√D
  bool causal = true;  // prefill only (decode is causal by construction)
  int64_t window = 0;  // > 0: sliding window of this many keys (prefill needs causal); 0 = none
  int64_t rolling_keys = 0;  // prefill, > 0: k and v are rolling caches holding this many positions
};

// Whether a decode cache of S slots is read as a rolling cache: a window it can hold.
inline bool rolling_cache(const AttentionParams& p, int64_t slots) { return p.window > 0 && p.window <= slots; }

struct AttentionPrefillArgs {
  Tensor out;  // [B, Tq, H, D], f32/f16/bf16
  Tensor q;    // [B, Tq, H, D]
  Tensor k;    // [B, Tk, Hkv, D]
  Tensor v;    // [B, Tk, Hkv, D]
  AttentionParams params;
};

// attention_decode's norm of q and k_new: the weights are [D] (each head alone) or, with whole,
// [H·D] and [Hkv·D] (a token's projection as one row), f32/f16/bf16.
struct QkNorm {
  Tensor q_weight;
  Tensor k_weight;
  float eps = 1e-6f;
  bool whole = false;
};

struct AttentionDecodeArgs {
  Tensor out;       // [B, H, D], f32/f16/bf16
  Tensor q;         // [B, H, D]
  Tensor k_cache;   // [B, S, Hkv, D]
  Tensor v_cache;   // [B, S, Hkv, D]
  Tensor seq_lens;  // i32 [B], each in [1, S]; a host backend raises Error for any other value
  AttentionParams params;
  Tensor k_new;     // optional [B, Hkv, D], f32/f16/bf16 (converted), last dim contiguous
  Tensor v_new;     // given with k_new
  std::optional<RopeParams> rope;  // with k_new: its layout, frequencies and factor; no positions, offset 0
  std::optional<QkNorm> qk_norm;   // with k_new: before the rope
  // A scheduling hint that changes no result: true when the op just before this one on the stream
  // wrote neither seq_lens nor any cache row a query sees but its newest (seq_lens − 1): a decode
  // step's attention after the q/k/v product. A backend whose kernels overlap their predecessor
  // (the GPU's chained launches) may then start reading those rows before that op has finished.
  bool cache_from_earlier_op = false;
};

// kv_append: writes a step's keys and values into the KV cache at start positions held on the
//   device:  k_cache[b, start[b] + t] = k[b, t],  v_cache[b, start[b] + t] = v[b, t]  for t < T,
//   at slot (start[b] + t) mod S instead for a rolling cache (any start ≥ 0).
// Because `start` is a device tensor, a recorded decode step (a CUDA graph) appends at the right
// place on every replay. Host backends raise Error for start[b] outside [0, S - T] (rolling: for
// start[b] < 0); GPU backends cannot raise from a kernel and write nothing for such a sequence.
struct KvAppendArgs {
  Tensor k_cache;  // [B, S, Hkv, D], f32/f16/bf16, last dim contiguous
  Tensor v_cache;  // [B, S, Hkv, D]
  Tensor k;        // [B, T, Hkv, D], f32/f16/bf16 (converted), last dim contiguous: a view of qkv
  Tensor v;        // [B, T, Hkv, D]
  Tensor start;    // i32 [B]
  bool rolling = false;
};

float attention_scale(const AttentionParams& p, int64_t head_dim);
// Prefill's Tk: the positions k and v hold (rolling_keys, or their dim 1).
int64_t key_positions(const AttentionPrefillArgs& a);
// The kv_append that attention_decode's k_new and v_new stand for; `start` holds seq_lens − 1
// (i32 [B] on the op's device: host backends pass a view of their own memory).
KvAppendArgs decode_append(const AttentionDecodeArgs& a, Tensor start);
// The rope that attention_decode's `rope` stands for, of x ([B, heads, D]: q or k_new) into out at
// positions seq_lens − 1.
RopeArgs decode_rope(const AttentionDecodeArgs& a, Tensor out, Tensor x);
// The rms_norm that attention_decode's qk_norm stands for, of x ([B, heads, D]: q or k_new) into
// out with `weight` (q_weight or k_weight).
RmsNormArgs decode_norm(const AttentionDecodeArgs& a, Tensor out, Tensor x, Tensor weight);
// attention_decode's qk_norm and rope the plain way, for a backend kernel that does not apply them
// as it loads: q and k_new normalised by ops::rms_norm and rotated by ops::rope (in place) into
// q_out [B, H, D] and k_out [B, Hkv, D] (the op's device, the backend's memory, of q's and k_new's
// dtypes), and the same op over them without either.
AttentionDecodeArgs transformed_first(Stream& stream, const AttentionDecodeArgs& a, Tensor q_out, Tensor k_out);

void validate(const Device& device, const AttentionPrefillArgs& a);
void validate(const Device& device, const AttentionDecodeArgs& a);
void validate(const Device& device, const KvAppendArgs& a);
Cost cost(const AttentionPrefillArgs& a);
Cost cost(const AttentionDecodeArgs& a);
Cost cost(const KvAppendArgs& a);
void attention_prefill(Stream& stream, Tensor out, Tensor q, Tensor k, Tensor v, const AttentionParams& params = {});
void attention_decode(Stream& stream, Tensor out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor seq_lens,
                      const AttentionParams& params = {}, Tensor k_new = {}, Tensor v_new = {},
                      const std::optional<RopeParams>& rope = std::nullopt,
                      const std::optional<QkNorm>& qk_norm = std::nullopt);
void attention_decode(Stream& stream, const AttentionDecodeArgs& args);
void kv_append(Stream& stream, Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor start, bool rolling = false);

}  // namespace ding::ops
