#include "safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ding/error.h"
#include "ding/models/input_files.h"

namespace ding {

namespace {

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::parse, fmt::format("safetensors {}: {}", path, what));
}

// Safetensors dtype names ↔ ding dtypes; the others exist in the format but not in ding.
constexpr std::pair<const char*, DType> kDtypeNames[] = {{"F32", DType::f32},   {"F16", DType::f16},
                                                         {"BF16", DType::bf16}, {"F8_E4M3", DType::f8e4m3},
                                                         {"I8", DType::i8},     {"I32", DType::i32}};

bool parse_dtype(const std::string& name, DType& out) {
  for (auto [n, d] : kDtypeNames)
    if (name == n) {
      out = d;
      return true;
    }
  return false;
}

// The largest header we accept; real ones are kilobytes to a few megabytes.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

// `bytes` bytes at `offset` of the open file, read (not mapped: a read past a shrunk file's end
// is a short count here, where through a mapping it would be SIGBUS).
std::string read_exactly(int fd, const std::string& path, uint64_t offset, size_t bytes) {
  std::string out(bytes, '\0');
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, out.data() + done, bytes - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(ErrorCode::io, n == 0 ? fmt::format("safetensors {}: shrank while its header was being read", path)
                                        : fmt::format("safetensors {}: read failed: {}", path, std::strerror(errno)));
    done += size_t(n);
  }
  return out;
}

}  // namespace

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StoredTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "] " + std::string(dtype_name(dtype));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  regular_file_size(path);  // before open(): a FIFO would block it
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(ErrorCode::io, fmt::format("safetensors {}: cannot open: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw Error(ErrorCode::io, fmt::format("safetensors {}: not a regular file", path));
  f->size_ = size_t(st.st_size);
  if (f->size_ < 8) bad_file(path, fmt::format("truncated: {} bytes, shorter than the 8-byte header length", f->size_));
  const std::string length = read_exactly(fd, path, 0, 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(length[size_t(i)]);  // little-endian on any host
  if (header_len > f->size_ - 8)
    bad_file(path, fmt::format("header length {} runs past the end of the {}-byte file", header_len, f->size_));
  if (header_len > kMaxHeaderBytes) bad_file(path, fmt::format("header length {} exceeds the 100 MiB limit", header_len));
  const std::string header = read_exactly(fd, path, 8, size_t(header_len));
  // Only tensor data is read through the mapping, and only through mapped_read.
  f->map_ = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    throw Error(ErrorCode::io, fmt::format("safetensors {}: cannot map {} bytes: {}", path, f->size_, std::strerror(errno)));
  }
  const uint8_t* data = static_cast<const uint8_t*>(f->map_) + 8 + header_len;
  const size_t data_size = f->size_ - 8 - size_t(header_len);

  const nlohmann::json j = parse_json(header, path + " (header)", true);
  if (!j.is_object()) bad_file(path, "header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // for the overlap check
  std::vector<std::string> range_names;
  for (const auto& item : j.items()) {
    // Named, not structured bindings: clang before 16 cannot capture those in the lambda below.
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") continue;
    auto field = [&](const char* key) -> const nlohmann::json& {
      if (!entry.is_object() || !entry.contains(key)) bad_file(path, fmt::format("tensor '{}' has no '{}'", name, key));
      return entry.at(key);
    };
    StoredTensor t;
    t.name = name;
    t.file = path;
    t.file_bytes = f->size_;
    const auto& dtype = field("dtype");
    if (!dtype.is_string() || !parse_dtype(dtype.get<std::string>(), t.dtype))
      bad_file(path, fmt::format("tensor '{}' has unsupported dtype {}", name, json_excerpt(dtype)));
    const auto& shape = field("shape");
    if (!shape.is_array() || shape.size() > 8)
      bad_file(path, fmt::format("tensor '{}' has a bad shape {}", name, json_excerpt(shape)));
    uint64_t elements = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) bad_file(path, fmt::format("tensor '{}' has a bad shape {}", name, json_excerpt(shape)));
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 40) || __builtin_mul_overflow(elements, v, &elements))
        bad_file(path, fmt::format("tensor '{}' shape {} overflows", name, json_excerpt(shape)));
      t.shape.push_back(int64_t(v));
    }
    const auto& offsets = field("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      bad_file(path, fmt::format("tensor '{}' has bad data_offsets {}", name, json_excerpt(offsets)));
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size)
      bad_file(path, fmt::format("tensor '{}' data_offsets [{}, {}] fall outside the {}-byte data section", name, begin,
                                 end, data_size));
    uint64_t expected = 0;
    if (__builtin_mul_overflow(elements, uint64_t(dtype_size(t.dtype)), &expected))
      bad_file(path, fmt::format("tensor '{}' shape {} overflows", name, json_excerpt(shape)));
    if (end - begin != expected)
      bad_file(path, fmt::format("tensor '{}' {} needs {} bytes but data_offsets [{}, {}] hold {}", name, t.shape_str(),
                                 expected, begin, end, end - begin));
    t.data = data + begin;
    t.bytes = size_t(expected);
    ranges.push_back({begin, end});
    range_names.push_back(name);
    f->tensors_.emplace(name, std::move(t));
  }
  // Non-empty ranges in order of their start: each must begin at or after the furthest end so far
  // (empty tensors occupy nothing, so they neither overlap nor separate two that do).
  std::vector<size_t> order;
  for (size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].first != ranges[i].second) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  size_t furthest = order.empty() ? 0 : order[0];
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& reach = ranges[furthest];
    const auto& cur = ranges[order[k]];
    if (cur.first < reach.second)
      bad_file(path, fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", range_names[furthest], reach.first,
                                 reach.second, range_names[order[k]], cur.first, cur.second));
    if (cur.second > reach.second) furthest = order[k];
  }
  return f;
}

