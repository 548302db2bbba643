#include "ding/ops/sampling.h"

#include <fmt/format.h>

#include <cmath>

#include "ding/ops/check.h"
#include "ding/ops/dispatch.h"

namespace ding::ops {

namespace {

void validate_logits(const Check& c, const Tensor& logits) {
  c.tensor("logits", logits, 2, 2);
  c.float_dtype("logits", logits);
  c.contiguous("logits", logits);
}

void validate_ids(const Check& c, const char* name, const Tensor& t, const Tensor& logits) {
  c.tensor(name, t, 1, 1);
  c.dtype_in(name, t, {DType::i32});
  c.contiguous(name, t);
  c.dim(name, t, 0, logits.dim(0), "B (from logits)");
  c.disjoint(name, t, "logits", logits);
}

}  // namespace

void validate(const Device& device, const ArgmaxArgs& a) {
  Check c("argmax", device);
  validate_logits(c, a.logits);
  validate_ids(c, "out", a.out, a.logits);
}

void validate(const Device& device, const CountNonfiniteArgs& a) {
  Check c("count_nonfinite", device);
  c.tensor("x", a.x, 2, 2);
  c.float_dtype("x", a.x);
  c.contiguous("x", a.x);
  c.tensor("out", a.out, 1, 1);
  c.dtype_in("out", a.out, {DType::i32});
  c.contiguous("out", a.out);
  c.dim("out", a.out, 0, a.x.dim(0), "B (from x)");
  c.disjoint("out", a.out, "x", a.x);
}

Cost cost(const CountNonfiniteArgs& a) { return {double(a.x.numel()), double(a.x.nbytes() + a.out.nbytes())}; }

void count_nonfinite(Stream& stream, Tensor out, Tensor x) { dispatch(stream, CountNonfiniteArgs{out, x}); }

void validate(const Device& device, const TopKArgs& a) {
  Check c("top_k", device);
  validate_logits(c, a.logits);
  c.tensor("values", a.values, 2, 2);
  c.tensor("indices", a.indices, 2, 2);
  c.dtype_in("values", a.values, {DType::f32});
  c.dtype_in("indices", a.indices, {DType::i32});
  c.contiguous("values", a.values);
  c.contiguous("indices", a.indices);
  c.dim("values", a.values, 0, a.logits.dim(0), "B (from logits)");
  c.same_shape("indices", a.indices, "values", a.values);
  if (a.values.dim(1) > a.logits.dim(1))
    c.fail(ErrorCode::invalid_argument, fmt::format("k = {} exceeds the vocabulary V = {} (logits {})", a.values.dim(1),
                                                    a.logits.dim(1), shape_of(a.logits)));
  c.disjoint("values", a.values, "logits", a.logits);
  c.disjoint("indices", a.indices, "logits", a.logits);
  c.disjoint("values", a.values, "indices", a.indices);
}

void validate(const Device& device, const SampleArgs& a) {
  Check c("sample", device);
  validate_logits(c, a.logits);
  validate_ids(c, "out", a.out, a.logits);
  c.tensor("uniforms", a.uniforms, 1, 1);
  c.dtype_in("uniforms", a.uniforms, {DType::f32});
  c.dim("uniforms", a.uniforms, 0, a.logits.dim(0), "B (from logits)");
  c.disjoint("out", a.out, "uniforms", a.uniforms);
  const SampleParams& p = a.params;
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    c.fail(ErrorCode::invalid_argument, fmt::format("temperature must be ≥ 0, got {}", p.temperature));
  if (p.top_k < 0) c.fail(ErrorCode::invalid_argument, fmt::format("top_k must be ≥ 0 (0 = off), got {}", p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) c.fail(ErrorCode::invalid_argument, fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (!(p.min_p >= 0 && p.min_p < 1)) c.fail(ErrorCode::invalid_argument, fmt::format("min_p must be in [0, 1), got {}", p.min_p));
}

Cost cost(const ArgmaxArgs& a) { return {double(a.logits.numel()), double(a.logits.nbytes() + a.out.nbytes())}; }
Cost cost(const TopKArgs& a) {
  return {double(a.logits.numel()), double(a.logits.nbytes() + a.values.nbytes() + a.indices.nbytes())};
}
Cost cost(const SampleArgs& a) {
  return {6.0 * double(a.logits.numel()), double(a.logits.nbytes() + a.out.nbytes() + a.uniforms.nbytes())};
}

void argmax(Stream& stream, Tensor out, Tensor logits) { dispatch(stream, ArgmaxArgs{out, logits}); }
void top_k(Stream& stream, Tensor values, Tensor indices, Tensor logits) { dispatch(stream, TopKArgs{values, indices, logits}); }
void sample(Stream& stream, Tensor out, Tensor logits, Tensor uniforms, const SampleParams& params) {
  dispatch(stream, SampleArgs{out, logits, uniforms, params});
}

}  // namespace ding::ops
