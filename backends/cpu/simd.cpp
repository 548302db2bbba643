#include "simd.h"

namespace ding::cpu {

void load_row(float* dst, const void* src, DType dtype, int64_t n) {
  with_weight_type(dtype, src, [&](auto* p) {
    int64_t i = 0;
#ifdef DING_CPU_AVX2
    for (; i + 8 <= n; i += 8) store8(dst + i, load8(p + i));
#endif
    for (; i < n; ++i) dst[i] = load_scalar(p, dtype, i);
  });
}

void store_row(void* dst, DType dtype, const float* src, int64_t n) {
  with_float_type(dtype, dst, [&](auto* p) {
    int64_t i = 0;
#ifdef DING_CPU_AVX2
    for (; i + 8 <= n; i += 8) store8(p + i, load8(src + i));
#endif
    for (; i < n; ++i) store_scalar(p, dtype, i, src[i]);
  });
}

}  // namespace ding::cpu
