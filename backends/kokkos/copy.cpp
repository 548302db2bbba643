// copy: out[i…] = x[i…] through both tensors' strides, one element per work item. Equal dtypes
// copy the stored bits (NaN payloads included); others convert through f32.
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void copy(Stream&, const ops::CopyArgs& a) {
  const Elements out = elements(a.out), x = elements(a.x);
  const Strides out_strides = strides(a.out), x_strides = strides(a.x);
  Strides shape;
  for (int d = 0; d < a.x.rank; ++d) shape.s[d] = a.x.shape[d];
  const int rank = a.x.rank;
  const size_t same_size = a.out.dtype == a.x.dtype ? dtype_size(a.x.dtype) : 0;
  Kokkos::parallel_for("ding::copy", Range(0, a.x.numel()), KOKKOS_LAMBDA(const int64_t flat) {
    int64_t rest = flat, x_at = 0, out_at = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t i = rest % shape[d];
      rest /= shape[d];
      x_at += i * x_strides[d];
      out_at += i * out_strides[d];
    }
    if (same_size == 4)
      static_cast<uint32_t*>(out.data)[out_at] = static_cast<const uint32_t*>(x.data)[x_at];
    else if (same_size == 2)
      static_cast<uint16_t*>(out.data)[out_at] = static_cast<const uint16_t*>(x.data)[x_at];
    else
      out.store(out_at, x.load(x_at));
  });
}

}  // namespace ding::kokkos
