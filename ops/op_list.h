// The one table of ops. Each row: the op's name and its argument struct.
// The kernel table (kernels.h), dispatch (dispatch.h), the required-coverage test and
// ding-bench all iterate this list, so adding an op here is what makes it exist everywhere.
#pragma once

#define DING_OP_LIST(X)                     \
  X(copy, CopyArgs)                         \
  X(matmul, MatmulArgs)                     \
  X(matmul_chain, MatmulChainArgs)          \
  X(softmax, SoftmaxArgs)                   \
  X(layer_norm, LayerNormArgs)              \
  X(rms_norm, RmsNormArgs)                  \
  X(gelu, GeluArgs)                         \
  X(silu, SiluArgs)                         \
  X(swiglu, SwigluArgs)                     \
  X(clamp, ClampArgs)                       \
  X(sigmoid_gate, SigmoidGateArgs)          \
  X(activation, ActivationArgs)             \
  X(embedding, EmbeddingArgs)               \
  X(rope, RopeArgs)                         \
  X(attention_prefill, AttentionPrefillArgs) \
  X(attention_decode, AttentionDecodeArgs)  \
  X(kv_append, KvAppendArgs)                \
  X(causal_conv1d, CausalConv1dArgs)        \
  X(gated_delta_rule, GatedDeltaRuleArgs)   \
  X(linear_attention, LinearAttentionArgs)  \
  X(mla_prefill, MlaPrefillArgs)            \
  X(mla_decode, MlaDecodeArgs)              \
  X(moe_route, MoeRouteArgs)                \
  X(moe_group, MoeGroupArgs)                \
  X(moe_matmul, MoeMatmulArgs)              \
  X(moe_combine, MoeCombineArgs)            \
  X(argmax, ArgmaxArgs)                     \
  X(top_k, TopKArgs)                        \
  X(sample, SampleArgs)                     \
  X(count_nonfinite, CountNonfiniteArgs)
