// CPU matmul and matmul_chain: choose the core (gemv for decode rows, gemm otherwise) per batch,
// and run the chain chunk by chunk through Eigen with the intermediates in the ping-pong scratch.
#include <Eigen/Dense>

#include <algorithm>
#include <vector>

#include "gemm.h"
#include "kernels.h"
#include "simd.h"

namespace ding::cpu {

namespace {

const char* at_element(const Tensor& t, int64_t i) {
  return static_cast<const char*>(t.data) + i * int64_t(dtype_size(t.dtype));
}

}  // namespace

void matmul(Stream& stream, const ops::MatmulArgs& a) {
  if (a.params.norm.kind != ops::NormKind::none)
    return ops::matmul_with_staged_prologue(stream, a, {layer_norm, rms_norm, matmul});
  // N: output channels (w has 2N rows for swiglu).
  const int64_t K = a.x.dim(-1), N = a.out.dim(-1), w_rows = a.w.dim(-2);
  // A shared w with batched x is one product over all B·M rows (x and out are contiguous).
  const bool per_batch_w = a.w.rank == 3;
  const int64_t batches = per_batch_w ? a.x.dim(0) : 1;
  const int64_t M = a.x.numel() / K / batches;
  for (int64_t b = 0; b < batches; ++b) {
    GemmProblem p;
    p.x = at_element(a.x, b * M * K);
    p.x_dtype = a.x.dtype;
    p.w = at_element(a.w, b * w_rows * K);
    p.w_dtype = a.w.dtype;
    p.w_scales = a.w.scales ? a.w.scales + b * w_rows : nullptr;
    p.M = M, p.N = N, p.K = K;
    p.ep.bias = a.params.bias.data;
    p.ep.bias_dtype = a.params.bias.dtype;
    p.ep.gelu = a.params.activation == ops::Activation::gelu_tanh;
    p.ep.swiglu = a.params.activation == ops::Activation::swiglu;
    if (a.params.residual.defined()) {
      p.ep.residual = at_element(a.params.residual, b * M * N);
      p.ep.residual_dtype = a.params.residual.dtype;
    }
    p.ep.out = const_cast<char*>(at_element(a.out, b * M * N));
    p.ep.out_dtype = a.out.dtype;
    p.ep.N = N;
    if (M <= kGemvMaxRows)
      gemv(p);
    else
      gemm(p);
  }
}

// Chunk of rows c of A0 (cr rows): s ← A0[c]; s ← s·A1; …; out[c] ← s·An. Each product is an Eigen
// GEMM (multithreaded by Eigen itself) on f32 maps; the two slots alternate so a product never
// reads the buffer it writes. f32 intermediates live in the scratch itself; 16-bit ones (the
// op's contract, ops/matmul.h) are computed in f32, rounded into the scratch and widened back,
// so the next product reads exactly the rounded values every backend reads.
void matmul_chain(Stream&, const ops::MatmulChainArgs& a) {
  using RowMajorF32 = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMajorF32>;
  using Map = Eigen::Map<RowMajorF32>;

  const Tensor& first = a.factors[0];
  const int64_t R = first.dim(0), chunk_rows = a.chunk_rows;
  const DType inter = a.scratch.dtype;
  const int64_t slot_elements = ops::matmul_chain_slot_elements(a, chunk_rows);  // (the staging goes unused here)
  char* const scratch = static_cast<char*>(a.scratch.data);
  char* const stored[2] = {scratch, scratch + slot_elements * int64_t(dtype_size(inter))};
  std::vector<float> widened_slots(inter == DType::f32 ? 0 : size_t(2 * slot_elements));
  float* const slot[2] = {
      inter == DType::f32 ? reinterpret_cast<float*>(stored[0]) : widened_slots.data(),
      inter == DType::f32 ? reinterpret_cast<float*>(stored[1]) : widened_slots.data() + slot_elements};

  // Factors after the first are read once per chunk: widen 16-bit ones to f32 once per call.
  std::vector<std::vector<float>> widened(size_t(a.count));
  const float* factor[ops::kMaxChainFactors] = {};
  for (int i = 1; i < a.count; ++i) {
    const Tensor& f = a.factors[i];
    if (f.dtype == DType::f32) {
      factor[i] = f.ptr<float>();
    } else {
      widened[size_t(i)].resize(size_t(f.numel()));
      load_row(widened[size_t(i)].data(), f.data, f.dtype, f.numel());
      factor[i] = widened[size_t(i)].data();
    }
  }
  const int64_t out_cols = a.out.dim(1);
  // The last product lands in out directly when out is f32, else in an f32 chunk then converted.
  std::vector<float> last(a.out.dtype == DType::f32 ? 0 : size_t(chunk_rows * out_cols));

  for (int64_t r0 = 0; r0 < R; r0 += chunk_rows) {
    const int64_t cr = std::min(chunk_rows, R - r0);
    // A 16-bit A0 chunk is widened into slot 0, which the first product reads and does not write.
    const float* src = slot[0];
    if (first.dtype == DType::f32)
      src = first.ptr<float>() + r0 * first.dim(1);
    else
      load_row(slot[0], at_element(first, r0 * first.dim(1)), first.dtype, cr * first.dim(1));
    for (int i = 1; i < a.count; ++i) {
      const int64_t inner = a.factors[i].dim(0), cols = a.factors[i].dim(1);
      const bool is_last = i + 1 == a.count;
      float* dst = !is_last ? slot[i % 2]
                   : a.out.dtype == DType::f32 ? a.out.ptr<float>() + r0 * out_cols
                                               : last.data();
      Map(dst, cr, cols).noalias() = ConstMap(src, cr, inner) * ConstMap(factor[i], inner, cols);
      if (!is_last && inter != DType::f32) {
        store_row(stored[i % 2], inter, dst, cr * cols);
        load_row(dst, stored[i % 2], inter, cr * cols);
      }
      src = dst;
    }
    if (a.out.dtype != DType::f32)
      store_row(const_cast<char*>(at_element(a.out, r0 * out_cols)), a.out.dtype, last.data(), cr * out_cols);
  }
}

}  // namespace ding::cpu
