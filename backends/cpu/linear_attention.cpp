// linear_attention (ops/linear_attention.h) runs as the gated delta rule without its correction
// (GatedDeltaRuleParams::delta = false): delta_rule.cpp beside this is its kernel.
#include "kernels.h"

namespace ding::cpu {

void linear_attention(Stream& stream, const ops::LinearAttentionArgs& a) { gated_delta_rule(stream, ops::as_gated_delta_rule(a)); }

}  // namespace ding::cpu
