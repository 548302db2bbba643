// The GPU backends' kernels (cuda and hip): one entry point per op, each in the op
// family's .cu file beside its kernels, e.g. gpu::rms_norm in backends/gpu/norm.cu; a family
// with several jobs has a file per job (attention: attention_prefill.cu, attention_decode.cu,
// kv_append.cu, and attention_rows.cu for the generic kernel both attention ops fall back to).
#pragma once
#include "ding/ops/kernels.h"
#include "vendor.h"

DING_GPU_BEGIN

#define DING_GPU_DECL(op, Args) void op(Stream& stream, const ops::Args& args);
DING_OP_LIST(DING_GPU_DECL)
#undef DING_GPU_DECL

class GpuStream;
// kv_append at positions start[b] + start_offset (attention_decode appends at seq_lens − 1).
void launch_kv_append(GpuStream& s, const ops::KvAppendArgs& a, int start_offset);

// The table a GPU device hands out.
const ops::Kernels& kernel_table();

DING_GPU_END
