#include "host_device.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "ding/error.h"

namespace ding {

Device& HostStream::device() { return device_; }

HostDevice::HostDevice(Caps caps, const ops::Kernels& kernels) : caps_(std::move(caps)), kernels_(kernels) {}

size_t host_free_bytes(size_t fallback) {
  std::ifstream in("/proc/meminfo");
  size_t available_kb = 0, swap_free_kb = 0;
  bool found = false;
  for (std::string key; in >> key;) {
    size_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") available_kb = kb, found = true;
    if (key == "SwapFree:") swap_free_kb = kb;
    in.ignore(64, '\n');
  }
  return found ? (available_kb + swap_free_kb) * 1024 : fallback;
}

size_t HostDevice::free_bytes() const { return host_free_bytes(caps_.memory_bytes); }

Buffer HostDevice::alloc(size_t bytes) {
  // Host memory is committed when touched, not when allocated: without this check an allocation
  // past what the machine has "succeeds" and the process dies later.
  if (const size_t available = free_bytes(); bytes > available)
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot allocate {} bytes ({:.2f} GiB) of host memory: {} bytes ({:.2f} GiB) available",
                            caps_.backend, bytes, double(bytes) / (1 << 30), available, double(available) / (1 << 30)));
  // Buffers of 2 MiB or more (weights, quantized or not, KV caches, long prompts' activations)
  // start on a 2 MiB boundary and are asked for in transparent huge pages: decode streams them
  // whole, and with 4 KiB pages each 4 KiB of a stream is a TLB miss (and each page a fault when
  // first written: most of a CPU load's time otherwise). One core streams an i8 GEMV ~40 %
  // faster (docs/PERFORMANCE.md). A hint: where the kernel declines, the pages stay small.
  // Smaller buffers: 64 bytes, a cache line and a full AVX-512 vector.
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(alignment, rounded);
  if (p != nullptr && alignment == kHugePage) (void)madvise(p, rounded, MADV_HUGEPAGE);
  if (p == nullptr)
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot allocate {} bytes of host memory ({} bytes physical)", caps_.backend, bytes, caps_.memory_bytes));
  return Buffer(this, p, bytes);
}

void HostDevice::free(void* data, size_t) { std::free(data); }

void HostDevice::copy_to_device(Stream&, void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void HostDevice::copy_to_host(Stream&, void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void HostDevice::copy_within(Stream&, void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void HostDevice::fill_bytes(Stream&, void* dst, uint8_t value, size_t bytes) { std::memset(dst, value, bytes); }

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

// Size of the largest cache level reported by sysfs for cpu0 ("32768K" style values).
size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", index));
    std::string text;
    if (!(in >> text)) continue;
    size_t value = std::strtoull(text.c_str(), nullptr, 10);
    if (text.back() == 'K') value <<= 10;
    if (text.back() == 'M') value <<= 20;
    best = std::max(best, value);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) best = size_t(l3);
  }
#endif
  return best;
}

}  // namespace

Caps host_caps(std::string backend, int threads) {
  Caps c;
  c.backend = std::move(backend);
  c.name = fmt::format("{} ({} threads)", cpu_model_name(), threads);
  c.memory_bytes = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  c.compute_units = threads;
  c.llc_bytes = last_level_cache_bytes();
  c.host_accessible = true;
  return c;
}

}  // namespace ding
