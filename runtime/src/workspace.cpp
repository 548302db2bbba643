#include "ding/workspace.h"

#include <fmt/format.h>

#include "ding/error.h"

namespace ding {

Workspace::Workspace(Device& device, size_t bytes) : buffer_(device.alloc(bytes)) {}

void* Workspace::take_bytes(size_t bytes, size_t align) {
  // Align the address, not the offset: the buffer itself may be only 64-byte aligned.
  const auto base = reinterpret_cast<uintptr_t>(buffer_.data());
  const size_t start = size_t((base + used_ + align - 1) / align * align - base);
  if (buffer_.data() == nullptr || start + bytes > buffer_.size())
    throw Error(ErrorCode::out_of_memory, fmt::format("workspace: {} bytes requested, {} of {} bytes free", bytes,
                                                      buffer_.size() - std::min(used_, buffer_.size()), buffer_.size()));
  used_ = start + bytes;
  return static_cast<char*>(buffer_.data()) + start;
}

Tensor Workspace::take(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::view(nullptr, buffer_.device(), dtype, shape);
  t.data = take_bytes(t.nbytes());
  return t;
}

}  // namespace ding
