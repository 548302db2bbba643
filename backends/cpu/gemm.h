// Internal to the CPU matmul: the two cores behind cpu::matmul and their shared epilogue.
//   gemv: few rows; streams W once at memory bandwidth, all rows in the same pass (gemv.cpp)
//   gemm: many rows; f32 panels through Eigen, tiles parallel over output channels (gemm.cpp)
#pragma once
#include <cstdint>

#include "ding/dtype.h"

namespace ding::cpu {

// Rows up to which streaming W once (gemv) beats the blocked GEMM. Measured on gpt2-xl shapes
// (N 6400 and 50257, K 1600, 2 threads): gemv is ahead up to M = 6 for f32 and bf16 weights; at
// M = 8 the GEMM is level for f32 and ~20% ahead for bf16, because gemv then waits on x (M rows
// reloaded per weight vector) rather than on w.
constexpr int64_t kGemvMaxRows = 6;

// The fused tail of a linear layer: out = act(acc + bias) + residual, converted to out's dtype;
// swiglu: out = silu(gate + bias[n]) · (up + bias[N + n]) + residual (ops/matmul.h).
struct Epilogue {
  const void* bias = nullptr;  // [N] ([2N] for swiglu) or null
  DType bias_dtype = DType::f32;
  bool gelu = false;               // GELU, tanh form
  bool swiglu = false;             // the sums come in pairs: gate (row n of w) and up (row N + n)
  const void* residual = nullptr;  // [M, N] or null; may be `out` itself (read before written)
  DType residual_dtype = DType::f32;
  void* out = nullptr;  // [M, N]
  DType out_dtype = DType::f32;
  int64_t N = 0;  // row stride of out and residual; swiglu: also where the up half of w and bias starts

  // Finishes out[m, n0 : n0 + count] from the f32 sums `acc` (overwritten as scratch); swiglu:
  // `acc` holds the gate sums and `up` the up sums of the same columns (also overwritten).
  void apply(int64_t m, int64_t n0, float* acc, int64_t count, float* up = nullptr) const;
};

// One (unbatched) product: acc[m, n] = Σ_k x[m, k] · w[n, k] (· w_scales[n] for a quantized w), then `ep`. x [M, K], w [N, K]
// ([2N, K] for swiglu: the cores compute rows n and N + n of w for output column n side by side).
struct GemmProblem {
  const void* x = nullptr;
  DType x_dtype = DType::f32;
  const void* w = nullptr;
  DType w_dtype = DType::f32;
  const float* w_scales = nullptr;  // a quantized w's per-row scales (its rows, swiglu's 2N), else null
  int64_t M = 0, N = 0, K = 0;  // N: columns of out
  Epilogue ep;
};

void gemv(const GemmProblem& p);  // M ≤ kGemvMaxRows
void gemm(const GemmProblem& p);  // any M

}  // namespace ding::cpu
