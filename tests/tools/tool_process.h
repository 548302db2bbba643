// The tools as a user runs them: a built binary with arguments, its exit code and its output.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace ding::testing {

struct ToolResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
  std::string stdout_only;
  std::string stderr_only;
};

// Runs `binary args` through the shell (args may quote). Each call has its own stderr file:
// ctest runs tests in parallel processes, and one test may run several tools at once.
inline ToolResult run_tool(const std::string& binary, const std::string& args) {
  static int calls = 0;
  const std::filesystem::path err = std::filesystem::temp_directory_path() /
                                    ("ding_tool_stderr." + std::to_string(getpid()) + "." + std::to_string(calls++) + ".txt");
  ToolResult r;
  const std::string command = binary + " " + args + " 2>" + err.string();
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.stdout_only.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(err);
  r.stderr_only.assign(std::istreambuf_iterator<char>(in), {});
  r.out = r.stdout_only + r.stderr_only;
  std::filesystem::remove(err);
  return r;
}

// Exit code 1 (a reported error; a crash would be ≥ 128) and exactly one line on stderr, the
// tool's `<tool>: error: ...` naming `mention`.
inline void expect_clean_failure(const ToolResult& r, const std::string& tool, const std::string& mention) {
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const std::string prefix = tool + ": error: ";
  EXPECT_EQ(r.stderr_only.rfind(prefix, 0), 0u) << r.out;
  EXPECT_EQ(r.stderr_only.find('\n'), r.stderr_only.size() - 1) << "more than one line: " << r.stderr_only;
  EXPECT_NE(r.out.find(mention), std::string::npos) << "missing '" << mention << "' in: " << r.out;
}

}  // namespace ding::testing