namespace {

uintptr_t page_size() {
  static const uintptr_t size = uintptr_t(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

// Both are hints: a failure leaves the mapping as it was, which is correct, only larger.
void mapped_will_need(const void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page_size() * page_size();
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  if (bytes != 0) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
}

// Only the pages wholly inside the range: a page it shares with a neighbour that is still to be
// read stays mapped.
void mapped_release(const void* data, size_t bytes) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page_size() - 1) / page_size() * page_size();
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page_size() * page_size();
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

namespace {

// The read a thread is in: its range of mapped bytes and where to resume should a read fault.
struct ReadGuard {
  sigjmp_buf resume;
  uintptr_t begin, end;
};
thread_local ReadGuard* t_read_guard = nullptr;
struct sigaction g_previous_sigbus {};  // zero: SIG_DFL, until install_sigbus_handler fills it

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const ReadGuard* guard = t_read_guard;
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  if (guard != nullptr && info->si_code > 0 && at >= guard->begin && at < guard->end) siglongjmp(t_read_guard->resume, 1);
  // Not a read of ours: what would have happened without this handler.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
  } else {
    // A fault's access runs again on return and now kills; a signal sent by kill() is sent again.
    ::signal(SIGBUS, SIG_DFL);
    if (info->si_code <= 0) ::raise(SIGBUS);
  }
}

// Once per process, on the first mapped read. A handler installed later by the application
// replaces this one; its reads of mappings then fault as before, nothing worse.
void install_sigbus_handler() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &g_previous_sigbus) != 0)
      throw Error(ErrorCode::internal, fmt::format("cannot install the SIGBUS handler: {}", std::strerror(errno)));
    return true;
  }();
  (void)installed;
}

}  // namespace

bool mapped_read_impl(const void* data, size_t bytes, void (*read)(void*), void* context) {
  install_sigbus_handler();
  ReadGuard guard;
  guard.begin = reinterpret_cast<uintptr_t>(data);
  guard.end = guard.begin + bytes;
  ReadGuard* const outer = t_read_guard;  // mapped_read inside read(): the inner range holds until it returns
  // The saved signal mask is what unblocks SIGBUS again after a jump out of the handler.
  if (sigsetjmp(guard.resume, 1) != 0) {
    t_read_guard = outer;
    return false;
  }
  t_read_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  read(context);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_read_guard = outer;
  return true;
}

