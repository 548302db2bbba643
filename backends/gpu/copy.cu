// copy on the GPU: one warp-strided pass per row of the contiguous last dimension. Same dtype
// moves raw bytes (16 at a time when the rows allow it); different float dtypes widen to f32
// and round to nearest even.
#include "check.h"
#include "elements.cuh"
#include "kernels.h"
#include "stream.h"
#include "strided.cuh"

DING_GPU_BEGIN
namespace {

// Unit: the widest access every row start and row length is a multiple of (16, 4, 2 or 1 bytes).
template <class Unit>
__global__ void copy_bytes_kernel(char* out, RowLayout out_rows, const char* x, RowLayout x_rows, int64_t rows,
                                  int64_t units_per_row, int64_t elem_bytes) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < rows; r += int64_t(gridDim.x) * blockDim.y) {
    Unit* dst = reinterpret_cast<Unit*>(out + row_offset(out_rows, r) * elem_bytes);
    const Unit* src = reinterpret_cast<const Unit*>(x + row_offset(x_rows, r) * elem_bytes);
    for (int64_t i = threadIdx.x; i < units_per_row; i += blockDim.x) dst[i] = src[i];
  }
}

template <class Out, class In>
__global__ void copy_convert_kernel(Out* out, RowLayout out_rows, const In* x, RowLayout x_rows, int64_t rows,
                                    int64_t cols) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; r < rows; r += int64_t(gridDim.x) * blockDim.y) {
    Out* dst = out + row_offset(out_rows, r);
    const In* src = x + row_offset(x_rows, r);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = from_float<Out>(to_float(src[i]));
  }
}

}  // namespace

void copy(Stream& stream, const ops::CopyArgs& a) {
  const int64_t cols = a.x.dim(-1), rows = a.x.numel() / std::max<int64_t>(cols, 1);
  if (rows == 0 || cols == 0) return;
  GpuStream& s = gpu_stream(stream);
  const RowLayout out_rows = row_layout(a.out), x_rows = row_layout(a.x);
  if (a.x.dtype == a.out.dtype) {
    const int64_t elem = int64_t(dtype_size(a.x.dtype)), row_bytes = cols * elem;
    // The unit must divide every row's start: check the base pointers and every stride.
    int64_t align = 16;
    auto fits = [&](const Tensor& t) {
      if (reinterpret_cast<uintptr_t>(t.data) % uintptr_t(align) != 0 || row_bytes % align != 0) return false;
      for (int d = 0; d + 1 < t.rank; ++d)
        if ((t.strides[d] * elem) % align != 0) return false;
      return true;
    };
    while (align > elem && !(fits(a.x) && fits(a.out))) align /= 2;
    const int64_t units = row_bytes / align;
    const dim3 block = row_block(units);
    const unsigned grid = row_grid(s, rows, block);
    with_byte_unit(align, [&](auto unit) {
      using Unit = decltype(unit);
      copy_bytes_kernel<Unit><<<grid, block, 0, s.handle()>>>(static_cast<char*>(a.out.data), out_rows,
                                                              static_cast<const char*>(a.x.data), x_rows, rows, units, elem);
    });
    DING_GPU_CHECK_LAUNCH("copy_bytes_kernel");
    return;
  }
  const dim3 block = row_block(cols);
  const unsigned grid = row_grid(s, rows, block);
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.x.dtype, [&](auto in_tag) {
      using Out = decltype(out_tag);
      using In = decltype(in_tag);
      copy_convert_kernel<Out, In><<<grid, block, 0, s.handle()>>>(static_cast<Out*>(a.out.data), out_rows,
                                                                   static_cast<const In*>(a.x.data), x_rows, rows, cols);
    });
  });
  DING_GPU_CHECK_LAUNCH("copy_convert_kernel");
}

DING_GPU_END
