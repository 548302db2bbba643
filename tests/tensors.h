// Tensors: owns the buffers of one test's small hand-written tensors on one device, with typed
// upload and read-back. (Random parity inputs come from testing::CaseRun instead.)
#pragma once
#include <initializer_list>
#include <vector>

#include "ding/ding.h"

namespace ding::testing {

class Tensors {
 public:
  explicit Tensors(Device& device) : device_(device) {}

  Tensor make(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::view(nullptr, &device_, dtype, shape);
    buffers_.push_back(device_.alloc(t.nbytes()));
    t.data = buffers_.back().data();
    return t;
  }
  // A tensor holding `v`, whose element type must match `dtype` byte for byte.
  template <class T>
  Tensor from(DType dtype, std::initializer_list<int64_t> shape, const std::vector<T>& v) {
    Tensor t = make(dtype, shape);
    upload(stream(), t, v.data(), t.nbytes());
    return t;
  }
  Tensor f32(std::initializer_list<int64_t> shape, const std::vector<float>& v) { return from(DType::f32, shape, v); }
  Tensor i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v) { return from(DType::i32, shape, v); }
  template <class T>
  std::vector<T> read(const Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.numel()));
    download(stream(), v.data(), t, t.nbytes());
    return v;
  }
  Stream& stream() { return device_.default_stream(); }

 private:
  Device& device_;
  std::vector<Buffer> buffers_;
};

}  // namespace ding::testing
