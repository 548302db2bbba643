// embedding: out[b, t] = token_table[ids[b, t]] + position_table[pos(b, t)]
// pos(b, t) = positions[b, t] if given, else params.position_offset + t. The position term is
// optional (RoPE models have none). Ids or positions out of range raise Error(invalid_argument)
// on host backends, naming the index and value.
#pragma once
#include <cstdint>

#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct EmbeddingParams {
  Tensor position_table;        // [P, C], optional
  Tensor positions;             // i32 [B, T], optional
  int64_t position_offset = 0;  // used when positions is absent
};

struct EmbeddingArgs {
  Tensor out;          // [B, T, C], f32/f16/bf16
  Tensor ids;          // i32 [B, T]
  Tensor token_table;  // [V, C], f32/f16/bf16
  EmbeddingParams params;
};

void validate(const Device& device, const EmbeddingArgs& a);
Cost cost(const EmbeddingArgs& a);
void embedding(Stream& stream, Tensor out, Tensor ids, Tensor token_table, const EmbeddingParams& params = {});

}  // namespace ding::ops
