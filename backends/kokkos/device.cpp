#include "device.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "../../runtime/src/host_device.h"
#include "ding/error.h"
#include "elements.h"

namespace ding::kokkos {

namespace {

using DeviceBytes = Kokkos::View<char*, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

constexpr bool kHostAccessible = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;

// Set once ding's own finalize has run: from then on Kokkos must not be called.
std::atomic<bool> finalized{false};

void finalize_at_exit() {
  finalized = true;
  Kokkos::finalize();
}

void initialize_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (Kokkos::is_initialized()) return;  // the program's own Kokkos: it finalises too
    int argc = 1;
    char name[] = "ding";
    char* argv[] = {name, nullptr};
    Kokkos::initialize(argc, argv);
    // Registered after the device registry's static was built, so it runs before the registry's
    // destructor frees the devices (and whatever buffers static objects still hold).
    std::atexit(finalize_at_exit);
  });
}

Caps kokkos_caps() {
  const int concurrency = int(Exec().concurrency());
  Caps c;
  if (kHostAccessible) c = host_caps("kokkos", concurrency);
  c.backend = "kokkos";
  c.name = fmt::format("Kokkos {}.{}.{} on {} ({} threads)", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
                       KOKKOS_VERSION % 100, Exec::name(), concurrency);
  c.compute_units = concurrency;
  c.host_accessible = kHostAccessible;
  return c;
}

void check_stream(Stream& s, const KokkosDevice& device, const char* what) {
  if (&s.device() != &device)
    throw Error(ErrorCode::invalid_argument, fmt::format("kokkos: {} on a stream of another device", what));
}

}  // namespace

Device& KokkosStream::device() { return device_; }

void KokkosStream::synchronize() { Exec().fence(); }

KokkosDevice::KokkosDevice() {
  initialize_once();
  caps_ = kokkos_caps();
}

Buffer KokkosDevice::alloc(size_t bytes) {
  if (kHostAccessible)
    if (const size_t available = free_bytes(); bytes > available)
      throw Error(ErrorCode::out_of_memory,
                  fmt::format("kokkos: cannot allocate {} bytes ({:.2f} GiB): {} bytes ({:.2f} GiB) available", bytes,
                              double(bytes) / (1 << 30), available, double(available) / (1 << 30)));
  try {
    return Buffer(this, Kokkos::kokkos_malloc<Memory>("ding::Buffer", std::max<size_t>(bytes, 1)), bytes);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("kokkos: cannot allocate {} bytes in {}: {}", bytes, Memory::name(), e.what()));
  }
}

size_t KokkosDevice::free_bytes() const {
  // Kokkos has no portable query of a GPU's free memory: allocations there fail by themselves.
  return kHostAccessible ? host_free_bytes(caps_.memory_bytes) : std::numeric_limits<size_t>::max();
}

void KokkosDevice::free(void* data, size_t) {
  if (data != nullptr && !finalized) Kokkos::kokkos_free<Memory>(data);
}

void KokkosDevice::copy_to_device(Stream& s, void* dst, const void* src, size_t bytes) {
  check_stream(s, *this, "copy_to_device");
  Kokkos::deep_copy(DeviceBytes(static_cast<char*>(dst), bytes), HostBytes(const_cast<char*>(static_cast<const char*>(src)), bytes));
}

void KokkosDevice::copy_to_host(Stream& s, void* dst, const void* src, size_t bytes) {
  check_stream(s, *this, "copy_to_host");
  Kokkos::deep_copy(HostBytes(static_cast<char*>(dst), bytes), DeviceBytes(const_cast<char*>(static_cast<const char*>(src)), bytes));
}

void KokkosDevice::copy_within(Stream& s, void* dst, const void* src, size_t bytes) {
  check_stream(s, *this, "copy_within");
  Kokkos::deep_copy(DeviceBytes(static_cast<char*>(dst), bytes), DeviceBytes(const_cast<char*>(static_cast<const char*>(src)), bytes));
}

void KokkosDevice::fill_bytes(Stream& s, void* dst, uint8_t value, size_t bytes) {
  check_stream(s, *this, "fill_bytes");
  Kokkos::deep_copy(DeviceBytes(static_cast<char*>(dst), bytes), char(value));
}

Buffer temporary(Stream& stream, size_t bytes) { return stream.device().alloc(bytes); }

}  // namespace ding::kokkos
