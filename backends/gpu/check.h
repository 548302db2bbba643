// Host-side checks of every GPU API call and kernel launch: failures become ding::Error carrying
// the API's own message, the call, and file:line.
#pragma once
#include <string>

#include "ding/error.h"
#include "vendor.h"

DING_GPU_BEGIN

[[noreturn]] void throw_api_error(error_t e, const char* what, const char* file, int line);

inline void check(error_t e, const char* what, const char* file, int line) {
  if (e != success) throw_api_error(e, what, file, line);
}

DING_GPU_END

#define DING_GPU_CHECK(call) ::ding::gpu::check((call), #call, __FILE__, __LINE__)
// After every <<<...>>>: a bad configuration shows up here, a fault inside the kernel at the
// next synchronizing call (which is also checked).
#define DING_GPU_CHECK_LAUNCH(kernel) ::ding::gpu::check(::ding::gpu::get_last_error(), "launch of " kernel, __FILE__, __LINE__)
