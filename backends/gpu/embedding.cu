// embedding on the GPU: out[b, t] = token_table[ids[b, t]] (+ position_table[pos(b, t)]), one
// row of C elements per group of threads along x, moved in V-element vectors (16 bytes on the
// widest side) when C and every base pointer allow it.
// An id or a position outside its table makes the host backends raise an Error before writing;
// a kernel cannot raise, so it writes zeros to that row of out instead and reads nothing
// outside the tables.
#include "access.cuh"
#include "check.h"
#include "kernels.h"
#include "stream.h"

DING_GPU_BEGIN
namespace {

constexpr int kThreads = 256;

struct EmbeddingShape {
  int64_t rows, T, C;          // rows = B·T, one per (b, t)
  int64_t vocab, n_positions;  // rows of token_table and position_table
  int64_t position_offset;     // pos(b, t) = position_offset + t when positions is null
};

// out [rows, C]; token_table [vocab, C]; position_table [n_positions, C] (p null: no position
// term); ids, positions (null: position_offset + t) [rows]. All contiguous.
template <int V, class Out, class Tab>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(Out out, Tab token_table, Tab position_table, const int32_t* ids, const int32_t* positions,
                     EmbeddingShape shape) {
  const int64_t C = shape.C;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; r < shape.rows;
       r += int64_t(gridDim.x) * blockDim.y) {
    const int64_t id = ids[r];
    const int64_t pos = positions ? int64_t(positions[r]) : shape.position_offset + r % shape.T;
    const bool with_position = position_table.p != nullptr;
    const bool valid = id >= 0 && id < shape.vocab && (!with_position || (pos >= 0 && pos < shape.n_positions));
    for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
      float v[V] = {};
      if (valid) {
        token_table.template load<V>(id * C + c, v);
        if (with_position) {
          float p[V];
          position_table.template load<V>(pos * C + c, p);
#pragma unroll
          for (int j = 0; j < V; ++j) v[j] += p[j];
        }
      }
      out.template store<V>(r * C + c, v);
    }
  }
}

template <int V, class Out, class Tab>
void launch_embedding(GpuStream& s, Out out, Tab token_table, Tab position_table, const int32_t* ids,
                      const int32_t* positions, const EmbeddingShape& shape) {
  // Threads per row: a power of two covering the row's vectors (at least 32, at most the
  // block); the rest of the block takes more rows.
  unsigned x = 32;
  while (x < unsigned(kThreads) && int64_t(x) * V < shape.C) x *= 2;
  const dim3 block(x, unsigned(kThreads) / x);
  const unsigned grid = unsigned(std::min<int64_t>(ceil_div(shape.rows, block.y), int64_t(s.props().sm_count) * 16));
  embedding_kernel<V><<<grid, block, 0, s.handle()>>>(out, token_table, position_table, ids, positions, shape);
  DING_GPU_CHECK_LAUNCH("embedding_kernel");
}

}  // namespace

void embedding(Stream& stream, const ops::EmbeddingArgs& a) {
  GpuStream& s = gpu_stream(stream);
  const ops::EmbeddingParams& p = a.params;
  const Tensor& position_table = p.position_table;
  const EmbeddingShape shape{a.ids.numel(),
                             a.ids.dim(1),
                             a.token_table.dim(1),
                             a.token_table.dim(0),
                             position_table.defined() ? position_table.dim(0) : 0,
                             p.position_offset};
  const int32_t* ids = static_cast<const int32_t*>(a.ids.data);
  const int32_t* positions = p.positions.defined() ? static_cast<const int32_t*>(p.positions.data) : nullptr;
  // Typed when both tables share a dtype (or there is no position table); any other mix
  // element by element through AnyFloat.
  if (position_table.defined() && position_table.dtype != a.token_table.dtype) {
    launch_embedding<1>(s, any_float(a.out), any_float(a.token_table), any_float(position_table), ids, positions,
                        shape);
    return;
  }
  with_float_type(a.out.dtype, [&](auto out_tag) {
    with_float_type(a.token_table.dtype, [&](auto table_tag) {
      using O = decltype(out_tag);
      using E = decltype(table_tag);
      // Rows start at multiples of C, so C % V == 0 and aligned bases keep every vector aligned.
      constexpr int V = 16 / int(sizeof(O) > sizeof(E) ? sizeof(O) : sizeof(E));
      const bool vectors = shape.C % V == 0 && aligned_for(a.out, V) && aligned_for(a.token_table, V) &&
                           aligned_for(position_table, V);
      if (vectors)
        launch_embedding<V>(s, typed<O>(a.out), typed<E>(a.token_table), typed<E>(position_table), ids, positions,
                            shape);
      else
        launch_embedding<1>(s, typed<O>(a.out), typed<E>(a.token_table), typed<E>(position_table), ids, positions,
                            shape);
    });
  });
}

DING_GPU_END
