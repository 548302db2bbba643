// Embedding lookup on the CPU. Ids and positions are checked in one serial pass first (an
// exception must not leave an OpenMP region, and a bad index should leave out untouched); then
// OpenMP over tokens copies rows: a plain memcpy when the table already has out's dtype and no
// position row is added, otherwise through an f32 scratch row.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "ding/error.h"
#include "kernels.h"
#include "simd.h"
#include "vec_math.h"

namespace ding::cpu {

namespace {

// out-of-range ids and positions, named by their [b, t] index and value.
void check_indices(const ops::EmbeddingArgs& a) {
  const int64_t T = a.ids.dim(1), tokens = a.ids.numel(), V = a.token_table.dim(0);
  const int32_t* ids = a.ids.ptr<int32_t>();
  for (int64_t i = 0; i < tokens; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw Error(ErrorCode::invalid_argument, fmt::format("embedding: ids[{}, {}] = {} is outside the token table's {} rows",
                                                           i / T, i % T, ids[i], V));
  const ops::EmbeddingParams& p = a.params;
  if (!p.position_table.defined() || !p.positions.defined()) return;  // offsets were checked by the front end
  const int64_t P = p.position_table.dim(0);
  const int32_t* positions = p.positions.ptr<int32_t>();
  for (int64_t i = 0; i < tokens; ++i)
    if (positions[i] < 0 || positions[i] >= P)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("embedding: position of [{}, {}] = {} is outside the position table's {} rows", i / T,
                              i % T, positions[i], P));
}

const char* row_of(const Tensor& table, int64_t row) {
  return static_cast<const char*>(table.data) + row * table.dim(1) * int64_t(dtype_size(table.dtype));
}


}  // namespace

void embedding(Stream&, const ops::EmbeddingArgs& a) {
  check_indices(a);
  const ops::EmbeddingParams& p = a.params;
  const int64_t T = a.ids.dim(1), tokens = a.ids.numel(), C = a.token_table.dim(1);
  const int32_t* ids = a.ids.ptr<int32_t>();
  const int32_t* positions = p.positions.defined() ? p.positions.ptr<int32_t>() : nullptr;
  const bool with_positions = p.position_table.defined();
  const size_t out_row_bytes = size_t(C) * dtype_size(a.out.dtype);
  char* out = static_cast<char*>(a.out.data);
  if (!with_positions && a.token_table.dtype == a.out.dtype) {
#pragma omp parallel for schedule(static) if (tokens * C >= (1 << 14))
    for (int64_t i = 0; i < tokens; ++i) std::memcpy(out + i * out_row_bytes, row_of(a.token_table, ids[i]), out_row_bytes);
    return;
  }
#pragma omp parallel if (tokens * C >= (1 << 14))
  {
    std::vector<float> row(static_cast<size_t>(C));  // one scratch row per thread
#pragma omp for schedule(static)
    for (int64_t i = 0; i < tokens; ++i) {
      load_row(row.data(), row_of(a.token_table, ids[i]), a.token_table.dtype, C);
      if (with_positions) {
        const int64_t pos = positions ? positions[i] : p.position_offset + i % T;
        add_row(row.data(), row_of(p.position_table, pos), p.position_table.dtype, C);
      }
      store_row(out + i * out_row_bytes, a.out.dtype, row.data(), C);
    }
  }
}

}  // namespace ding::cpu
