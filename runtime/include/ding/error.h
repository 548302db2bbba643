// ding::Error — the one exception type the library throws.
// Every message names what was wrong and where (op, file, field) and the offending values.
#pragma once
#include <stdexcept>
#include <string>

namespace ding {

enum class ErrorCode {
  invalid_argument,     // a value outside its domain (negative size, k > n, ...)
  shape_mismatch,       // tensor shapes that do not fit together
  dtype_mismatch,       // a dtype the op does not accept, or two dtypes that must agree
  device_mismatch,      // tensors on different devices, or not on the stream's device
  aliasing,             // an output overlapping an input where the op forbids it
  out_of_memory,        // an allocation the device could not satisfy
  not_implemented,      // the op has no kernel on this backend
  backend_unavailable,  // a backend unknown or not compiled in, or no device present
  io,                   // a file that cannot be opened or read
  parse,                // a file or string whose contents are malformed
  device_failure,       // the device or its driver reported a failure (the API's message is kept)
  non_finite,           // a computation produced NaN or ±Inf (e.g. a step's logits)
  internal,             // a broken internal invariant (a bug in ding)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace ding
