// The op table of the GPU backends: every op of op_list.h, from the family files beside this.
#include "kernels.h"

namespace ding::gpu {

const ops::Kernels& kernel_table() {
  static const ops::Kernels table = [] {
    ops::Kernels t;
    t.copy = gpu::copy;
    t.softmax = gpu::softmax;
    t.layer_norm = gpu::layer_norm;
    t.rms_norm = gpu::rms_norm;
    t.gelu = gpu::gelu;
    t.silu = gpu::silu;
    t.swiglu = gpu::swiglu;
    t.embedding = gpu::embedding;
    t.rope = gpu::rope;
    t.kv_append = gpu::kv_append;
    t.matmul = gpu::matmul;
    t.matmul_chain = gpu::matmul_chain;
    t.attention_prefill = gpu::attention_prefill;
    t.attention_decode = gpu::attention_decode;
    return t;
  }();
  return table;
}

}  // namespace ding::gpu
