// The Kokkos backend's kernels: every op written once with Kokkos parallel patterns, run on
// Kokkos::DefaultExecutionSpace over tensors in its default memory space. Rows are reduced by a
// team each (TeamPolicy), elementwise ops are flat ranges. Data-dependent indices (token ids,
// cache lengths, expert ids) are not checked here, as on a GPU: an out-of-range entry writes
// nothing, and ops/*.h says which outputs that leaves unwritten.
#pragma once
#include "ding/ops/kernels.h"

namespace ding::kokkos {

#define DING_KOKKOS_DECL(op, Args) void op(Stream& stream, const ops::Args& args);
DING_OP_LIST(DING_KOKKOS_DECL)
#undef DING_KOKKOS_DECL

}  // namespace ding::kokkos
