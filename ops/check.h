// Validation helpers shared by the op front ends. Each throws ding::Error whose message starts
// with the op name and names the argument and the offending values, e.g.
//   "matmul: w has K = 16 but x has K = 17 (x [3, 17] f32, w [8, 16] bf16)".
#pragma once
#include <initializer_list>
#include <string>

#include "ding/device.h"
#include "ding/error.h"

namespace ding::ops {

class Check {
 public:
  Check(const char* op, const Device& device) : op_(op), device_(device) {}

  [[noreturn]] void fail(ErrorCode code, const std::string& message) const;

  // Present, on this device, rank in [min_rank, max_rank], every dim ≥ 1, size without overflow.
  void tensor(const char* name, const Tensor& t, int min_rank, int max_rank) const;
  void dtype_in(const char* name, const Tensor& t, std::initializer_list<DType> allowed) const;
  void float_dtype(const char* name, const Tensor& t) const;  // f32, f16 or bf16
  // A matrix weight: a float dtype without scales, or quantized (i8, f8e4m3: quantized_weight in
  // ops/matmul.h) with its per-row scales (Tensor::scales).
  void weight_dtype(const char* name, const Tensor& t) const;
  void contiguous(const char* name, const Tensor& t) const;
  void last_dim_contiguous(const char* name, const Tensor& t) const;
  void same_shape(const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) const;
  void dim(const char* name, const Tensor& t, int d, int64_t expected, const char* meaning) const;
  // Either the identical view (an in-place op) or no shared byte.
  void same_or_disjoint(const char* out_name, const Tensor& out, const char* in_name, const Tensor& in) const;
  void disjoint(const char* out_name, const Tensor& out, const char* in_name, const Tensor& in) const;
  void positive(const char* name, double value) const;

 private:
  const char* op_;
  const Device& device_;
};

std::string shape_of(const Tensor& t);  // "[3, 17] f32"

}  // namespace ding::ops
