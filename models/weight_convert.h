// Weight conversion kernels: stored f32/f16/bf16 values to the compute dtype (f32, f16 or bf16),
// straight or transposed, in one pass that also checks every value. A value is refused when it is
// NaN or ±Inf, or when it is finite but rounds past the destination's largest finite value (an f32
// weight of 70000 has no f16). Rounding is to nearest even, bit for bit as dtype.h's scalar
// conversions; AVX2/F16C lanes where the build has them, the scalar conversions elsewhere.
#pragma once
#include <cstdint>

#include "ding/dtype.h"

namespace ding {

// The largest |f32| bit pattern (sign cleared) that converts to a finite value of `dtype`:
// everything above it is NaN, ±Inf, or rounds to ±Inf. f16: 65519.996 (65520 rounds up to Inf);
// bf16: the f32 just below 0x1.ffp127 + half an ulp; f32: FLT_MAX.
constexpr uint32_t convertible_limit_bits(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x477fefffu;
    case DType::bf16: return 0x7f7f7fffu;
    default: return 0x7f7fffffu;
  }
}

// True when `value` converts to a finite value of `dtype` (f32, f16 or bf16).
bool weight_convertible(float value, DType dtype);

// dst[i] = src[i] converted, for i < n. Returns false when some value was refused (dst then holds
// unspecified values; weight_first_refused finds which).
bool weight_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

// The transposed block: dst[r · dst_stride + c] = src[c · src_stride + r] converted, for r < rows and
// c < cols. `src` is a stored [K, N] matrix seen from its corner (src_stride = N), `dst` its
// [N, K] transpose (dst_stride = K). Cache-blocked; returns false when some value was refused.
bool weight_convert_transposed(void* dst, DType dst_dtype, int64_t dst_stride, const void* src, DType src_dtype,
                               int64_t src_stride, int64_t rows, int64_t cols);

// The first refused value in source order of the block src[i · src_stride + j], i < src_rows,
// j < src_cols: its offset i · src_stride + j, or -1 when every value converts.
int64_t weight_first_refused(const void* src, DType src_dtype, DType dst_dtype, int64_t src_stride, int64_t src_rows,
                             int64_t src_cols);

}  // namespace ding
