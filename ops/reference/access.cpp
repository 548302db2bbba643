// Element access for the reference kernels: every dtype read as double, written rounded.
#include <cstring>

#include "reference.h"

namespace ding::reference {

double load(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data) + i * int64_t(dtype_size(t.dtype));
  switch (t.dtype) {
    case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::f16: { f16 v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::bf16: { bf16 v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::f8e4m3: { f8e4m3 v; std::memcpy(&v, p, 1); return f8e4m3_to_f32(v); }
    case DType::i8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  }
  return 0;
}

void store(const Tensor& t, int64_t i, double value) {
  char* p = static_cast<char*>(t.data) + i * int64_t(dtype_size(t.dtype));
  switch (t.dtype) {
    case DType::f32: { float v = float(value); std::memcpy(p, &v, 4); break; }
    case DType::f16: { f16 v = f32_to_f16(float(value)); std::memcpy(p, &v, 2); break; }
    case DType::bf16: { bf16 v = f32_to_bf16(float(value)); std::memcpy(p, &v, 2); break; }
    case DType::f8e4m3: { f8e4m3 v = f32_to_f8e4m3(float(value)); std::memcpy(p, &v, 1); break; }
    case DType::i8: { int8_t v = int8_t(value); std::memcpy(p, &v, 1); break; }
    case DType::i32: { int32_t v = int32_t(value); std::memcpy(p, &v, 4); break; }
  }
}

int64_t offset(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t o = 0, d = 0;
  for (int64_t i : index) o += i * t.strides[d++];
  return o;
}

}  // namespace ding::reference
