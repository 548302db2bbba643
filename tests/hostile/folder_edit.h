// Editing copies of fixture folders byte by byte, for the hostile-input tests (corpus.cpp,
// tests/models/hostile_files_test.cpp): whole-file reads and writes, unbounded nesting, and a
// safetensors file split into its header text and data section and put back together.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ding::testing::hostile {

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_all(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// `depth` nested arrays around a 1: the shape of the values that overflowed the stack of recursive
// parsers, destructors and error messages.
inline std::string nested_array(int depth) {
  return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']');
}

// The header text as stored (padding included) and the data section after it; write() puts a
// possibly edited header back with its new length.
struct Safetensors {
  std::string header, data;
  explicit Safetensors(const std::filesystem::path& path) {
    const std::string bytes = read_all(path);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    header = bytes.substr(8, n);
    data = bytes.substr(8 + n);
  }
  Safetensors(std::string header_text, size_t data_bytes) : header(std::move(header_text)), data(data_bytes, '\0') {}
  void write(const std::filesystem::path& path) const {
    const uint64_t n = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    write_all(path, bytes + header + data);
  }
};

}  // namespace ding::testing::hostile
