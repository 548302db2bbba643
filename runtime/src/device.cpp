// Buffer ownership, the backend registry and Device::open.
#include "ding/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "ding/error.h"

namespace ding {

void register_builtin_backends();  // backends/builtin.cpp: the backends compiled into this build

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (data_ && device_) device_->free(data_, bytes_);
    device_ = std::exchange(o.device_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) release_(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    release_ = std::exchange(o.release_, nullptr);
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  if (data_) release_(data_);
}

HostBuffer Device::alloc_staging(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr)
    throw Error(ErrorCode::out_of_memory, fmt::format("{}: cannot allocate {} bytes of host memory for staging", name(), bytes));
  return HostBuffer(p, bytes, [](void* data) { std::free(data); });
}

void Stream::begin_capture() {
  throw Error(ErrorCode::not_implemented, fmt::format("{}: streams of this backend cannot record graphs", device().name()));
}

std::unique_ptr<Graph> Stream::end_capture() {
  throw Error(ErrorCode::not_implemented, fmt::format("{}: streams of this backend cannot record graphs", device().name()));
}

namespace {

class HostClockTimer final : public StreamTimer {
 public:
  explicit HostClockTimer(Stream& stream) : stream_(stream) {}
  void start() override {
    stream_.synchronize();
    start_ = std::chrono::steady_clock::now();
  }
  void stop() override {
    stream_.synchronize();
    stop_ = std::chrono::steady_clock::now();
  }
  double seconds() override { return std::chrono::duration<double>(stop_ - start_).count(); }

 private:
  Stream& stream_;
  std::chrono::steady_clock::time_point start_, stop_;
};

}  // namespace

std::unique_ptr<StreamTimer> Stream::make_timer() { return std::make_unique<HostClockTimer>(*this); }

Buffer::~Buffer() {
  if (data_ && device_) device_->free(data_, bytes_);
}

Tensor Buffer::as(DType dtype, std::initializer_list<int64_t> shape) const {
  Tensor t = Tensor::view(data_, device_, dtype, shape);
  if (t.nbytes() > bytes_)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("Buffer::as: {} needs {} bytes, the buffer holds {}", t.shape_str(), t.nbytes(), bytes_));
  return t;
}

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendInfo> backends;  // registration order = preference order for "auto"
  std::map<std::string, std::unique_ptr<Device>> open;
  bool builtins_registered = false;

  void ensure_builtins() {
    if (!builtins_registered) {
      builtins_registered = true;
      register_builtin_backends();
    }
  }
  const BackendInfo* find(std::string_view name) const {
    for (const BackendInfo& b : backends)
      if (b.name == name) return &b;
    return nullptr;
  }
};

Registry& the_registry() {
  static Registry r;
  return r;
}

// Backends ding knows of, whether or not this build has them, for a precise error.
bool is_known_backend(std::string_view name) {
  for (std::string_view known : {"cpu", "ref", "cuda", "hip", "kokkos"})
    if (name == known) return true;
  return false;
}

}  // namespace

namespace registry {

void add(BackendInfo info) { the_registry().backends.push_back(std::move(info)); }

std::vector<std::string> compiled_backends() {
  Registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.ensure_builtins();
  std::vector<std::string> names;
  for (const BackendInfo& b : r.backends) names.push_back(b.name);
  return names;
}

bool is_available(std::string_view backend) {
  Registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.ensure_builtins();
  const BackendInfo* b = r.find(backend);
  return b && b->available();
}

}  // namespace registry

Device& Device::open(std::string_view spec) {
  Registry& r = the_registry();
  std::lock_guard lock(r.mutex);
  r.ensure_builtins();
  std::string backend(spec);
  int index = 0;
  if (spec == "auto") {
    backend.clear();
    for (const BackendInfo& b : r.backends)
      if (b.name != "ref" && b.available()) { backend = b.name; break; }
    if (backend.empty()) throw Error(ErrorCode::backend_unavailable, "Device::open: no backend is available");
  } else if (auto colon = spec.find(':'); colon != std::string_view::npos) {
    backend = std::string(spec.substr(0, colon));
    const std::string digits(spec.substr(colon + 1));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 4)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("Device::open: '{}' has a bad device index (expected e.g. \"cuda:0\")", spec));
    index = std::stoi(digits);
  }
  const std::string key = fmt::format("{}:{}", backend, index);
  if (auto it = r.open.find(key); it != r.open.end()) return *it->second;
  const BackendInfo* info = r.find(backend);
  if (info == nullptr) {
    std::string compiled;
    for (const BackendInfo& b : r.backends) compiled += (compiled.empty() ? "" : ", ") + b.name;
    if (is_known_backend(backend))
      throw Error(ErrorCode::backend_unavailable,
                  fmt::format("Device::open: backend '{}' is not compiled into this build (compiled: {})", backend, compiled));
    throw Error(ErrorCode::backend_unavailable,
                fmt::format("Device::open: unknown backend '{}' (compiled: {})", backend, compiled));
  }
  if (!info->available())
    throw Error(ErrorCode::backend_unavailable, fmt::format("Device::open: backend '{}' has no device on this machine", backend));
  auto [it, inserted] = r.open.emplace(key, info->create(index));
  return *it->second;
}

void upload(Stream& stream, const Tensor& dst, const void* host, size_t bytes) {
  if (bytes != dst.nbytes() || !dst.is_contiguous())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("upload: {} bytes into {} (needs {} contiguous bytes)", bytes, dst.shape_str(), dst.nbytes()));
  dst.device->copy_to_device(stream, dst.data, host, bytes);
  stream.synchronize();
}

void download(Stream& stream, void* host, const Tensor& src, size_t bytes) {
  if (bytes != src.nbytes() || !src.is_contiguous())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("download: {} bytes from {} (needs {} contiguous bytes)", bytes, src.shape_str(), src.nbytes()));
  src.device->copy_to_host(stream, host, src.data, bytes);
  stream.synchronize();
}

}  // namespace ding
