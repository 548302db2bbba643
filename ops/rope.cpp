#include "ding/ops/rope.h"

#include <fmt/format.h>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void validate(const Device& device, const RopeArgs& a) {
  Check c("rope", device);
  c.tensor("x", a.x, 4, 4);
  c.tensor("out", a.out, 4, 4);
  c.float_dtype("x", a.x);
  c.float_dtype("out", a.out);
  c.contiguous("x", a.x);
  c.contiguous("out", a.out);
  c.same_shape("out", a.out, "x", a.x);
  c.same_or_disjoint("out", a.out, "x", a.x);
  c.positive("theta", a.params.theta);
  const int64_t D = a.x.dim(3), R = a.params.rotary_dim == 0 ? D : a.params.rotary_dim;
  if (R < 2 || R > D || R % 2 != 0)
    c.fail(ErrorCode::invalid_argument, fmt::format("rotary_dim must be even and in [2, D = {}], got {}", D, R));
  if (a.params.positions.defined()) {
    c.tensor("positions", a.params.positions, 2, 2);
    c.dtype_in("positions", a.params.positions, {DType::i32});
    c.contiguous("positions", a.params.positions);
    c.dim("positions", a.params.positions, 0, a.x.dim(0), "B (from x)");
    c.dim("positions", a.params.positions, 1, a.x.dim(1), "T (from x)");
  } else if (a.params.position_offset < 0) {
    c.fail(ErrorCode::invalid_argument, fmt::format("position_offset must be ≥ 0, got {}", a.params.position_offset));
  }
}

Cost cost(const RopeArgs& a) {
  const int64_t D = a.x.dim(3), R = a.params.rotary_dim == 0 ? D : a.params.rotary_dim;
  return {3.0 * double(a.x.numel() / D * R), double(a.x.nbytes() + a.out.nbytes())};
}

void rope(Stream& stream, Tensor out, Tensor x, const RopeParams& params) { dispatch(stream, RopeArgs{out, x, params}); }

}  // namespace ding::ops
