// dispatch: the path every op call takes — validate, find the kernel, record cost, launch.
#pragma once
#include "ding/device.h"
#include "ding/error.h"
#include "ding/ops/kernels.h"
#include "ding/profile.h"

namespace ding::ops {

[[noreturn]] void throw_not_implemented(const char* op, const Device& device);

template <class Args>
void dispatch(Stream& stream, const Args& args) {
  validate(stream.device(), args);  // per-op overload; throws ding::Error naming op and values
  KernelFn<Args> kernel = stream.device().kernels().*OpInfo<Args>::slot;
  if (kernel == nullptr) throw_not_implemented(OpInfo<Args>::name, stream.device());
  ProfileScope scope(stream, OpInfo<Args>::name, cost(args));
  kernel(stream, args);
}

}  // namespace ding::ops
