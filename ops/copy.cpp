#include "ding/ops/copy.h"

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

void validate(const Device& device, const CopyArgs& a) {
  Check c("copy", device);
  c.tensor("x", a.x, 1, kMaxRank);
  c.tensor("out", a.out, a.x.rank, a.x.rank);
  if (a.x.dtype == DType::i32) {
    c.dtype_in("out", a.out, {DType::i32});
  } else {
    c.float_dtype("x", a.x);
    c.float_dtype("out", a.out);
  }
  c.last_dim_contiguous("x", a.x);
  c.last_dim_contiguous("out", a.out);
  c.same_shape("out", a.out, "x", a.x);
  c.disjoint("out", a.out, "x", a.x);
}

Cost cost(const CopyArgs& a) { return {0, double(a.x.nbytes() + a.out.nbytes())}; }

void copy(Stream& stream, Tensor out, Tensor x) { dispatch(stream, CopyArgs{out, x}); }

}  // namespace ding::ops
