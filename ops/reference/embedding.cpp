// Reference embedding lookup: out[b, t, :] = token_table[ids[b, t], :] (+ position_table[pos(b, t), :]),
// pos(b, t) = positions[b, t] or position_offset + t — GPT-2's wte(input_ids) + wpe(position_ids)
// (HF transformers: GPT2Model.forward). Every id and position is checked before anything is
// written, so a bad index leaves out untouched and raises Error(invalid_argument).
#include <fmt/format.h>

#include "ding/error.h"
#include "reference.h"

namespace ding::reference {

namespace {

int64_t position_of(const ops::EmbeddingArgs& a, int64_t b, int64_t t) {
  const ops::EmbeddingParams& p = a.params;
  return p.positions.defined() ? int64_t(load(p.positions, offset(p.positions, {b, t}))) : p.position_offset + t;
}

}  // namespace

void embedding(Stream&, const ops::EmbeddingArgs& a) {
  const int64_t B = a.ids.dim(0), T = a.ids.dim(1), V = a.token_table.dim(0), C = a.token_table.dim(1);
  const Tensor& position_table = a.params.position_table;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = int64_t(load(a.ids, offset(a.ids, {b, t})));
      if (id < 0 || id >= V)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("embedding: ids[{}, {}] = {} is outside the token table's {} rows", b, t, id, V));
      if (!position_table.defined()) continue;
      const int64_t pos = position_of(a, b, t);
      if (pos < 0 || pos >= position_table.dim(0))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("embedding: position of [{}, {}] = {} is outside the position table's {} rows", b, t,
                                pos, position_table.dim(0)));
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = int64_t(load(a.ids, offset(a.ids, {b, t})));
      for (int64_t c = 0; c < C; ++c) {
        double v = load(a.token_table, offset(a.token_table, {id, c}));
        if (position_table.defined()) v += load(position_table, offset(position_table, {position_of(a, b, t), c}));
        store(a.out, offset(a.out, {b, t, c}), v);
      }
    }
}

}  // namespace ding::reference
