#include "ding/ops/embedding.h"

#include <fmt/format.h>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void validate(const Device& device, const EmbeddingArgs& a) {
  Check c("embedding", device);
  c.tensor("ids", a.ids, 2, 2);
  c.dtype_in("ids", a.ids, {DType::i32});
  c.contiguous("ids", a.ids);
  c.tensor("token_table", a.token_table, 2, 2);
  c.float_dtype("token_table", a.token_table);
  c.contiguous("token_table", a.token_table);
  c.tensor("out", a.out, 3, 3);
  c.float_dtype("out", a.out);
  c.contiguous("out", a.out);
  c.dim("out", a.out, 0, a.ids.dim(0), "B (from ids)");
  c.dim("out", a.out, 1, a.ids.dim(1), "T (from ids)");
  c.dim("out", a.out, 2, a.token_table.dim(1), "C (from token_table)");
  c.disjoint("out", a.out, "token_table", a.token_table);
  c.disjoint("out", a.out, "ids", a.ids);
  const EmbeddingParams& p = a.params;
  if (p.position_table.defined()) {
    c.tensor("position_table", p.position_table, 2, 2);
    c.float_dtype("position_table", p.position_table);
    c.contiguous("position_table", p.position_table);
    c.dim("position_table", p.position_table, 1, a.token_table.dim(1), "C (from token_table)");
    c.disjoint("out", a.out, "position_table", p.position_table);
    if (!p.positions.defined() && (p.position_offset < 0 || p.position_offset + a.ids.dim(1) > p.position_table.dim(0)))
      c.fail(ErrorCode::invalid_argument,
             fmt::format("positions {}..{} fall outside the {} rows of position_table", p.position_offset,
                         p.position_offset + a.ids.dim(1) - 1, p.position_table.dim(0)));
  }
  if (p.positions.defined()) {
    c.tensor("positions", p.positions, 2, 2);
    c.dtype_in("positions", p.positions, {DType::i32});
    c.contiguous("positions", p.positions);
    c.same_shape("positions", p.positions, "ids", a.ids);
  }
}

Cost cost(const EmbeddingArgs& a) {
  const double rows_bytes = double(a.out.numel()) * double(dtype_size(a.token_table.dtype));
  Cost c{0, double(a.out.nbytes() + a.ids.nbytes()) + rows_bytes};
  if (a.params.position_table.defined()) {
    c.flops = double(a.out.numel());
    c.bytes += double(a.out.numel()) * double(dtype_size(a.params.position_table.dtype));
  }
  return c;
}

void embedding(Stream& stream, Tensor out, Tensor ids, Tensor token_table, const EmbeddingParams& params) {
  dispatch(stream, EmbeddingArgs{out, ids, token_table, params});
}

}  // namespace ding::ops
