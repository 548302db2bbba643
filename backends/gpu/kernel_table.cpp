// The op table of the GPU backends: every op of op_list.h, from the family files beside this.
#include "kernels.h"

namespace ding::gpu {

const ops::Kernels& kernel_table() {
  static const ops::Kernels table = [] {
    ops::Kernels t;
    t.copy = gpu::copy;
    t.kv_append = gpu::kv_append;
    t.moe_route = gpu::moe_route;
    t.moe_group = gpu::moe_group;
    t.moe_combine = gpu::moe_combine;
    t.argmax = gpu::argmax;
    t.top_k = gpu::top_k;
    t.sample = gpu::sample;
    return t;
  }();
  return table;
}

}  // namespace ding::gpu
