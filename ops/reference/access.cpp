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

}  // namespace ding::reference
