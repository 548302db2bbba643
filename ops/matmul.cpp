#include "ding/ops/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void check_norm(const Check& c, const MatmulNorm& norm, int64_t K, const char* out_name, const Tensor& out) {
  if (norm.kind == NormKind::none) return;
  c.tensor("norm.weight", norm.weight, 1, 1);
  c.float_dtype("norm.weight", norm.weight);
  c.contiguous("norm.weight", norm.weight);
  c.dim("norm.weight", norm.weight, 0, K, "K (from x)");
  c.disjoint(out_name, out, "norm.weight", norm.weight);
  if (norm.bias.defined()) {
    if (norm.kind != NormKind::layer_norm) c.fail(ErrorCode::invalid_argument, "norm.bias is given but rms_norm has no bias");
    c.tensor("norm.bias", norm.bias, 1, 1);
    c.float_dtype("norm.bias", norm.bias);
    c.contiguous("norm.bias", norm.bias);
    c.dim("norm.bias", norm.bias, 0, K, "K (from x)");
    c.disjoint(out_name, out, "norm.bias", norm.bias);
  }
  if (!(norm.eps > 0.0f)) c.fail(ErrorCode::invalid_argument, fmt::format("norm.eps must be > 0, got {}", norm.eps));
}

void validate(const Device& device, const MatmulArgs& a) {
  Check c("matmul", device);
  c.tensor("x", a.x, 2, 3);
  c.tensor("w", a.w, 2, 3);
  c.tensor("out", a.out, a.x.rank, a.x.rank);
  c.float_dtype("x", a.x);
  c.weight_dtype("w", a.w);
  c.float_dtype("out", a.out);
  c.contiguous("x", a.x);
  c.contiguous("w", a.w);
  c.contiguous("out", a.out);
  const int64_t K = a.x.dim(-1), M = a.x.dim(-2), w_rows = a.w.dim(-2);
  const bool swiglu = a.params.activation == Activation::swiglu;
  if (swiglu && w_rows % 2 != 0)
    c.fail(ErrorCode::shape_mismatch, fmt::format("swiglu needs w = [W_gate; W_up] with 2N rows, but w {} has {} rows (odd)",
                                                  shape_of(a.w), w_rows));
  const int64_t N = swiglu ? w_rows / 2 : w_rows;
  c.dim("w", a.w, -1, K, "K (the reduced dimension, from x)");
  c.dim("out", a.out, -2, M, "M (rows, from x)");
  c.dim("out", a.out, -1, N, swiglu ? "N (output channels: half of w's rows, swiglu)" : "N (output channels, from w)");
  if (a.x.rank == 3) c.dim("out", a.out, 0, a.x.dim(0), "the batch (from x)");
  if (a.w.rank == 3) {
    if (a.x.rank != 3) c.fail(ErrorCode::shape_mismatch, fmt::format("w is batched {} but x {} is not", shape_of(a.w), shape_of(a.x)));
    c.dim("w", a.w, 0, a.x.dim(0), "the batch (from x)");
  }
  if (a.params.bias.defined()) {
    c.tensor("bias", a.params.bias, 1, 1);
    c.float_dtype("bias", a.params.bias);
    c.dim("bias", a.params.bias, 0, w_rows, swiglu ? "2N (w's rows: the gate biases, then the up biases)" : "N (from w)");
    c.disjoint("out", a.out, "bias", a.params.bias);
  }
  if (a.params.residual.defined()) {
    c.tensor("residual", a.params.residual, a.out.rank, a.out.rank);
    c.float_dtype("residual", a.params.residual);
    c.contiguous("residual", a.params.residual);
    c.same_shape("residual", a.params.residual, "out", a.out);
    c.same_or_disjoint("out", a.out, "residual", a.params.residual);
  }
  check_norm(c, a.params.norm, K, "out", a.out);
  c.disjoint("out", a.out, "x", a.x);
  c.disjoint("out", a.out, "w", a.w);
}

