// copy: element by element through both tensors' strides.
#include <array>

#include "reference.h"

namespace ding::reference {

void copy(Stream&, const ops::CopyArgs& a) {
  std::array<int64_t, kMaxRank> index{};
  const int64_t n = a.x.numel();
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, x_off = 0, out_off = 0;
    for (int d = a.x.rank - 1; d >= 0; --d) {
      index[d] = rest % a.x.shape[d];
      rest /= a.x.shape[d];
      x_off += index[d] * a.x.strides[d];
      out_off += index[d] * a.out.strides[d];
    }
    store(a.out, out_off, load(a.x, x_off));
  }
}

}  // namespace ding::reference
