// The reference implementation of every op: plain loops over the math, double accumulation,
// each function beside the formula it implements. The oracle of the parity tests; never optimised
// beyond reading a value once where the formula uses it many times (same operations, same order).
#pragma once
#include <cstdint>

#include "ding/ops/kernels.h"

namespace ding::reference {

#define DING_REFERENCE_DECL(op, Args) void op(Stream& stream, const ops::Args& args);
DING_OP_LIST(DING_REFERENCE_DECL)
#undef DING_REFERENCE_DECL

// Element access by logical index through the strides, converting to and from double.
double load(const Tensor& t, int64_t element_offset);
void store(const Tensor& t, int64_t element_offset, double value);
// Element offset of a multi-index (i0, i1, …) through t's strides.
int64_t offset(const Tensor& t, std::initializer_list<int64_t> index);
// Element offset of row r, the r-th index of all dims but the last in row-major order, through
// t's strides: where row r of a view with a contiguous last dimension starts.
int64_t row_offset(const Tensor& t, int64_t r);

// The activations' scalar formulas (ops/activation.h) in double, for every op that applies one:
// the activation ops, the matmul epilogues, the convolution, the gated norm, the routers.
double gelu_value(double x);  // the tanh form
double sigmoid_value(double x);
double silu_value(double x);
double activation_value(ops::ActivationFn fn, double x);

}  // namespace ding::reference
