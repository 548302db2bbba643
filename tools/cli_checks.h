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
#include <optional>
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

// The tools' one error line: `<tool>: error: message` on stderr, a multi-line message (CLI11's may
// span several) folded into one; returns the exit status, 1. stdout is flushed first, so the line
// comes after anything already printed.
inline int fail(const char* tool, std::string message) {
  std::fflush(stdout);
  for (char& c : message)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "%s: error: %s\n", tool, message.c_str());
  return 1;
}

// app.parse with the tools' conventions: --help and --version print and exit 0 (CLI11's own exit),
// a bad command line is fail(tool, …). Returns the exit status when the tool should stop here,
// nothing when the command line parsed and it goes on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const char* tool) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(tool, e.what());
  }
  return std::nullopt;
}

}  // namespace ding::tools
