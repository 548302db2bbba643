// The CPU backend's kernels: OpenMP across rows/heads, SIMD (AVX2+FMA on x86-64-v3) within.
// Activations and weights are read in their stored dtype and widened to f32 in registers.
#pragma once
#include "ding/ops/kernels.h"

namespace ding::cpu {

#define DING_CPU_DECL(op, Args) void op(Stream& stream, const ops::Args& args);
DING_OP_LIST(DING_CPU_DECL)
#undef DING_CPU_DECL

}  // namespace ding::cpu
