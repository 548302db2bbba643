// The op table of the GPU backends: every op of op_list.h, from the family files beside this.
#include "kernels.h"

namespace ding::gpu {

const ops::Kernels& kernel_table() {
  static const ops::Kernels table = [] {
    ops::Kernels t;
    t.copy = gpu::copy;
    t.kv_append = gpu::kv_append;
    t.attention_prefill = gpu::attention_prefill;
    t.attention_decode = gpu::attention_decode;
    return t;
  }();
  return table;
}

}  // namespace ding::gpu
