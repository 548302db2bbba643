// Pointwise activations on the CPU. The data is streamed in chunks that are widened to f32 in
// a stack buffer, transformed with the vectorised logistic of vec_math.h, and narrowed on the
// way out: whatever the mix of dtypes, one loop per op does the math. Chunks are the unit of
// OpenMP work, so every element is written by exactly one thread and in-place use is safe.
// clamp's views are walked as rows of their contiguous last dimension, each in chunks.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels.h"
#include "simd.h"
#include "strided.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

constexpr int64_t kChunk = 1024;              // f32 elements per chunk: 4 KiB, resident in L1
constexpr int64_t kParallelMinimum = 1 << 15;  // below this, thread start-up costs more than it saves

void gelu_chunk(float* v, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, gelu8(_mm256_loadu_ps(v + i)));
#endif
  for (; i < n; ++i) v[i] = gelu_scalar(v[i]);
}

// gate ← silu(gate)·up
void swiglu_chunk(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) gate[i] = gate[i] * sigmoid_scalar(gate[i]) * up[i];
}

// x ← x·σ(gate)
void sigmoid_gate_chunk(float* x, const float* gate, int64_t n) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sigmoid8(_mm256_loadu_ps(gate + i))));
#endif
  for (; i < n; ++i) x[i] *= sigmoid_scalar(gate[i]);
}

// v ← min(max(v, lo), hi). maxps and minps return their second operand when either is NaN, so
// with v second a NaN stays NaN, as in the scalar form (whose comparisons are false for it).
void clamp_chunk(float* v, int64_t n, float lo, float hi) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  const __m256 lo8 = _mm256_set1_ps(lo), hi8 = _mm256_set1_ps(hi);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, _mm256_min_ps(hi8, _mm256_max_ps(lo8, _mm256_loadu_ps(v + i))));
#endif
  for (; i < n; ++i) v[i] = v[i] < lo ? lo : v[i] > hi ? hi : v[i];
}

const char* element(const Tensor& t, int64_t i) { return static_cast<const char*>(t.data) + i * int64_t(dtype_size(t.dtype)); }
char* element_out(const Tensor& t, int64_t i) { return static_cast<char*>(t.data) + i * int64_t(dtype_size(t.dtype)); }

template <class ChunkFn>
void unary(const Tensor& out, const Tensor& x, ChunkFn chunk_fn) {
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinimum)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(32) float v[kChunk];
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    load_row(v, element(x, begin), x.dtype, len);
    chunk_fn(v, len);
    store_row(element_out(out, begin), out.dtype, v, len);
  }
}

}  // namespace

void gelu(Stream&, const ops::GeluArgs& a) { unary(a.out, a.x, gelu_chunk); }

void silu(Stream&, const ops::SiluArgs& a) { unary(a.out, a.x, silu_row); }

void swiglu(Stream&, const ops::SwigluArgs& a) {
  const int64_t n = a.out.numel(), chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinimum)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(32) float gate[kChunk], up[kChunk];
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    load_row(gate, element(a.gate, begin), a.gate.dtype, len);
    load_row(up, element(a.up, begin), a.up.dtype, len);
    swiglu_chunk(gate, up, len);
    store_row(element_out(a.out, begin), a.out.dtype, gate, len);
  }
}

// Contiguous tensors are one row, so short last dims still split into full chunks; views are
// rows of their last dimension, and the OpenMP work items are the chunks of every row.
void clamp(Stream&, const ops::ClampArgs& a) {
  const bool flat = a.x.is_contiguous() && a.out.is_contiguous();
  const int64_t n = a.x.numel(), cols = flat ? n : a.x.dim(-1), rows = n / cols;
  const int64_t chunks_per_row = (cols + kChunk - 1) / kChunk, items = rows * chunks_per_row;
  const size_t in_size = dtype_size(a.x.dtype), out_size = dtype_size(a.out.dtype);
  const float lo = a.lo, hi = a.hi;
#pragma omp parallel for schedule(static) if (n >= kParallelMinimum)
  for (int64_t item = 0; item < items; ++item) {
    alignas(32) float v[kChunk];
    const int64_t r = item / chunks_per_row, begin = item % chunks_per_row * kChunk, len = std::min(kChunk, cols - begin);
    load_row(v, row_bytes(a.x, r) + begin * int64_t(in_size), a.x.dtype, len);
    clamp_chunk(v, len, lo, hi);
    store_row(row_bytes_out(a.out, r) + begin * int64_t(out_size), a.out.dtype, v, len);
  }
}

