#include "ding/ops/softmax.h"

#include <fmt/format.h>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void validate(const Device& device, const SoftmaxArgs& a) {
  Check c("softmax", device);
  c.tensor("x", a.x, a.params.causal ? 2 : 1, kMaxRank);
  c.tensor("out", a.out, a.x.rank, a.x.rank);
  c.float_dtype("x", a.x);
  c.float_dtype("out", a.out);
  c.contiguous("x", a.x);
  c.contiguous("out", a.out);
  c.same_shape("out", a.out, "x", a.x);
  c.same_or_disjoint("out", a.out, "x", a.x);
  c.positive("scale", a.params.scale);
  if (a.params.causal && a.x.dim(-1) < a.x.dim(-2))
    c.fail(ErrorCode::shape_mismatch, fmt::format("causal needs Tk ≥ Tq, got Tq = {}, Tk = {} ({})", a.x.dim(-2),
                                                  a.x.dim(-1), shape_of(a.x)));
}

Cost cost(const SoftmaxArgs& a) {
  return {5.0 * double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())};
}

void softmax(Stream& stream, Tensor out, Tensor x, const SoftmaxParams& params) {
  dispatch(stream, SoftmaxArgs{out, x, params});
}

}  // namespace ding::ops
