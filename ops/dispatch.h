// dispatch: the path every op call takes — validate, find the kernel, record cost, launch.
#pragma once
#include <string>

#include "ding/device.h"
#include "ding/error.h"
#include "ding/ops/kernels.h"
#include "ding/profile.h"

namespace ding::ops {

[[noreturn]] void throw_not_implemented(const char* op, const Device& device);
[[noreturn]] void throw_unsupported(const char* op, const Device& device, const std::string& why);

// The kernel of `k` that runs `args` (already validated) on `device`, or Error(not_implemented)
// naming the op, the backend and, for a limited kernel, why it does not take these arguments.
template <class Args>
KernelFn<Args> kernel_for(const Kernels& k, const Device& device, const Args& args) {
  const KernelFn<Args> kernel = k.*OpInfo<Args>::slot;
  if (kernel == nullptr) throw_not_implemented(OpInfo<Args>::name, device);
  if (const KernelLimit<Args> limit = k.limits.*OpInfo<Args>::limit)
    if (const std::string why = limit(args); !why.empty()) throw_unsupported(OpInfo<Args>::name, device, why);
  return kernel;
}

// Whether `op` is among the stream's skipped ops (Stream::skipped_ops, for measurement).
bool skipped(const Stream& stream, const char* op);

template <class Args>
void dispatch(Stream& stream, const Args& args) {
  validate(stream.device(), args);  // per-op overload; throws ding::Error naming op and values
  if (stream.skipped_ops && skipped(stream, OpInfo<Args>::name)) return;
  const KernelFn<Args> kernel = kernel_for(stream.device().kernels(), stream.device(), args);
  ProfileScope scope(stream, OpInfo<Args>::name, cost(args));
  kernel(stream, args);
}

}  // namespace ding::ops