// Rows of the views' last dimension, in chunks; a gate of one value per row is spread over the
// chunk first, so one loop serves both gate shapes.
void sigmoid_gate(Stream&, const ops::SigmoidGateArgs& a) {
  const int64_t n = a.x.numel(), cols = a.x.dim(-1), rows = n / cols;
  const int64_t chunks_per_row = (cols + kChunk - 1) / kChunk, items = rows * chunks_per_row;
  const bool per_row = a.gate.dim(-1) == 1 && cols != 1;
  const size_t x_size = dtype_size(a.x.dtype), gate_size = dtype_size(a.gate.dtype), out_size = dtype_size(a.out.dtype);
#pragma omp parallel for schedule(static) if (n >= kParallelMinimum)
  for (int64_t item = 0; item < items; ++item) {
    alignas(32) float v[kChunk], gate[kChunk];
    const int64_t r = item / chunks_per_row, begin = item % chunks_per_row * kChunk, len = std::min(kChunk, cols - begin);
    load_row(v, row_bytes(a.x, r) + begin * int64_t(x_size), a.x.dtype, len);
    if (per_row) {
      load_row(gate, row_bytes(a.gate, r), a.gate.dtype, 1);
      std::fill(gate + 1, gate + len, gate[0]);
    } else {
      load_row(gate, row_bytes(a.gate, r) + begin * int64_t(gate_size), a.gate.dtype, len);
    }
    sigmoid_gate_chunk(v, gate, len);
    store_row(row_bytes_out(a.out, r) + begin * int64_t(out_size), a.out.dtype, v, len);
  }
}

namespace {

// f in double, once per element: the configs that take this op (hidden_act or
// activation_function other than the fused products' silu and tanh GELU) are rare, so it keeps
// the reference's formulas rather than vector approximations of each.
float activation_scalar(ops::ActivationFn fn, float x, float up) {
  const double v = x;
  double y = v;
  switch (fn) {
    case ops::ActivationFn::silu: y = double(silu_scalar(x)); break;
    case ops::ActivationFn::gelu_erf: y = 0.5 * v * std::erfc(-v / std::numbers::sqrt2); break;
    case ops::ActivationFn::gelu_tanh: y = double(gelu_scalar(x)); break;
    case ops::ActivationFn::quick_gelu: y = v / (1.0 + std::exp(-1.702 * v)); break;
    case ops::ActivationFn::relu: y = v > 0.0 || std::isnan(v) ? v : 0.0; break;
  }
  return float(y * double(up));
}

}  // namespace

// Rows in chunks of kChunk (the OpenMP work items); a gated row's gate half is [0, N) of its 2N
// inputs, its up half [N, 2N).
void activation(Stream&, const ops::ActivationArgs& a) {
  const int64_t N = a.out.dim(-1), rows = a.out.numel() / N, in_cols = a.gated ? 2 * N : N;
  const int64_t per_row = (N + kChunk - 1) / kChunk, items = rows * per_row;
  const ops::ActivationFn fn = a.fn;
#pragma omp parallel for schedule(static) if (a.out.numel() >= kParallelMinimum)
  for (int64_t item = 0; item < items; ++item) {
    alignas(32) float v[kChunk], up[kChunk];
    const int64_t r = item / per_row, begin = item % per_row * kChunk, len = std::min(kChunk, N - begin);
    load_row(v, element(a.x, r * in_cols + begin), a.x.dtype, len);
    if (a.gated) load_row(up, element(a.x, r * in_cols + N + begin), a.x.dtype, len);
    for (int64_t i = 0; i < len; ++i) v[i] = activation_scalar(fn, v[i], a.gated ? up[i] : 1.0f);
    store_row(element_out(a.out, r * N + begin), a.out.dtype, v, len);
  }
}

}  // namespace ding::cpu
