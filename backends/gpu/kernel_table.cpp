// The op table of the GPU backends: every op of op_list.h, each from its family's .cu file
// beside this (gpu::rms_norm in norm.cu, ...). Complete by construction: a new op in op_list.h
// does not link until it has a GPU kernel.
#include "kernels.h"

DING_GPU_BEGIN

const ops::Kernels& kernel_table() {
  static const ops::Kernels table = [] {
    ops::Kernels t;
#define DING_GPU_SLOT(op, Args) t.op = gpu::op;
    DING_OP_LIST(DING_GPU_SLOT)
#undef DING_GPU_SLOT
    return t;
  }();
  return table;
}

DING_GPU_END
