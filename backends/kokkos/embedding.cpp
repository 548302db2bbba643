// embedding: one work item per output element, out[b, t, c] = token_table[id, c]
// (+ position_table[pos, c]). An id or position outside its table writes nothing (kernels.h).
#include "elements.h"
#include "kernels.h"

namespace ding::kokkos {

void embedding(Stream&, const ops::EmbeddingArgs& a) {
  const int64_t T = a.ids.dim(1), V = a.token_table.dim(0), C = a.token_table.dim(1);
  const ops::EmbeddingParams& p = a.params;
  const Elements out = elements(a.out), ids = elements(a.ids), tokens = elements(a.token_table),
                 positions_table = elements(p.position_table), positions = elements(p.positions);
  const Strides out_s = strides(a.out), ids_s = strides(a.ids), tokens_s = strides(a.token_table),
                table_s = strides(p.position_table), positions_s = strides(p.positions);
  const int64_t P = p.position_table.defined() ? p.position_table.dim(0) : 0, offset = p.position_offset;
  Kokkos::parallel_for("ding::embedding", Range(0, a.out.numel()), KOKKOS_LAMBDA(const int64_t i) {
    const int64_t c = i % C, t = i / C % T, b = i / C / T;
    const int64_t id = ids.load_int(b * ids_s[0] + t * ids_s[1]);
    if (id < 0 || id >= V) return;
    float v = tokens.load(id * tokens_s[0] + c * tokens_s[1]);
    if (positions_table.defined()) {
      const int64_t pos = positions.defined() ? positions.load_int(b * positions_s[0] + t * positions_s[1]) : offset + t;
      if (pos < 0 || pos >= P) return;
      v += positions_table.load(pos * table_s[0] + c * table_s[1]);
    }
    out.store(b * out_s[0] + t * out_s[1] + c * out_s[2], v);
  });
}

}  // namespace ding::kokkos
