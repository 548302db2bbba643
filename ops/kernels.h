// Kernels: the table a backend fills, one entry per op of op_list.h. An entry left null means
// "not implemented here": dispatch raises Error(not_implemented), never a silent fallback. A
// backend whose kernel takes only some valid calls (some dtypes, some sizes) says which through
// the op's entry in `limits`: dispatch raises Error(not_implemented) with its reason for the rest,
// and the parity suite reports those cases as skipped with it.
#pragma once
#include <string>
#include <string_view>
#include <vector>
#include "ding/ops/activation.h"
#include "ding/ops/attention.h"
#include "ding/ops/conv.h"
#include "ding/ops/copy.h"
#include "ding/ops/delta_rule.h"
#include "ding/ops/embedding.h"
#include "ding/ops/linear_attention.h"
#include "ding/ops/matmul.h"
#include "ding/ops/mla.h"
#include "ding/ops/moe.h"
#include "ding/ops/norm.h"
#include "ding/ops/op_list.h"
#include "ding/ops/rope.h"
#include "ding/ops/sampling.h"
#include "ding/ops/softmax.h"

namespace ding::ops {

template <class Args>
using KernelFn = void (*)(Stream&, const Args&);
// Why the backend's kernel does not take these (valid) arguments; empty when it does.
template <class Args>
using KernelLimit = std::string (*)(const Args&);

struct Kernels {
#define DING_KERNEL_SLOT(name, Args) KernelFn<Args> name = nullptr;
  DING_OP_LIST(DING_KERNEL_SLOT)
#undef DING_KERNEL_SLOT
  // Per op: null when the kernel takes every call that passes the op's validation.
  struct Limits {
#define DING_LIMIT_SLOT(name, Args) KernelLimit<Args> name = nullptr;
    DING_OP_LIST(DING_LIMIT_SLOT)
#undef DING_LIMIT_SLOT
  } limits;
};

// Static facts about each op, keyed by its argument type.
template <class Args> struct OpInfo;
#define DING_OP_INFO(op, Args)                                  \
  template <> struct OpInfo<Args> {                             \
    static constexpr const char* name = #op;                    \
    using Slot = KernelFn<Args> Kernels::*;                     \
    static constexpr Slot slot = &Kernels::op;                  \
    using LimitSlot = KernelLimit<Args> Kernels::Limits::*;     \
    static constexpr LimitSlot limit = &Kernels::Limits::op;    \
  };
DING_OP_LIST(DING_OP_INFO)
#undef DING_OP_INFO

// Names of every op, in table order.
inline constexpr const char* kOpNames[] = {
#define DING_OP_NAME(op, Args) #op,
    DING_OP_LIST(DING_OP_NAME)
#undef DING_OP_NAME
};

// Names of the ops whose slot is null in `k`.
std::vector<std::string> missing_kernels(const Kernels& k);
// Of the ops named in `needed` (names from op_list.h), those whose slot is null in `k`, in the
// order given. An unknown name is an Error(internal): the list is the caller's own.
std::vector<std::string> missing_kernels(const Kernels& k, const std::vector<std::string_view>& needed);

}  // namespace ding::ops
