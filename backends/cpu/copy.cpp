// copy on the CPU: the tensors are walked as rows of their contiguous last dimension; each row
// is a memcpy when the dtypes agree and a widen + narrow through f32 registers otherwise.
#include <cstring>
#include <vector>

#include "kernels.h"
#include "simd.h"
#include "strided.h"

namespace ding::cpu {

void copy(Stream&, const ops::CopyArgs& a) {
  const int64_t cols = a.x.dim(-1), rows = a.x.numel() / cols;
  const size_t in_size = dtype_size(a.x.dtype);
  const bool same_dtype = a.x.dtype == a.out.dtype;
#pragma omp parallel if (rows * cols >= (1 << 16))
  {
    std::vector<float> row(same_dtype ? 0 : size_t(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const char* src = row_bytes(a.x, r);
      char* dst = row_bytes_out(a.out, r);
      if (same_dtype) {
        std::memcpy(dst, src, size_t(cols) * in_size);
      } else {
        load_row(row.data(), src, a.x.dtype, cols);
        store_row(dst, a.out.dtype, row.data(), cols);
      }
    }
  }
}

}  // namespace ding::cpu
