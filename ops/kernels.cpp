#include "ding/ops/kernels.h"

#include <fmt/format.h>

#include <algorithm>

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

std::vector<std::string> missing_kernels(const Kernels& k, const std::vector<std::string_view>& needed) {
  const std::vector<std::string> all = missing_kernels(k);
  std::vector<std::string> missing;
  for (std::string_view op : needed) {
    if (std::find(std::begin(kOpNames), std::end(kOpNames), op) == std::end(kOpNames))
      throw Error(ErrorCode::internal, fmt::format("missing_kernels: \"{}\" is not an op of op_list.h", op));
    if (std::find(all.begin(), all.end(), op) != all.end()) missing.emplace_back(op);
  }
  return missing;
}

void throw_unsupported(const char* op, const Device& device, const std::string& why) {
  throw Error(ErrorCode::not_implemented, fmt::format("op {} on backend {} does not take this call: {}", op, device.name(), why));
}

void throw_not_implemented(const char* op, const Device& device) {
  throw Error(ErrorCode::not_implemented, fmt::format("op {} is not implemented on backend {}", op, device.name()));
}

bool skipped(const Stream& stream, const char* op) {
  const std::vector<std::string>& names = *stream.skipped_ops;
  return std::find(names.begin(), names.end(), op) != names.end();
}

}  // namespace ding::ops
