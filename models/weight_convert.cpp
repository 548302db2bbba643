#include "weight_convert.h"

#include <algorithm>
#include <cstring>

#include "../backends/cpu/simd.h"

namespace ding {

namespace {

uint32_t magnitude_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u & 0x7fffffffu;
}

// Stored tensors start at any byte of their file (safetensors aligns nothing), so a scalar is read
// through memcpy: a plain load of a misaligned float is undefined behaviour (the vector loads are
// unaligned ones already).
template <class S>
inline S load_unaligned(const S* p) {
  S v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float widen(float v) { return v; }
inline float widen(f16 v) { return f16_to_f32(v); }
inline float widen(bf16 v) { return bf16_to_f32(v); }

inline void narrow(float* p, float v) { *p = v; }
inline void narrow(f16* p, float v) { *p = f32_to_f16(v); }
inline void narrow(bf16* p, float v) { *p = f32_to_bf16(v); }

template <class D>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<D, f16>) return DType::f16;
  else if constexpr (std::is_same_v<D, bf16>) return DType::bf16;
  else return DType::f32;
}

template <class D>
bool convert_scalar(D* dst, float v) {
  narrow(dst, v);
  return magnitude_bits(v) <= convertible_limit_bits(dtype_of<D>());
}

#ifdef DING_CPU_AVX2
// Lanes of v whose magnitude passes the limit: one AND and one signed compare (both operands
// are below 2^31 once the sign is cleared), ORed into `refused`.
inline __m256i refuse8(__m256i refused, __m256 v, __m256i limit) {
  const __m256i magnitude = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
  return _mm256_or_si256(refused, _mm256_cmpgt_epi32(magnitude, limit));
}

// Rows of 8 lanes in, columns out (the unpack / shuffle / lane-swap transpose).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}
#endif

template <class D, class S>
bool convert_run(D* dst, const S* src, int64_t n) {
  int64_t i = 0;
  bool ok = true;
#ifdef DING_CPU_AVX2
  const __m256i limit = _mm256_set1_epi32(int(convertible_limit_bits(dtype_of<D>())));
  __m256i refused = _mm256_setzero_si256();
  for (; i + 16 <= n; i += 16) {
    const __m256 a = cpu::load8(src + i), b = cpu::load8(src + i + 8);
    refused = refuse8(refuse8(refused, a, limit), b, limit);
    cpu::store8(dst + i, a);
    cpu::store8(dst + i + 8, b);
  }
  ok = _mm256_testz_si256(refused, refused);
#endif
  for (; i < n; ++i) ok &= convert_scalar(dst + i, widen(load_unaligned(src + i)));
  return ok;
}

// The block is walked in tiles of kTile × kTile elements so that a tile's source lines (kTile
// rows of kTile · 4 bytes at most) stay in L1 while its 8×8 transposes read them column-wise.
constexpr int64_t kTile = 64;

template <class D, class S>
bool transpose_tile(D* dst, int64_t dst_stride, const S* src, int64_t src_stride, int64_t rows, int64_t cols) {
  bool ok = true;
  int64_t r = 0;
#ifdef DING_CPU_AVX2
  const __m256i limit = _mm256_set1_epi32(int(convertible_limit_bits(dtype_of<D>())));
  __m256i refused = _mm256_setzero_si256();
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (; r < rows8; r += 8) {
    int64_t c = 0;
    for (; c < cols8; c += 8) {
      __m256 v[8];  // v[j]: source row c + j, columns r … r + 7
      for (int j = 0; j < 8; ++j) {
        v[j] = cpu::load8(src + (c + j) * src_stride + r);
        refused = refuse8(refused, v[j], limit);
      }
      transpose8(v);  // v[j]: destination row r + j, columns c … c + 7
      for (int j = 0; j < 8; ++j) cpu::store8(dst + (r + j) * dst_stride + c, v[j]);
    }
    for (; c < cols; ++c)
      for (int64_t j = r; j < r + 8; ++j)
        ok &= convert_scalar(dst + j * dst_stride + c, widen(load_unaligned(src + c * src_stride + j)));
  }
  ok &= bool(_mm256_testz_si256(refused, refused));
#endif
  for (; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ok &= convert_scalar(dst + r * dst_stride + c, widen(load_unaligned(src + c * src_stride + r)));
  return ok;
}

template <class D, class S>
bool transpose_run(D* dst, int64_t dst_stride, const S* src, int64_t src_stride, int64_t rows, int64_t cols) {
  bool ok = true;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      ok &= transpose_tile(dst + r0 * dst_stride + c0, dst_stride, src + c0 * src_stride + r0, src_stride,
                           std::min(kTile, rows - r0), std::min(kTile, cols - c0));
  return ok;
}

// Calls f with the destination and source as typed pointers.
template <class F>
bool with_types(void* dst, DType dst_dtype, const void* src, DType src_dtype, F&& f) {
  return cpu::with_float_type(dst_dtype, dst, [&](auto* d) {
    return cpu::with_float_type(src_dtype, src, [&](const auto* s) { return f(d, s); });
  });
}

}  // namespace

bool weight_convertible(float value, DType dtype) { return magnitude_bits(value) <= convertible_limit_bits(dtype); }

bool weight_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  return with_types(dst, dst_dtype, src, src_dtype, [&](auto* d, const auto* s) { return convert_run(d, s, n); });
}

bool weight_convert_transposed(void* dst, DType dst_dtype, int64_t dst_stride, const void* src, DType src_dtype,
                               int64_t src_stride, int64_t rows, int64_t cols) {
  return with_types(dst, dst_dtype, src, src_dtype,
                    [&](auto* d, const auto* s) { return transpose_run(d, dst_stride, s, src_stride, rows, cols); });
}

int64_t weight_first_refused(const void* src, DType src_dtype, DType dst_dtype, int64_t src_stride, int64_t src_rows,
                             int64_t src_cols) {
  for (int64_t i = 0; i < src_rows; ++i)
    for (int64_t j = 0; j < src_cols; ++j) {
      const int64_t offset = i * src_stride + j;
      if (!weight_convertible(float(load_element(src, src_dtype, offset)), dst_dtype)) return offset;
    }
  return -1;
}

}  // namespace ding
