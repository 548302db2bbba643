// Workspace: a bump arena over one Buffer, sized at load so hot paths never allocate.
#pragma once
#include <cstddef>

#include "ding/device.h"

namespace ding {

class Workspace {
 public:
  Workspace() = default;
  Workspace(Device& device, size_t bytes);

  // Aligned scratch tensor; throws Error(out_of_memory) naming the shortfall if it does not fit.
  Tensor take(DType dtype, std::initializer_list<int64_t> shape);
  void* take_bytes(size_t bytes, size_t align = 256);
  void reset() { used_ = 0; }  // everything taken since is invalid afterwards
  size_t used() const { return used_; }
  size_t capacity() const { return buffer_.size(); }
  Device* device() const { return buffer_.device(); }

 private:
  Buffer buffer_;
  size_t used_ = 0;
};

}  // namespace ding
