// What every Kokkos kernel of ding shares: the execution and memory spaces, f16/bf16 conversions
// that run on any device, and `Elements`, a tensor's data read and written as f32 whatever its
// dtype. Kernels take dtypes at run time: the switch is uniform across a launch (no divergence on
// a GPU) and loop-invariant, so compilers hoist it out of the inner loops on a CPU; one kernel per
// op keeps the build small on every Kokkos.
#pragma once
#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
// F16C on a host Kokkos built with DING_CPU_FLAGS: f16 widens in hardware (never in device code).
#if defined(__F16C__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#define DING_KOKKOS_F16C 1
#include <immintrin.h>
#endif

#include "ding/device.h"
#include "ding/dtype.h"
#include "ding/ops/activation.h"

namespace ding::kokkos {

using Exec = Kokkos::DefaultExecutionSpace;
using Memory = Exec::memory_space;
using TeamPolicy = Kokkos::TeamPolicy<Exec>;
using Team = TeamPolicy::member_type;

// A range of N items, N as Kokkos' index type (int64_t ranges: tensors exceed 2^31 elements).
using Range = Kokkos::RangePolicy<Exec, Kokkos::IndexType<int64_t>>;

KOKKOS_INLINE_FUNCTION uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

KOKKOS_INLINE_FUNCTION float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 is the top half of an f32; rounding to nearest even, NaN kept quiet (as ding/dtype.h).
KOKKOS_INLINE_FUNCTION float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

KOKKOS_INLINE_FUNCTION uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. A host Kokkos built with F16C
// (DING_CPU_FLAGS) converts in one instruction, a third of the time of f16 weights' products.
// Elsewhere every case is computed and one selected, with no branch, so that a loop of
// conversions may compile to vector code: a normal's bits move into place and its exponent
// rebases by 127 − 15; a subnormal (or zero) is its mantissa · 2^-24, exact in f32; inf and NaN
// keep the all-ones exponent.
KOKKOS_INLINE_FUNCTION float f16_to_float(uint16_t h) {
#ifdef DING_KOKKOS_F16C
  return _cvtsh_ss(h);
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, magnitude = h & 0x7fffu;
  const uint32_t normal = (magnitude << 13) + (112u << 23);
  const uint32_t subnormal = float_bits(float(magnitude) * 5.9604644775390625e-8f);
  const uint32_t special = 0x7f800000u | ((magnitude & 0x3ffu) << 13);
  const uint32_t is_subnormal = 0u - uint32_t(magnitude < 0x400u), is_special = 0u - uint32_t(magnitude >= 0x7c00u);
  const uint32_t bits = (special & is_special) | (subnormal & is_subnormal) | (normal & ~(is_special | is_subnormal));
  return bits_float(sign | bits);
#endif
}

KOKKOS_INLINE_FUNCTION uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: inf
  if (a >= 0x38800000u) {  // normal in f16: drop 13 mantissa bits, nearest even
    const uint32_t rebased = a - (112u << 23);
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return uint16_t(sign | (rounded >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: ±0
  // Subnormal: the implicit bit made explicit, shifted into place with nearest-even rounding.
  const uint32_t exponent = a >> 23, mantissa = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  const uint32_t half = 1u << (shift - 1), rest = mantissa & ((1u << shift) - 1);
  uint32_t q = mantissa >> shift;
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// The math of kernels uses the C library's global functions (expf, sqrt, ...): CUDA and HIP
// provide device versions of exactly those, and their spelling is the same in every Kokkos.

// GELU's tanh form as x·σ(t), t = kGeluT1·x + kGeluT3·x³ (ops/activation.h), t formed in double:
// in f32 each rounding of t (~|t|·2⁻²⁴) would reach the result as that much relative error, many
// ulp once |t| is in the tens.
KOKKOS_INLINE_FUNCTION float gelu_tanh(float x) {
  const double xd = x, t = xd * (ops::kGeluT1 + ops::kGeluT3 * xd * xd);
  return float(xd / (1.0 + exp(-t)));
}

KOKKOS_INLINE_FUNCTION float silu(float x) { return x / (1.0f + expf(-x)); }

KOKKOS_INLINE_FUNCTION bool is_finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

// OCP E4M3 (bias 7, no infinities): normals (8 + m)·2^(e − 10), subnormals m·2^-9; the NaN pattern
// never reaches a kernel (weights are checked finite when made).
// Both as an integer times 2^-9, (8 + m) << (e − 1) or m, exact in f32: integer steps and one
// conversion, no branch or select, so that a loop of them vectorises.
KOKKOS_INLINE_FUNCTION float f8e4m3_to_float(uint8_t q) {
  const uint32_t e = (q >> 3) & 15u, m = q & 7u, normal = e != 0;
  const float magnitude = float(int32_t((m | normal << 3) << (e - normal))) * 0.001953125f;
  return bits_float(float_bits(magnitude) | uint32_t(q & 0x80u) << 24);
}

// A tensor's memory seen as numbers: load(i) and store(i, v) at element offset i (the caller
// applies the strides). Floats widen to and round from f32; i32 is read as an integer.
struct Elements {
  void* data = nullptr;
  DType dtype = DType::f32;

  KOKKOS_INLINE_FUNCTION float load(int64_t i) const {
    switch (dtype) {
      case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
      case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
      case DType::i32: return float(static_cast<const int32_t*>(data)[i]);
      case DType::i8: return float(static_cast<const int8_t*>(data)[i]);
      case DType::f8e4m3: return f8e4m3_to_float(static_cast<const uint8_t*>(data)[i]);
      default: return static_cast<const float*>(data)[i];
    }
  }
  KOKKOS_INLINE_FUNCTION void store(int64_t i, float v) const {
    switch (dtype) {
      case DType::f16: static_cast<uint16_t*>(data)[i] = float_to_f16(v); break;
      case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16(v); break;
      case DType::i32: static_cast<int32_t*>(data)[i] = int32_t(v); break;
      default: static_cast<float*>(data)[i] = v;
    }
  }
  // v rounded to this dtype (f16, bf16; any other as it is).
  KOKKOS_INLINE_FUNCTION float round(float v) const {
    switch (dtype) {
      case DType::f16: return f16_to_float(float_to_f16(v));
      case DType::bf16: return bf16_to_float(float_to_bf16(v));
      default: return v;
    }
  }
  KOKKOS_INLINE_FUNCTION int32_t load_int(int64_t i) const { return static_cast<const int32_t*>(data)[i]; }
  KOKKOS_INLINE_FUNCTION void store_int(int64_t i, int32_t v) const { static_cast<int32_t*>(data)[i] = v; }
  KOKKOS_INLINE_FUNCTION bool defined() const { return data != nullptr; }
};

inline Elements elements(const Tensor& t) { return {t.data, t.dtype}; }

// Dot products over the operands' stored types, for matmul and moe_matmul: the dtype pair is
// dispatched once per call, and the K-long loop runs on the raw element types.
KOKKOS_INLINE_FUNCTION float widen(float v) { return v; }
KOKKOS_INLINE_FUNCTION float widen(ding::f16 v) { return f16_to_float(v.bits); }
KOKKOS_INLINE_FUNCTION float widen(ding::bf16 v) { return bf16_to_float(v.bits); }
KOKKOS_INLINE_FUNCTION float widen(int8_t v) { return float(v); }
KOKKOS_INLINE_FUNCTION float widen(ding::f8e4m3 v) { return f8e4m3_to_float(v.bits); }

// Σ_k x[k]·w[k·w_step] over K terms, term k into partial sum k mod kDotLanes, the partial sums
// added pairwise at the end. One running sum is one chain of dependent adds (on a CPU each waits
// out the previous one's latency: ~1 GFLOP/s); kDotLanes independent ones overlap, and a compiler
// may keep them in the lanes of a vector register.
constexpr int kDotLanes = 8;  // also the width of one F16C conversion (widen_block)

// kDotLanes weights, `step` apart, as f32 in an array, for a loop over it that a compiler turns into
// vector code (widening inside the products did not vectorise): 8 contiguous f16 in one
// conversion where the host has F16C.
template <class W>
KOKKOS_INLINE_FUNCTION void widen_block(const W* w, int64_t step, float (&ws)[kDotLanes]) {
#ifdef DING_KOKKOS_F16C
  if (std::is_same_v<W, ding::f16> && step == 1) {
    _mm256_storeu_ps(ws, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))));
    return;
  }
#endif
  for (int i = 0; i < kDotLanes; ++i) ws[i] = widen(w[i * step]);
}

template <class X, class W>
KOKKOS_INLINE_FUNCTION float dot_typed(const X* x, const W* w, int64_t w_step, int64_t K) {
  float part[kDotLanes] = {};
  int64_t k = 0;
  auto block = [&](int64_t k0, int64_t step) {
    float xs[kDotLanes], ws[kDotLanes];
    for (int i = 0; i < kDotLanes; ++i) xs[i] = widen(x[k0 + i]);
    widen_block(w + k0 * step, step, ws);
    for (int i = 0; i < kDotLanes; ++i) part[i] += xs[i] * ws[i];
  };
  if (w_step == 1)
    for (; k + kDotLanes <= K; k += kDotLanes) block(k, 1);  // contiguous w: vector loads
  else
    for (; k + kDotLanes <= K; k += kDotLanes) block(k, w_step);
  for (; k < K; ++k) part[k % kDotLanes] += widen(x[k]) * widen(w[k * w_step]);
  for (int width = kDotLanes / 2; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) part[i] += part[i + width];
  return part[0];
}

template <class X>
KOKKOS_INLINE_FUNCTION float dot_with(const X* x, Elements w, int64_t w_at, int64_t w_step, int64_t K) {
  switch (w.dtype) {
    case DType::f16: return dot_typed(x, static_cast<const ding::f16*>(w.data) + w_at, w_step, K);
    case DType::bf16: return dot_typed(x, static_cast<const ding::bf16*>(w.data) + w_at, w_step, K);
    case DType::i8: return dot_typed(x, static_cast<const int8_t*>(w.data) + w_at, w_step, K);
    case DType::f8e4m3: return dot_typed(x, static_cast<const ding::f8e4m3*>(w.data) + w_at, w_step, K);
    default: return dot_typed(x, static_cast<const float*>(w.data) + w_at, w_step, K);
  }
}

// Σ_k x[x_at + k] · w[w_at + k·w_step], both read in their stored dtypes.
KOKKOS_INLINE_FUNCTION float dot(Elements x, int64_t x_at, Elements w, int64_t w_at, int64_t w_step, int64_t K) {
  switch (x.dtype) {
    case DType::f16: return dot_with(static_cast<const ding::f16*>(x.data) + x_at, w, w_at, w_step, K);
    case DType::bf16: return dot_with(static_cast<const ding::bf16*>(x.data) + x_at, w, w_at, w_step, K);
    default: return dot_with(static_cast<const float*>(x.data) + x_at, w, w_at, w_step, K);
  }
}

// sums[r] = Σ_k xs[r·K + k] · w[k] for the R ≤ kDotRows rows of xs (f32, K apart), w one contiguous
// row in its stored type: each block of weights widened once for all R rows, so a prefill's rows
// read w once a team rather than once a row.
constexpr int kDotRows = 8;

template <class W>
KOKKOS_INLINE_FUNCTION void dot_rows_typed(const float* xs, int64_t K, int R, const W* w, float (&sums)[kDotRows]) {
  float part[kDotRows][kDotLanes] = {};
  int64_t k = 0;
  for (; k + kDotLanes <= K; k += kDotLanes) {
    float ws[kDotLanes];
    widen_block(w + k, 1, ws);
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < kDotLanes; ++i) part[r][i] += xs[r * K + k + i] * ws[i];
  }
  for (; k < K; ++k)
    for (int r = 0; r < R; ++r) part[r][k % kDotLanes] += xs[r * K + k] * widen(w[k]);
  for (int r = 0; r < R; ++r) {
    for (int width = kDotLanes / 2; width > 0; width /= 2)
      for (int i = 0; i < width; ++i) part[r][i] += part[r][i + width];
    sums[r] = part[r][0];
  }
}

