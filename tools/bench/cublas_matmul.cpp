// The cuBLAS comparison path for matmul (ding-bench --matmul cublas): cublasGemmEx /
// cublasGemmStridedBatchedEx with f32 accumulation, for the calls it takes without help. Calls
// with a bias, activation, residual or norm prologue, mixed x/w dtypes or an out dtype cuBLAS
// cannot write run ding's own kernels instead (matmul returns false), so the comparison covers
// plain products. It lives in ding-bench, the only program that links cuBLAS.
#include "cublas_matmul.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <climits>

#include "ding/error.h"

namespace ding::bench {

namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::device_failure, fmt::format("cublas: {} failed: {}", what, cublasGetStatusString(status)));
}

cudaDataType_t cublas_type(DType t) {
  switch (t) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

class CublasMatmul final : public gpu::MatmulOverride {
 public:
  ~CublasMatmul() override {
    if (cublas_) (void)cublasDestroy(cublas_);
  }
  bool matmul(void* stream, const ops::MatmulArgs& a) override;

 private:
  cublasHandle_t cublas_ = nullptr;  // created on the first call
};

bool CublasMatmul::matmul(void* stream, const ops::MatmulArgs& a) {
  const ops::MatmulParams& params = a.params;
  if (params.bias.defined() || params.residual.defined() || params.activation != ops::Activation::none ||
      params.norm.kind != ops::NormKind::none)
    return false;
  if (a.x.dtype != a.w.dtype || (a.out.dtype != a.x.dtype && a.out.dtype != DType::f32)) return false;

  const bool per_batch_w = a.w.rank == 3;
  const int64_t K = a.x.dim(-1), N = a.w.dim(-2), batches = per_batch_w ? a.x.dim(0) : 1;
  const int64_t M = per_batch_w || a.x.rank == 2 ? a.x.dim(-2) : a.x.dim(0) * a.x.dim(1);
  if (M == 0 || N == 0 || K == 0 || batches == 0) return false;  // cuBLAS rejects or skips these; ding's kernels do not
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || batches > INT_MAX) return false;

  if (!cublas_) check_cublas(cublasCreate(&cublas_), "cublasCreate");
  check_cublas(cublasSetStream(cublas_, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // Row-major out [M, N] is column-major outᵀ [N, M] = w · xᵀ: w [N, K] row-major is a
  // column-major K × N matrix, transposed (op T); x [M, K] row-major is column-major K × M (op N).
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t in = cublas_type(a.x.dtype), out = cublas_type(a.out.dtype);
  if (batches == 1) {
    check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, a.w.data, in, int(K),
                              a.x.data, in, int(K), &beta, a.out.data, out, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  } else {
    check_cublas(cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, a.w.data,
                                            in, int(K), N * K, a.x.data, in, int(K), M * K, &beta, a.out.data, out, int(N),
                                            M * N, int(batches), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
  return true;
}

}  // namespace

std::shared_ptr<gpu::MatmulOverride> make_cublas_matmul() { return std::make_shared<CublasMatmul>(); }

}  // namespace ding::bench
