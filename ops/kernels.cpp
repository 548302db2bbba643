#include "ding/ops/kernels.h"

#include <fmt/format.h>

#include "ding/ops/dispatch.h"

namespace ding::ops {

std::vector<std::string> missing_kernels(const Kernels& k) {
  std::vector<std::string> missing;
#define DING_MISSING(op, Args) \
  if (k.op == nullptr) missing.emplace_back(#op);
  DING_OP_LIST(DING_MISSING)
#undef DING_MISSING
  return missing;
}

void throw_not_implemented(const char* op, const Device& device) {
  throw Error(ErrorCode::not_implemented, fmt::format("op {} is not implemented on backend {}", op, device.name()));
}

}  // namespace ding::ops