KOKKOS_INLINE_FUNCTION void dot_rows(const float* xs, int64_t K, int R, Elements w, int64_t w_at, float (&sums)[kDotRows]) {
  // One row (decode) as dot_with, whose partial sums stay in registers: with R known only at run
  // time the rows' sums live in memory, and a decode step's products take half as long again.
  if (R == 1) {
    sums[0] = dot_with(xs, w, w_at, 1, K);
    return;
  }
  switch (w.dtype) {
    case DType::f16: return dot_rows_typed(xs, K, R, static_cast<const ding::f16*>(w.data) + w_at, sums);
    case DType::bf16: return dot_rows_typed(xs, K, R, static_cast<const ding::bf16*>(w.data) + w_at, sums);
    case DType::i8: return dot_rows_typed(xs, K, R, static_cast<const int8_t*>(w.data) + w_at, sums);
    case DType::f8e4m3: return dot_rows_typed(xs, K, R, static_cast<const ding::f8e4m3*>(w.data) + w_at, sums);
    default: return dot_rows_typed(xs, K, R, static_cast<const float*>(w.data) + w_at, sums);
  }
}

// Element strides of a tensor, by value for capture in kernels (Tensor's std::array is host code).
struct Strides {
  int64_t s[kMaxRank] = {};
  KOKKOS_INLINE_FUNCTION int64_t operator[](int d) const { return s[d]; }
};

