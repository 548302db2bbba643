// Element access for kernels: the storage types are the runtime's own (float, ding::f16,
// ding::bf16 from dtype.h), widened to float in registers and rounded to nearest even on store.
#pragma once
#include <utility>

#include "ding/dtype.h"
#include "ding/error.h"
#include "vendor.h"

DING_GPU_BEGIN

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(ding::f16 x) { return half_bits_to_float(x.bits); }
__device__ inline float to_float(ding::bf16 x) { return bf16_bits_to_float(x.bits); }

template <class T> __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline ding::f16 from_float<ding::f16>(float x) { return ding::f16{float_to_half_bits(x)}; }
template <> __device__ inline ding::bf16 from_float<ding::bf16>(float x) { return ding::bf16{float_to_bf16_bits(x)}; }

// N elements moved as one aligned access (16 bytes: 4 floats or 8 halves).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
inline constexpr int kPack16 = 16 / int(sizeof(T));

// Calls f(T{}) with T the storage type of a float dtype; throws for any other dtype.
template <class F>
decltype(auto) with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: return std::forward<F>(f)(float{});
    case DType::f16: return std::forward<F>(f)(ding::f16{});
    case DType::bf16: return std::forward<F>(f)(ding::bf16{});
    default: break;
  }
  throw Error(ErrorCode::dtype_mismatch, std::string("gpu kernels: no float storage type for ") + std::string(dtype_name(t)));
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

DING_GPU_END
