#include "input_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "ding/error.h"

namespace ding {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

size_t regular_file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(ErrorCode::io, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::io, fmt::format("{}: not a regular file ({})", path, kind_of(st.st_mode)));
  return size_t(st.st_size);
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  const size_t size = regular_file_size(path);
  if (size > max_bytes)
    throw Error(ErrorCode::io, fmt::format("{}: {} bytes, more than the {} a model folder's text file may have", path, size,
                                           max_bytes));
  // O_NONBLOCK: should the path have become a FIFO since the check, open() returns at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(ErrorCode::io, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || size_t(st.st_size) != size) {
    ::close(fd);
    throw Error(ErrorCode::io, fmt::format("{}: changed while being opened", path));
  }
  std::string text(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, text.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorCode::io, n == 0 ? fmt::format("{}: shrank to {} bytes while being read ({} expected)", path, done, size)
                                        : fmt::format("{}: read failed: {}", path, std::strerror(err)));
    }
    done += size_t(n);
  }
  ::close(fd);
  return text;
}

nlohmann::json parse_json(std::string_view text, const std::string& origin, bool unique_keys) {
  using Event = nlohmann::json::parse_event_t;
  // The keys seen in each open object (an empty set stands for an open array).
  std::vector<std::unordered_set<std::string>> open_keys;
  const auto check = [&](int depth, Event event, nlohmann::json& parsed) {
    if (depth > kMaxJsonDepth)
      throw Error(ErrorCode::parse, fmt::format("{}: JSON nested deeper than {} levels", origin, kMaxJsonDepth));
    if (!unique_keys) return true;
    if (event == Event::object_start || event == Event::array_start) open_keys.emplace_back();
    if ((event == Event::object_end || event == Event::array_end) && !open_keys.empty()) open_keys.pop_back();
    if (event == Event::key && !open_keys.empty() && !open_keys.back().insert(parsed.get<std::string>()).second)
      throw Error(ErrorCode::parse, fmt::format("{}: key {} appears twice in one object", origin, json_excerpt(parsed)));
    return true;
  };
  // JSON text holds no raw NUL (inside strings it is \u0000), and the parser would take one for
  // the end of the input, accepting whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw Error(ErrorCode::parse, fmt::format("{}: not valid JSON: a NUL byte at offset {}", origin, nul));
  try {
    return nlohmann::json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::parse, fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

std::string json_excerpt(const nlohmann::json& j, size_t max_chars) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > max_chars) text = text.substr(0, max_chars) + "…";
  return text;
}

}  // namespace ding