inline Strides strides(const Tensor& t) {
  Strides r;
  for (int d = 0; d < t.rank; ++d) r.s[d] = t.strides[d];
  return r;
}

// Where row r (row-major over all dims but the last) of a view with a contiguous last dimension
// starts, through its strides: rows(r) + c is the element at column c. Absent tensors: always 0.
struct RowStarts {
  int outer = 0;  // dims before the last
  Strides shape, stride;
  KOKKOS_INLINE_FUNCTION int64_t operator()(int64_t r) const {
    int64_t offset = 0;
    for (int d = outer - 1; d >= 0; --d) {
      offset += (r % shape[d]) * stride[d];
      r /= shape[d];
    }
    return offset;
  }
};

inline RowStarts row_starts(const Tensor& t) {
  RowStarts rows;
  rows.outer = t.rank > 0 ? t.rank - 1 : 0;
  for (int d = 0; d < rows.outer; ++d) rows.shape.s[d] = t.shape[d], rows.stride.s[d] = t.strides[d];
  return rows;
}

// Per-team scratch of `bytes`: level 0 (a GPU's shared memory) while small, else level 1.
inline int scratch_level(size_t bytes) { return bytes <= 16 * 1024 ? 0 : 1; }
using ScratchFloats = Kokkos::View<float*, Exec::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// A team's row of K elements of x widened to f32 once in its scratch, for every output the team
// computes from it (matmul, moe_matmul): `policy` with room for the row, and the row itself, read
// by the team's threads together (a team barrier publishes it).
inline TeamPolicy with_row_scratch(TeamPolicy policy, int64_t K, int64_t rows = 1) {
  const size_t bytes = ScratchFloats::shmem_size(rows * K);
  return policy.set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}
// `rows` consecutive rows of K elements from x's element `at` on (room for `room` rows, as the
// policy was given).
KOKKOS_INLINE_FUNCTION ScratchFloats widened_rows(const Team& team, Elements x, int64_t at, int64_t K, int64_t rows,
                                                  int64_t room) {
  const ScratchFloats row(team.team_scratch(scratch_level(ScratchFloats::shmem_size(room * K))), room * K);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * K), [&](const int64_t i) { row(i) = x.load(at + i); });
  team.team_barrier();
  return row;
}
KOKKOS_INLINE_FUNCTION ScratchFloats widened_row(const Team& team, Elements x, int64_t at, int64_t K) {
  return widened_rows(team, x, at, K, 1, 1);
}

// Temporary device memory for a kernel's intermediates, freed when it goes out of scope.
Buffer temporary(Stream& stream, size_t bytes);

}  // namespace ding::kokkos
