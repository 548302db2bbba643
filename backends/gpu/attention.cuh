// What the attention kernels share (attention_prefill.cu, attention_decode.cu, attention_rows.cu):
// operand views, element staging and the online-softmax exponential, and the generic one-row
// kernel both ops fall back to.
//
// Every kernel keeps an online softmax per query row: a running max m, a running sum
// l = Σ e^(s - m) and an unnormalised output acc = Σ e^(s - m) · v, rescaled by e^(m_old - m_new)
// when m grows. Scores are (scale · q) · k in f32 (q pre-multiplied, as the CPU backend does);
// the exponentials are the accurate expf, since the f32 parity bound (5e-12) has no room for a
// fast-math exp.
#pragma once
#include <cmath>
#include <cstdint>

#include "ding/tensor.h"
#include "elements.cuh"
#include "stream.h"

DING_GPU_BEGIN
namespace attn {

// Strides (elements) of a [B, S|T, Hkv, D] tensor whose last dim is contiguous.
struct Strides3 {
  int64_t b, t, h;
  __device__ int64_t at(int64_t bi, int64_t ti, int64_t hi) const { return bi * b + ti * t + hi * h; }
};

inline Strides3 strides3(const Tensor& x) { return {x.strides[0], x.strides[1], x.strides[2]}; }

// Where keys live in a cache of S slots: key j at slot j mod S (a rolling cache, ops/attention.h;
// slot j itself while j < S). A run of keys from `first` is addressed with one division for the
// run, then one compare per key: valid for keys [first, first + S), which every run the kernels
// walk stays within (a split, a tile's visible keys, a row's window).
struct KeySlots {
  int64_t S, first, first_slot;
  __device__ KeySlots(int64_t slots, int64_t first_key) : S(slots), first(first_key), first_slot(first_key % slots) {}
  __device__ int64_t operator()(int64_t j) const {
    const int64_t slot = first_slot + (j - first);
    return slot >= S ? slot - S : slot;
  }
};
// [B, H, D] (decode's q and out) seen as [B, 1, H, D].
inline Strides3 strides_bhd(const Tensor& x) { return {x.strides[0], 0, x.strides[1]}; }

// Whether every row start of x (all dims but the last) is a multiple of `elems` elements, so
// `elems` elements from a row start move as one aligned access.
inline bool rows_aligned(const Tensor& x, int64_t elems) {
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

inline Operand operand(const Tensor& x, Strides3 at) { return {x.data, x.dtype, at, rows_aligned(x, 4)}; }

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
    store_pack(row + d, p);
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

// The same through the hardware's exp2 approximation (__expf: a multiply and one MUFU.EX2,
// relative error ~2^-21 against expf's dozen instructions), for the tensor-core kernels only:
// their outputs are bf16, whose rounding (2^-9) dwarfs it, and their per-key work is short enough
// that the accurate exp was a large share of it.
__device__ inline float exp_from_fast(float x, float m) { return x == -INFINITY ? 0.0f : __expf(x - m); }


// ---- generic: one query row per block (attention_rows.cu) -------------------------------------
struct RowShape {
  int64_t B, Tq, Tk, H, group;
  int D;
  bool causal;
  const int32_t* seq_lens;  // decode: sequence b sees clamp(seq_lens[b], 1, Tk) keys (Tq = 1)
  int64_t window;           // > 0: a query at position p sees keys (p − window, p] only
  int64_t S;                // slots of k and v: key j at slot j mod S (KeySlots); decode with
                            // rolling: Tk is unbounded, seq_lens[b] is only clamped below
  bool rolling;
};

// Any head dim, any mix of k and v dtypes; slow, for what the tiled kernels do not take. Throws
// not_implemented where 2·D floats of shared memory do not fit a block.
void launch_rows(GpuStream& s, Operand out, Operand q, const Tensor& k, Strides3 ks, const Tensor& v, Strides3 vs,
                 const RowShape& sh, float scale);


// ---- prefill on tensor cores (attention_prefill.cu), for attention_prefill and mla_prefill ----
// Key rows in two parts: elements [0, split) at first + first_at.at(b, j, kv head), the rest at
// second + second_at.at(b, j, kv head). A plain key row has split = DK; MLA's expanded key
// [W_uk^h c_j ; k_j^R] (mla.cu) has its rope part in the cache row every head shares
// (second_at.h = 0).
struct SplitRows {
  const void* first;
  Strides3 first_at;
  const void* second;
  Strides3 second_at;
  int split;
};

struct PrefillMma {
  Operand out{};           // [B, Tq, H, DV]
  const void* q = nullptr;  // [B, Tq, H, DK]
  Strides3 qs{};
  SplitRows k{};           // [B, Tk slots, Hkv, DK]
  const void* v = nullptr;  // [B, Tk slots, Hkv, DV]
  Strides3 vs{};
  DType dtype = DType::bf16;  // of q, k and v: f16 or bf16
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0;
  int DK = 0, DV = 0;
  bool causal = true;
  int64_t window = 0;  // ops::AttentionParams' meaning
  int64_t S = 0;       // slots of k and v: key j at slot j mod S (KeySlots)
  float scale = 0;
  // P rounded once to the 16-bit type instead of entering P·V as parts (attention_prefill.cu's
  // precision argument): for a caller whose keys and values are rounded intermediates already.
  bool p_rounded = false;
};

// Whether the tensor-core kernel has an instance for these head dims and P's precision and runs
// on this device (NVIDIA sm_80+): (64, 64) and (128, 128) with P in parts, (192, 128) with P
// rounded (DeepSeek-V2/V3's expanded latent attention).
bool prefill_mma_takes(const Props& props, int DK, int DV, bool p_rounded);
// Launches it. The caller has checked prefill_mma_takes and that every row of q, k's two parts and
// v starts 16-byte aligned (k's split a multiple of 8) and every row of out 2-element aligned.
void launch_prefill_mma(GpuStream& s, const PrefillMma& p);

}  // namespace attn
DING_GPU_END
