// Reading a model folder's files (config.json, generation_config.json, tokenizer files, the
// safetensors index and headers): every reader goes through these. A path must name a regular
// file before anything opens it (open() on a FIFO blocks until a writer comes, i.e. forever), its
// size is bounded before it is read, and JSON is parsed with bounded nesting and exact grammar, so
// no parser, destructor or error message recurses without limit and no trailing bytes pass.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ding {

// The deepest JSON any model file needs is a tokenizer.json pre-tokenizer Sequence (5 levels in the
// wild); 64 leaves room and keeps every recursive walk of a parsed value shallow.
inline constexpr int kMaxJsonDepth = 64;
// Text files of a model folder: tokenizer.json is the largest (a few tens of MB for 150k-token
// vocabularies).
inline constexpr size_t kMaxTextFileBytes = size_t(1) << 30;

// The size of the regular file at `path` (symlinks followed); Error(io) naming the path and what
// is there instead (a directory, a FIFO, a device, nothing) otherwise.
size_t regular_file_size(const std::string& path);
// The whole file at `path`, a regular file of at most max_bytes: Error(io) otherwise, or if it
// changes size while being read.
std::string read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);
// `text` as JSON: Error(parse) naming `origin` for a syntax error, trailing bytes (a NUL
// included), nesting deeper than kMaxJsonDepth, or, with unique_keys, a key twice in one object
// (the parser keeps the last, which would leave a hole where the first one's data was).
nlohmann::json parse_json(std::string_view text, const std::string& origin, bool unique_keys = false);
// A JSON value for an error message: its text cut to max_chars (a bad value may be huge).
std::string json_excerpt(const nlohmann::json& j, size_t max_chars = 60);

}  // namespace ding
