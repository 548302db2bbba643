// copy cases: contiguous casts between every float dtype pair, i32, and the KV-cache append
// pattern (a strided k view of a fused qkv tensor into a slice of a larger cache).
#include <fmt/format.h>

#include "op_cases.h"

namespace ding::testing {

namespace {

// Every path rounds an f32 value to the target dtype once, to nearest even (the scalar
// conversions and the F16C/bf16 vector stores agree bit for bit), so copies compare exactly.
const char* const kExactReason = "a copy rounds each f32 value once to nearest even on every backend: compared exactly";

OpCase contiguous_case(int64_t rows, int64_t cols, DType from, DType to) {
  OpCase c;
  c.op = "copy";
  c.name = fmt::format("copy/rows{}_cols{}_{}_to_{}", rows, cols, dtype_name(from), dtype_name(to));
  c.tolerance = kExactTolerance;
  c.reason = kExactReason;
  c.build = [=](CaseRun& run) {
    const Tensor x = from == DType::i32 ? run.random_ints({rows, cols}, -1000000, 1000000) : run.normal(from, {rows, cols}, 3.0);
    const Tensor out = run.output("out", to, {rows, cols}, {Compare::exact});
    run.launch = [=](Stream& s) { ops::copy(s, out, x); };
    run.cost = ops::cost(ops::CopyArgs{out, x});
  };
  c.in_bench = rows * cols >= (1 << 20);
  return c;
}

// qkv [B, T, 3, H, D] → k = qkv[:, :, 1] (strided) → cache[:, pos : pos + T] of [B, S, H, D].
OpCase kv_append_case(int64_t B, int64_t T, int64_t H, int64_t D, int64_t S, int64_t pos, DType from, DType to) {
  OpCase c;
  c.op = "copy";
  c.name = fmt::format("copy/kv_append_B{}_T{}_H{}_D{}_S{}_pos{}_{}_to_{}", B, T, H, D, S, pos, dtype_name(from), dtype_name(to));
  c.tolerance = kExactTolerance;
  c.reason = kExactReason;
  c.build = [=](CaseRun& run) {
    const Tensor qkv = run.normal(from, {B, T, 3, H, D});
    const Tensor cache = run.inout("cache", to, {B, S, H, D});
    const Tensor k = qkv.select(2, 1), dst = cache.slice(1, pos, pos + T);
    run.launch = [=](Stream& s) { ops::copy(s, dst, k); };
    run.cost = ops::cost(ops::CopyArgs{dst, k});
  };
  c.in_bench = false;
  return c;
}

}  // namespace

std::vector<OpCase> copy_cases() {
  std::vector<OpCase> cases;
  const DType floats[] = {DType::f32, DType::f16, DType::bf16};
  for (DType from : floats)
    for (DType to : floats) cases.push_back(contiguous_case(3, 17, from, to));
  cases.push_back(contiguous_case(1, 1, DType::f32, DType::bf16));
  cases.push_back(contiguous_case(7, 4097, DType::f32, DType::f16));
  cases.push_back(contiguous_case(5, 33, DType::i32, DType::i32));
  cases.push_back(kv_append_case(1, 1, 25, 64, 300, 299, DType::f32, DType::f32));
  cases.push_back(kv_append_case(2, 17, 3, 80, 64, 5, DType::f32, DType::bf16));
  cases.push_back(kv_append_case(3, 5, 2, 7, 9, 0, DType::bf16, DType::bf16));
  cases.push_back(kv_append_case(1, 64, 4, 128, 128, 64, DType::f16, DType::f32));
  for (DType to : floats) {  // bench: one gpt2-xl prefill's k into a bf16 cache, and a large cast
    OpCase big = kv_append_case(1, 256, 25, 64, 1024, 0, DType::f32, to);
    big.in_tests = false;
    big.in_bench = true;
    cases.push_back(big);
  }
  OpCase cast = contiguous_case(1024, 6400, DType::f32, DType::bf16);
  cast.in_tests = false;
  cases.push_back(cast);
  return cases;
}

}  // namespace ding::testing
