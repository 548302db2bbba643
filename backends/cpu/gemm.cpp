// The many-rows matmul core and the epilogue shared with gemv.
// out[M, N] = epilogue(x[M, K] · w[N, K]ᵀ). Output channels are split into panels, one thread
// per panel (static, so results do not depend on timing). A 16-bit panel of w is widened to f32
// once per call into a thread buffer, then Eigen's single-threaded GEMM multiplies it against
// row tiles of x; each finished tile goes through the epilogue while it is still in cache. For
// swiglu a panel is the gate rows and the up rows of its output channels, so a tile holds both
// sums of every output it finishes.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gemm.h"
#include "simd.h"
#include "scratch.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

using RowMajorF32 = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorF32, Eigen::Unaligned, Eigen::OuterStride<>>;
using MatrixMap = Eigen::Map<RowMajorF32, Eigen::Unaligned, Eigen::OuterStride<>>;

void gelu_row(float* acc, int64_t count) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= count; i += 8) store8(acc + i, gelu8(load8(acc + i)));
#endif
  for (; i < count; ++i) acc[i] = gelu_scalar(acc[i]);
}

// gate ← silu(gate)·up
void swiglu_row(float* gate, const float* up, int64_t count) {
  int64_t i = 0;
#ifdef DING_CPU_AVX2
  for (; i + 8 <= count; i += 8) store8(gate + i, _mm256_mul_ps(silu8(load8(gate + i)), load8(up + i)));
#endif
  for (; i < count; ++i) gate[i] = silu_scalar(gate[i]) * up[i];
}

const char* element(const void* base, DType dtype, int64_t i) {
  return static_cast<const char*>(base) + i * int64_t(dtype_size(dtype));
}

int thread_count() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

void Epilogue::apply(int64_t m, int64_t n0, float* acc, int64_t count, float* up) const {
  // Each step is one pass over `count` floats that are already in L1.
  if (bias) add_row(acc, element(bias, bias_dtype, n0), bias_dtype, count);
  if (gelu) gelu_row(acc, count);
  if (swiglu) {
    if (bias) add_row(up, element(bias, bias_dtype, N + n0), bias_dtype, count);
    swiglu_row(acc, up, count);
  }
  // The residual row is read completely before out's row is written, so residual == out is safe.
  if (residual) add_row(acc, element(residual, residual_dtype, m * N + n0), residual_dtype, count);
  store_row(const_cast<char*>(element(out, out_dtype, m * N + n0)), out_dtype, acc, count);
}

void gemm(const GemmProblem& p) {
  const int64_t M = p.M, N = p.N, K = p.K;
  // Rows of w per output column: swiglu's gate and up rows are multiplied as one panel of both.
  const int64_t halves = p.ep.swiglu ? 2 : 1;
  // x widened to f32 once per call; a few MB at prefill sizes, shared read-only by every thread.
  const float* x = static_cast<const float*>(p.x);
  if (p.x_dtype != DType::f32) {
    float* x_f32 = thread_scratch(ScratchSlot::first, size_t(M * K));
    load_row(x_f32, p.x, p.x_dtype, M * K);
    x = x_f32;
  }
  // Panels of ~256 rows of w (256 output channels, or 128 of swiglu's pairs): a widened panel
  // (256·K floats, 1.6 MB at K = 1600) stays in the last-level cache while Eigen packs it once per
  // row tile. Widths are multiples of 16 (Eigen's register blocking) and the panel count a multiple
  // of the thread count, so threads get equal work.
  const int threads = thread_count();
  const int64_t target_n = 256 / halves;
  int64_t panels = std::max<int64_t>(1, (N + target_n - 1) / target_n);
  panels = (panels + threads - 1) / threads * threads;
  const int64_t panel_n = std::min(N, (((N + panels - 1) / panels) + 15) / 16 * 16);
  panels = (N + panel_n - 1) / panel_n;
  // Row tiles bound the f32 tile the epilogue reads back to ~256 × 256 floats (256 KB).
  const int64_t tile_m = std::min<int64_t>(M, 256);

#pragma omp parallel
  {
    // Per-thread slots; the calling thread's `first` slot holds x, so panels and tiles use others.
    float* const w_panel =
        p.w_dtype == DType::f32 ? nullptr : thread_scratch(ScratchSlot::second, size_t(halves * panel_n * K));
    float* const tile = thread_scratch(ScratchSlot::third, size_t(tile_m * halves * panel_n));
#pragma omp for schedule(static)
    for (int64_t panel = 0; panel < panels; ++panel) {
      const int64_t n0 = panel * panel_n, nc = std::min(panel_n, N - n0);
      // Half h holds rows h·N + n0 … of w: the panel itself, or swiglu's gate rows then its up rows.
      const float* w[2] = {};
      for (int64_t h = 0; h < halves; ++h) {
        const int64_t first_row = h * N + n0;
        if (p.w_dtype == DType::f32) {
          w[h] = static_cast<const float*>(p.w) + first_row * K;
        } else {
          float* const rows = w_panel + h * nc * K;
          load_row(rows, element(p.w, p.w_dtype, first_row * K), p.w_dtype, nc * K);
          if (p.w_scales)  // a quantized panel, dequantized as it is widened
            for (int64_t r = 0; r < nc; ++r)
              for (int64_t k = 0; k < K; ++k) rows[r * K + k] *= p.w_scales[first_row + r];
          w[h] = rows;
        }
      }
      // A tile row holds the panel's sums, swiglu's gate sums then its up sums: one cache-sized
      // block of both halves, combined by the epilogue right away.
      const int64_t ld = halves * nc;
      for (int64_t m0 = 0; m0 < M; m0 += tile_m) {
        const int64_t mc = std::min(tile_m, M - m0);
        const ConstMatrixMap x_map(x + m0 * K, mc, K, Eigen::OuterStride<>(K));
        MatrixMap tile_map(tile, mc, ld, Eigen::OuterStride<>(ld));
        // Inside this parallel region Eigen runs single-threaded; the parallelism is the panels.
        for (int64_t h = 0; h < halves; ++h) {
          const ConstMatrixMap w_map(w[h], nc, K, Eigen::OuterStride<>(K));
          tile_map.middleCols(h * nc, nc).noalias() = x_map * w_map.transpose();
        }
        for (int64_t i = 0; i < mc; ++i) {
          float* const row = tile + i * ld;
          p.ep.apply(m0 + i, n0, row, nc, p.ep.swiglu ? row + nc : nullptr);
        }
      }
    }
  }
}

}  // namespace ding::cpu
