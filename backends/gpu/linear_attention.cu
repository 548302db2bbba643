// linear_attention on the GPU (ops/linear_attention.h) runs as the gated delta rule without its
// correction (GatedDeltaRuleParams::delta = false): delta_rule.cu beside this is its kernel.
#include "kernels.h"

DING_GPU_BEGIN

void linear_attention(Stream& stream, const ops::LinearAttentionArgs& a) { gated_delta_rule(stream, ops::as_gated_delta_rule(a)); }

DING_GPU_END
