#include "ding/error.h"

namespace ding {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::shape_mismatch: return "shape_mismatch";
    case ErrorCode::dtype_mismatch: return "dtype_mismatch";
    case ErrorCode::device_mismatch: return "device_mismatch";
    case ErrorCode::aliasing: return "aliasing";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::not_implemented: return "not_implemented";
    case ErrorCode::backend_unavailable: return "backend_unavailable";
    case ErrorCode::io: return "io";
    case ErrorCode::parse: return "parse";
    case ErrorCode::device_failure: return "device_failure";
    case ErrorCode::non_finite: return "non_finite";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace ding
