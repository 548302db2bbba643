// Element access for kernels whose tensors may each have their own float dtype (norms, softmax,
// activations, embedding, rope). Typed<T> knows the storage type at compile time and moves V
// elements per access; AnyFloat reads the dtype at run time (a branch every thread of the grid
// takes the same way), so rare mixes of dtypes run through one instance instead of one per mix.
// Both widen to f32 on load and round to nearest even on store.
#pragma once
#include <algorithm>
#include <cstdint>

#include "ding/tensor.h"
#include "elements.cuh"

DING_GPU_BEGIN

template <class T>
struct Typed {
  T* p = nullptr;

  __device__ float load(int64_t i) const { return to_float(p[i]); }
  __device__ void store(int64_t i, float v) const { p[i] = from_float<T>(v); }

  // Elements [i, i + V) in accesses of at most 16 bytes. p + i must be aligned to
  // min(16, V·sizeof(T)) bytes: the host checks the base pointer (aligned_for) and keeps every
  // i a multiple of V.
  template <int V>
  __device__ void load(int64_t i, float* v) const {
    constexpr int P = V < kPack16<T> ? V : kPack16<T>;
#pragma unroll
    for (int s = 0; s < V; s += P) {
      const Pack<T, P> q = *reinterpret_cast<const Pack<T, P>*>(p + i + s);
#pragma unroll
      for (int j = 0; j < P; ++j) v[s + j] = to_float(q.v[j]);
    }
  }
  template <int V>
  __device__ void store(int64_t i, const float* v) const {
    constexpr int P = V < kPack16<T> ? V : kPack16<T>;
#pragma unroll
    for (int s = 0; s < V; s += P) {
      Pack<T, P> q;
#pragma unroll
      for (int j = 0; j < P; ++j) q.v[j] = from_float<T>(v[s + j]);
      store_pack(p + i + s, q);
    }
  }
};

struct AnyFloat {
  void* p = nullptr;
  DType dtype = DType::f32;

  __device__ float load(int64_t i) const {
    switch (dtype) {
      case DType::f16: return to_float(static_cast<const ding::f16*>(p)[i]);
      case DType::bf16: return to_float(static_cast<const ding::bf16*>(p)[i]);
      default: return static_cast<const float*>(p)[i];
    }
  }
  __device__ void store(int64_t i, float v) const {
    switch (dtype) {
      case DType::f16: static_cast<ding::f16*>(p)[i] = from_float<ding::f16>(v); break;
      case DType::bf16: static_cast<ding::bf16*>(p)[i] = from_float<ding::bf16>(v); break;
      default: static_cast<float*>(p)[i] = v; break;
    }
  }
  // v rounded to this dtype.
  __device__ float round(float v) const {
    switch (dtype) {
      case DType::f16: return to_float(from_float<ding::f16>(v));
      case DType::bf16: return to_float(from_float<ding::bf16>(v));
      default: return v;
    }
  }
  // One element at a time: the host launches AnyFloat kernels with V = 1 only.
  template <int V>
  __device__ void load(int64_t i, float* v) const {
    static_assert(V == 1, "AnyFloat moves one element per access");
    v[0] = load(i);
  }
  template <int V>
  __device__ void store(int64_t i, const float* v) const {
    static_assert(V == 1, "AnyFloat moves one element per access");
    store(i, v[0]);
  }
};

// Host side. An absent (default) tensor gives a null pointer, which kernels test for.
template <class T>
Typed<T> typed(const Tensor& t) {
  return {static_cast<T*>(t.data)};
}
inline AnyFloat any_float(const Tensor& t) { return {t.data, t.dtype}; }

// Whether Typed<T>::load<V> may start at t's data pointer (an absent tensor always may).
inline bool aligned_for(const Tensor& t, int V) {
  const int64_t bytes = std::min<int64_t>(16, int64_t(V) * int64_t(dtype_size(t.dtype)));
  return reinterpret_cast<uintptr_t>(t.data) % uintptr_t(bytes) == 0;
}

DING_GPU_END
