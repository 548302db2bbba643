#include "check.h"

#include <cstring>
#include <string>

DING_GPU_BEGIN

void throw_api_error(error_t e, const char* what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  const std::string where = std::string(base ? base + 1 : file) + ":" + std::to_string(line);
  throw Error(ErrorCode::device_failure, std::string("gpu: ") + what + " failed: " + error_string(e) + " (" + where + ")");
}

DING_GPU_END