Cost cost(const MatmulArgs& a) {
  const double batch = a.x.rank == 3 ? double(a.x.dim(0)) : 1.0;
  // The product is over every row of w: 2N of them for swiglu.
  const double M = double(a.x.dim(-2)), w_rows = double(a.w.dim(-2)), K = double(a.x.dim(-1));
  Cost c;
  c.flops = 2.0 * batch * M * w_rows * K;
  // swiglu's epilogue per output: e^−|g|, 1 + e, the division, g·u and the product with σ.
  if (a.params.activation == Activation::swiglu) c.flops += 5.0 * double(a.out.numel());
  c.bytes = double(a.x.nbytes() + a.w.nbytes() + a.out.nbytes());
  if (quantized_weight(a.w.dtype)) c.bytes += 4.0 * double(a.w.numel() / a.w.dim(-1));  // the f32 row scales
  if (a.params.bias.defined()) c.bytes += double(a.params.bias.nbytes());
  if (a.params.residual.defined()) c.bytes += double(a.params.residual.nbytes());
  if (a.params.norm.kind != NormKind::none) {
    // The statistics and the affine map: about 8 FLOPs per element of x; the norm's parameters once.
    c.flops += 8.0 * double(a.x.numel());
    c.bytes += double(a.params.norm.weight.nbytes());
    if (a.params.norm.bias.defined()) c.bytes += double(a.params.norm.bias.nbytes());
  }
  return c;
}

LayerNormArgs prologue_layer_norm(const MatmulArgs& a, const Tensor& h) {
  return {h, a.x, a.params.norm.weight, {.eps = a.params.norm.eps, .bias = a.params.norm.bias}};
}

RmsNormArgs prologue_rms_norm(const MatmulArgs& a, const Tensor& h) {
  return {h, a.x, a.params.norm.weight, {.eps = a.params.norm.eps}};
}

void matmul_with_staged_prologue(Stream& stream, const MatmulArgs& a, const HostKernels& kernels) {
  std::vector<unsigned char> staged(a.x.nbytes());
  const Tensor h = Tensor::view(staged.data(), a.x.device, a.x.dtype, a.x.shape.data(), a.x.rank);
  if (a.params.norm.kind == NormKind::layer_norm)
    kernels.layer_norm(stream, prologue_layer_norm(a, h));
  else
    kernels.rms_norm(stream, prologue_rms_norm(a, h));
  MatmulArgs plain = a;
  plain.x = h;
  plain.params.norm = {};
  kernels.matmul(stream, plain);
}

void matmul(Stream& stream, Tensor out, Tensor x, Tensor w, const MatmulParams& params) {
  dispatch(stream, MatmulArgs{out, x, w, params});
}

// ---- matmul_chain ----

void validate(const Device& device, const MatmulChainArgs& a) {
  Check c("matmul_chain", device);
  if (a.count < 2 || a.count > kMaxChainFactors)
    c.fail(ErrorCode::invalid_argument, fmt::format("needs 2 to {} factors, got {}", kMaxChainFactors, a.count));
  for (int i = 0; i < a.count; ++i) {
    const std::string name = fmt::format("factor {}", i);
    c.tensor(name.c_str(), a.factors[i], 2, 2);
    c.float_dtype(name.c_str(), a.factors[i]);
    c.contiguous(name.c_str(), a.factors[i]);
    if (i > 0 && a.factors[i].dim(0) != a.factors[i - 1].dim(1))
      c.fail(ErrorCode::shape_mismatch, fmt::format("factor {} {} does not chain onto factor {} {}: {} rows vs {} columns",
                                                    i, shape_of(a.factors[i]), i - 1, shape_of(a.factors[i - 1]),
                                                    a.factors[i].dim(0), a.factors[i - 1].dim(1)));
  }
  c.tensor("out", a.out, 2, 2);
  c.float_dtype("out", a.out);
  c.contiguous("out", a.out);
  c.dim("out", a.out, 0, a.factors[0].dim(0), "rows (from factor 0)");
  c.dim("out", a.out, 1, a.factors[a.count - 1].dim(1), "columns (from the last factor)");
  for (int i = 0; i < a.count; ++i) c.disjoint("out", a.out, "a factor", a.factors[i]);
  if (a.chunk_rows < 1) c.fail(ErrorCode::invalid_argument, fmt::format("chunk_rows must be ≥ 1, got {}", a.chunk_rows));
  c.tensor("scratch", a.scratch, 1, 1);
  c.contiguous("scratch", a.scratch);
  const DType inter = matmul_chain_intermediate_dtype(a);
  if (a.scratch.dtype != inter)
    c.fail(ErrorCode::dtype_mismatch, fmt::format("scratch is {} but the intermediates of these factors are {}",
                                                  dtype_name(a.scratch.dtype), dtype_name(inter)));
  if (a.scratch.nbytes() < matmul_chain_scratch_bytes(a, a.chunk_rows))
    c.fail(ErrorCode::invalid_argument, fmt::format("scratch {} is smaller than the {} bytes needed for {} rows per chunk",
                                                    shape_of(a.scratch), matmul_chain_scratch_bytes(a, a.chunk_rows), a.chunk_rows));
}