void throw_mapped_read_failed(const StoredTensor& t) {
  struct stat st {};
  const std::string now = ::stat(t.file.c_str(), &st) == 0 ? fmt::format("is now {} bytes", st.st_size)
                                                            : fmt::format("cannot be found now ({})", std::strerror(errno));
  throw Error(ErrorCode::io, fmt::format("safetensors {}: tensor '{}' {} could not be read from the mapped file: it held {} "
                                         "bytes when opened and {} (truncated or rewritten by another process while loading)",
                                         t.file, t.name, t.shape_str(), t.file_bytes, now));
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

WeightFiles WeightFiles::open_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  WeightFiles w;
  w.dir_ = dir;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index)) {
    nlohmann::json j = parse_json(read_text_file(index.string()), index.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(ErrorCode::parse, fmt::format("{}: no \"weight_map\" object", index.string()));
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw Error(ErrorCode::parse, fmt::format("{}: weight_map['{}'] is not a file name", index.string(), name));
      const std::string shard = file.get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..")
        throw Error(ErrorCode::parse, fmt::format("{}: weight_map['{}'] = '{}' leaves the folder", index.string(), name, shard));
      weight_map[name] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
  } else if (fs::exists(single)) {
    shards.push_back("model.safetensors");
  } else {
    throw Error(ErrorCode::io, fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
  }
  for (const std::string& shard : shards) {
    w.files_.push_back(SafetensorsFile::open((fs::path(dir) / shard).string()));
    for (const auto& [name, t] : w.files_.back()->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || it->second != shard) continue;  // the index names another shard
      }
      if (!w.tensors_.emplace(name, &t).second)
        throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' appears in more than one shard", dir, name));
    }
  }
  for (const auto& [name, shard] : weight_map)
    if (!w.tensors_.count(name))
      throw Error(ErrorCode::parse, fmt::format("{}: index names tensor '{}' in {} but that shard does not hold it", dir, name, shard));
  return w;
}

const StoredTensor& WeightFiles::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(ErrorCode::parse, fmt::format("{}: missing tensor '{}'", dir_, name));
  return *it->second;
}

size_t WeightFiles::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, t] : tensors_) total += t->bytes;
  return total;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<size_t> sizes;
  size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const char* name = nullptr;
    for (auto [n, d] : kDtypeNames)
      if (d == t.dtype) name = n;
    if (name == nullptr)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("write_safetensors {}: tensor '{}' has dtype {}, which safetensors cannot name", path, t.name,
                              dtype_name(t.dtype)));
    size_t bytes = dtype_size(t.dtype);
    for (int64_t extent : t.shape) bytes *= size_t(extent);
    header[t.name] = {{"dtype", name}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw Error(ErrorCode::io, fmt::format("write_safetensors {}: cannot create: {}", path, std::strerror(errno)));
  bool ok = true;
  auto put = [&](const void* data, size_t n) { ok = ok && std::fwrite(data, 1, n, f) == n; };
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));  // little-endian
  put(length, sizeof length);
  put(text.data(), text.size());
  std::vector<char> bytes;
  try {
    for (size_t i = 0; i < tensors.size() && ok; ++i) {
      if (sizes[i] == 0) continue;  // an empty tensor has no bytes to fill
      bytes.assign(sizes[i], 0);
      tensors[i].fill(bytes.data());
      put(bytes.data(), bytes.size());
    }
  } catch (...) {
    std::fclose(f);
    std::remove(path.c_str());
    throw;
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(path.c_str());
    throw Error(ErrorCode::io, fmt::format("write_safetensors {}: write failed: {}", path, std::strerror(errno)));
  }
}

}  // namespace ding
