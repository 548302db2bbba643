// Element access for the reference kernels: every dtype read as double, written rounded,
// through a tensor's strides.
#include "reference.h"

namespace ding::reference {

double load(const Tensor& t, int64_t i) { return load_element(t.data, t.dtype, i); }

void store(const Tensor& t, int64_t i, double value) { store_element(t.data, t.dtype, i, value); }

int64_t offset(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t o = 0, d = 0;
  for (int64_t i : index) o += i * t.strides[d++];
  return o;
}

int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t o = 0;
  for (int d = t.rank - 2; d >= 0; --d) {
    o += (r % t.shape[d]) * t.strides[d];
    r /= t.shape[d];
  }
  return o;
}

}  // namespace ding::reference
