// Vector loads and stores for the CPU kernels: 8 lanes of f32 in a register, whatever the
// stored dtype. 16-bit floats are widened in registers (bf16: a 16-bit shift; f16: F16C), so
// kernels stream the narrow data from memory. Without AVX2 the same API is scalar loops.
#pragma once
#include <cstdint>
#include <cstring>

#include "ding/dtype.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DING_CPU_AVX2 1
#include <immintrin.h>
#endif

namespace ding::cpu {

// One element of a float tensor as f32.
inline float load_scalar(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_f32(static_cast<const f16*>(base)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const bf16*>(base)[i]);
    case DType::i8: return float(static_cast<const int8_t*>(base)[i]);
    case DType::f8e4m3: return f8e4m3_to_f32(static_cast<const f8e4m3*>(base)[i]);
    default: return 0.0f;  // callers validate dtypes before reaching a kernel
  }
}

inline void store_scalar(void* base, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::f16: static_cast<f16*>(base)[i] = f32_to_f16(v); break;
    case DType::bf16: static_cast<bf16*>(base)[i] = f32_to_bf16(v); break;
    default: break;
  }
}

// Converts n elements of a float row (or of a quantized weight row: i8, f8e4m3, the values
// before their scale) to f32 (into a caller buffer), and a float row back.
void load_row(float* dst, const void* src, DType dtype, int64_t n);
void store_row(void* dst, DType dtype, const float* src, int64_t n);

#ifdef DING_CPU_AVX2
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const f16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// E4M3's bits moved into binary16's places (sign to bit 15, exponent and mantissa to bits 13..7)
// read as f16 give the value / 2^8 for normals and subnormals alike (both biases differ by 8).
// Each byte b goes to the top of its 16-bit lane (b·2^8), an arithmetic shift right by one puts
// exponent and mantissa in place and copies the sign into bit 14, which one mask clears; then
// F16C and one exact multiply. load8_over_256 stops before the multiply, for kernels that fold the
// 2^8 into a later one. The NaN pattern would read as 480: weights are checked finite when they
// are made.
inline __m256 load8_over_256(const f8e4m3* p) {
  const __m128i high = _mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(high, 1), _mm_set1_epi16(int16_t(0xbfff))));
}
inline __m256 load8(const f8e4m3* p) { return _mm256_mul_ps(load8_over_256(p), _mm256_set1_ps(256.0f)); }

inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(f16* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store8(bf16* p, __m256 v) {
  // Round to nearest even, as f32_to_bf16 does (NaNs are not produced by kernels' finite math).
  __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  u = _mm256_srli_epi32(u, 16);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The lane sums of 8 vectors as one vector, lane i = Σ v[i]: one reduction tree for all eight.
inline __m256 hsum8(const __m256 (&v)[8]) {
  // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]: after two rounds,
  // each 128-bit half holds four vectors' sums over that half of their lanes.
  const __m256 v0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 v4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(v0123, v4567, 0x20), _mm256_permute2f128_ps(v0123, v4567, 0x31));
}
#endif

// Calls f with a weight's data as a typed pointer: the float types, or a quantized weight's values
// (const int8_t*, const f8e4m3*).
template <class F>
decltype(auto) with_weight_type(DType dtype, const void* p, F&& f) {
  switch (dtype) {
    case DType::f16: return f(static_cast<const f16*>(p));
    case DType::bf16: return f(static_cast<const bf16*>(p));
    case DType::i8: return f(static_cast<const int8_t*>(p));
    case DType::f8e4m3: return f(static_cast<const f8e4m3*>(p));
    default: return f(static_cast<const float*>(p));
  }
}

// Calls f with the tensor's data as a typed pointer (const float*, const f16*, const bf16*).
template <class F>
decltype(auto) with_float_type(DType dtype, const void* p, F&& f) {
  switch (dtype) {
    case DType::f16: return f(static_cast<const f16*>(p));
    case DType::bf16: return f(static_cast<const bf16*>(p));
    default: return f(static_cast<const float*>(p));
  }
}
template <class F>
decltype(auto) with_float_type(DType dtype, void* p, F&& f) {
  switch (dtype) {
    case DType::f16: return f(static_cast<f16*>(p));
    case DType::bf16: return f(static_cast<bf16*>(p));
    default: return f(static_cast<float*>(p));
  }
}

}  // namespace ding::cpu
