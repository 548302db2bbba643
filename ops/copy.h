// copy: out[i…] = x[i…], converting between float dtypes (rounding to nearest even).
// Both may be strided views with a contiguous last dimension, which is how a KV cache is
// appended to: copy(cache.slice(1, pos, pos + T), k_view_of_qkv).
#pragma once
#include "ding/device.h"
#include "ding/profile.h"

namespace ding::ops {

struct CopyArgs {
  Tensor out;  // any shape, f32/f16/bf16 (or i32 when x is i32)
  Tensor x;    // same shape
};

void validate(const Device& device, const CopyArgs& a);
Cost cost(const CopyArgs& a);
void copy(Stream& stream, Tensor out, Tensor x);

}  // namespace ding::ops