static int64_t widest_intermediate(const MatmulChainArgs& a) {
  int64_t widest = 1;
  for (int i = 0; i + 1 < a.count; ++i) widest = std::max(widest, a.factors[i].dim(1));
  return widest;
}

DType matmul_chain_intermediate_dtype(const MatmulChainArgs& a) {
  const DType first = a.factors[0].dtype;
  if (first != DType::bf16 && first != DType::f16) return DType::f32;
  for (int i = 1; i < a.count; ++i)
    if (a.factors[i].dtype != first) return DType::f32;
  return first;
}

namespace {
constexpr int64_t kScratchAlign = 64;  // elements: 128 bytes of 16-bit intermediates, 256 of f32
int64_t round_up_to_align(int64_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }
}  // namespace

int64_t matmul_chain_slot_elements(const MatmulChainArgs& a, int64_t chunk_rows) {
  return round_up_to_align(chunk_rows * widest_intermediate(a));
}

int64_t matmul_chain_staging_offset(const MatmulChainArgs& a, int factor) {
  int64_t offset = 0;
  for (int i = 1; i < factor && i < a.count; ++i) offset += round_up_to_align(a.factors[i].numel());
  return offset;
}

int64_t matmul_chain_staging_elements(const MatmulChainArgs& a) {
  return matmul_chain_intermediate_dtype(a) == DType::f32 ? 0 : matmul_chain_staging_offset(a, a.count);
}

size_t matmul_chain_scratch_bytes(const MatmulChainArgs& a, int64_t chunk_rows) {
  const int64_t elements = 2 * matmul_chain_slot_elements(a, chunk_rows) + matmul_chain_staging_elements(a);
  return size_t(elements) * dtype_size(matmul_chain_intermediate_dtype(a));
}

int64_t matmul_chain_chunk_rows(size_t llc_bytes, const MatmulChainArgs& a) {
  const int64_t R = a.factors[0].dim(0);
  if (llc_bytes == 0) return std::min<int64_t>(R, 256);
  // Per row of a chunk: the two intermediates live in cache; the factors are streamed.
  const size_t budget = llc_bytes / 2, inter_size = dtype_size(matmul_chain_intermediate_dtype(a));
  const double per_row = 2.0 * double(widest_intermediate(a)) * double(inter_size);
  int64_t rows = std::min<int64_t>(int64_t(double(budget) / per_row), R);
  while (rows > 1 && size_t(2 * matmul_chain_slot_elements(a, rows)) * inter_size > budget) --rows;  // slots round up
  return std::clamp<int64_t>(rows, std::min<int64_t>(R, 16), R);
}

Cost cost(const MatmulChainArgs& a) {
  Cost c;
  const double R = double(a.factors[0].dim(0));
  for (int i = 1; i < a.count; ++i) c.flops += 2.0 * R * double(a.factors[i].dim(0)) * double(a.factors[i].dim(1));
  for (int i = 0; i < a.count; ++i) c.bytes += double(a.factors[i].nbytes());
  c.bytes += double(a.out.nbytes());
  return c;
}

void matmul_chain(Stream& stream, Tensor out, const Tensor* factors, int count, Workspace& workspace,
                  const MatmulChainParams& params) {
  MatmulChainArgs a;
  a.out = out;
  if (count < 2 || count > kMaxChainFactors)
    throw Error(ErrorCode::invalid_argument, fmt::format("matmul_chain: needs 2 to {} factors, got {}", kMaxChainFactors, count));
  a.count = count;
  std::copy(factors, factors + count, a.factors.begin());
  Check c("matmul_chain", stream.device());
  c.tensor("factor 0", a.factors[0], 2, 2);
  for (int i = 1; i < count; ++i) c.tensor("a factor", a.factors[i], 2, 2);
  if (params.chunk_rows < 0)
    c.fail(ErrorCode::invalid_argument, fmt::format("chunk_rows must be ≥ 0 (0 = automatic), got {}", params.chunk_rows));
  a.chunk_rows = params.chunk_rows > 0 ? std::min(params.chunk_rows, a.factors[0].dim(0))
                                       : matmul_chain_chunk_rows(stream.device().caps().llc_bytes, a);
  a.scratch = workspace.take(matmul_chain_intermediate_dtype(a),
                             {2 * matmul_chain_slot_elements(a, a.chunk_rows) + matmul_chain_staging_elements(a)});
  dispatch(stream, a);
}

}  // namespace ding::ops
