// Command-line checks the tools share, with messages that name the bound and the value
// (CLI11's own numeric checks print their range as doubles: "not in range 0.000000 to 1.797e308").
#pragma once
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "ding/error.h"

namespace ding::tools {

// An integer ≥ least, written as decimal digits.
inline CLI::Validator at_least(int64_t least) {
  return CLI::Validator(
      [least](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (text.empty() || error != std::errc() || stop != end) return fmt::format("'{}' is not an integer", text);
        return value < least ? fmt::format("must be ≥ {}, got {}", least, value) : "";
      },
      fmt::format("INT ≥ {}", least));
}

// Output that could not be written (a full disk, a closed pipe, > /dev/full) is an error, not a
// success: flushes stdout (C and C++ streams) and throws Error(io) if any write failed.
inline void check_stdout_written() {
  std::cout.flush();
  if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout))
    throw ding::Error(ding::ErrorCode::io, fmt::format("writing the output failed: {}", std::strerror(errno)));
}

}  // namespace ding::tools
