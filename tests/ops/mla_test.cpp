// mla_prefill / mla_decode: the two reference forms against each other and a closed form, the
// GPU kernel's configurations against each other, and bad input through the public front end.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ding/gpu.h"
#include "ding/ops/mla.h"
#include "configurations.h"
#include "expect_error.h"
#include "gpu_tuning_scope.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

Device& ref() { return Device::open("ref"); }
Device& cpu() { return Device::open("cpu"); }

constexpr int64_t kH = 3, kL = 20, kDr = 6, kDn = 10, kDv = 7;

// The expanded form (prefill's reference: one query at the last of T positions) and the absorbed
// form (decode's reference: the same query over a length-T cache) are one function of the same
// inputs; in double they agree to rounding.
TEST(MlaReference, ExpandedAndAbsorbedFormsAgree) {
  CaseRun run(ref(), 3);
  const int64_t B = 2, T = 13;
  const Tensor q = run.normal(DType::f32, {B, kH, kDn + kDr});
  const Tensor cache = run.normal(DType::f32, {B, T, kL + kDr});
  const Tensor w = run.normal(DType::f32, {kH, kDn + kDv, kL}, 0.3);
  const Tensor seq_lens = run.ints({B}, {int32_t(T), int32_t(T)});
  const Tensor decoded = run.output("decoded", DType::f32, {B, kH, kDv});
  const Tensor prefilled = run.output("prefilled", DType::f32, {B, 1, kH, kDv});
  ops::mla_decode(run.stream, decoded, q, cache, seq_lens, w, {.scale = 0.4f});
  ops::mla_prefill(run.stream, prefilled, q.unsqueeze(1), cache, w, {.scale = 0.4f});
  EXPECT_LT(nmse(run.read(decoded), run.read(prefilled)), 1e-24);
}

// One key gets weight 1: head h's output is its value W_uv^h c_0, whatever the query.
TEST(MlaReference, OneKeyReturnsItsUpProjectedValue) {
  CaseRun run(ref(), 4);
  const Tensor q = run.normal(DType::f32, {1, kH, kDn + kDr}, 5.0);
  const Tensor cache = run.normal(DType::f32, {1, 1, kL + kDr});
  const Tensor w = run.normal(DType::f32, {kH, kDn + kDv, kL});
  const Tensor seq_lens = run.ints({1}, {1});
  const Tensor out = run.output("out", DType::f32, {1, kH, kDv});
  ops::mla_decode(run.stream, out, q, cache, seq_lens, w);
  const auto o = run.read(out), c = run.read(cache), ww = run.read(w);
  for (int64_t h = 0; h < kH; ++h)
    for (int64_t e = 0; e < kDv; ++e) {
      double v = 0;
      for (int64_t l = 0; l < kL; ++l) v += ww[size_t((h * (kDn + kDv) + kDn + e) * kL + l)] * c[size_t(l)];
      EXPECT_NEAR(o[size_t(h * kDv + e)], v, 1e-6 * (1 + std::abs(v))) << h << " " << e;  // out is f32
    }
}

// The latent given to decode is stored at seq_lens − 1 and attended to in the same call: with a
// length-1 sequence it is the only key, so the output is its value.
TEST(MlaReference, DecodeAppendsTheTokensLatentFirst) {
  for (Device* device : {&ref(), &cpu()}) {
    CaseRun run(*device, 5);
    const Tensor q = run.normal(DType::f32, {1, kH, kDn + kDr});
    const Tensor cache = run.normal(DType::f32, {1, 4, kL + kDr});
    const Tensor latent = run.normal(DType::f32, {1, kL + kDr});
    const Tensor w = run.normal(DType::f32, {kH, kDn + kDv, kL});
    const Tensor out = run.output("out", DType::f32, {1, kH, kDv});
    ops::mla_decode(run.stream, out, q, cache, run.ints({1}, {1}), w, {}, latent);
    const auto o = run.read(out), c = run.read(latent), ww = run.read(w), stored = run.read(cache);
    for (int64_t e = 0; e < kL + kDr; ++e) EXPECT_EQ(stored[size_t(e)], c[size_t(e)]) << device->name() << " " << e;
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t e = 0; e < kDv; ++e) {
        double v = 0;
        for (int64_t l = 0; l < kL; ++l) v += ww[size_t((h * (kDn + kDv) + kDn + e) * kL + l)] * c[size_t(l)];
        EXPECT_NEAR(o[size_t(h * kDv + e)], v, 1e-4 * (1 + std::abs(v))) << device->name() << " " << h << " " << e;
      }
  }
}

// ---- The GPU's configurations ----------------------------------------------------------------------

// On a GPU the latent attend kernel's configurations are one computation: rings of 2, 3 and 4
// tiles (an RTX 4090's shared memory holds 2, an H100's 4) and tiles by cp.async (sm_80/sm_89) or
// by bulk copies (sm_90+) give the same bits for every mla case, each within its bound of the
// reference. One GPU thereby runs what another chip would.
TEST(MlaGpu, EveryRingAndCopyPathGivesTheSameBits) {
  if (!registry::is_available("cuda")) GTEST_SKIP() << "no cuda device here";
  Device& cuda = Device::open("cuda");
  const ScopedGpuTuning<gpu::OpTuning> tuning(cuda);
  const SwitchForms forms{"mla_decode: tiles by bulk copies", "mla_decode: tiles by cp.async", nvidia_at_least(cuda, 90)};
  std::vector<Configuration> configurations;  // the first: 4 stages with bulk copies
  for (int stages : {4, 3, 2})
    for (bool bulk : {true, false})
      configurations.push_back(expecting({fmt::format("{} stages, bulk copies {}", stages, bulk),
                                          [&tuning, stages, bulk] { tuning.set({.mla_stages = stages, .mla_bulk_copies = bulk}); }},
                                         forms, bulk));
  EXPECT_GT(expect_configurations_agree(cuda, mla_cases(), configurations), 20);
}

// Decode's several splits are merged and projected by W_uv in one launch where W_uv's rows are
// whole 16-byte pieces, else by a merge launch and a projection launch: both within every case's
// bound of the reference, for the cases that take the one launch too (they add in another order,
// so their bits differ).
TEST(MlaGpu, MergeAndProjectionInOneLaunchOrTwo) {
  expect_both_settings_keep_the_bound(
      mla_cases(), &gpu::OpTuning::mla_fold_projection, "one launch", "two launches",
      [](const OpCase& c) { return c.op == "mla_decode"; }, 16, [](const Device&) {
        return SwitchForms{"mla_decode: splits merged and projected in one launch", "mla_decode: splits merged, then projected"};
      });
}

// ---- Bad input -----------------------------------------------------------------------------------

struct Tensors {
  Tensor q, cache, w, out, seq_lens;
};

Tensors decode_tensors(CaseRun& run, int64_t H = kH, int64_t L = kL, int64_t Dr = kDr, int64_t Dn = kDn, int64_t Dv = kDv) {
  return {run.normal(DType::f32, {2, H, Dn + Dr}), run.normal(DType::f32, {2, 8, L + Dr}), run.normal(DType::f32, {H, Dn + Dv, L}),
          run.output("out", DType::f32, {2, H, Dv}), run.ints({2}, {1, 8})};
}

TEST(MlaBadInput, HeadsOfQAndWMustAgree) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  t.w = run.normal(DType::f32, {kH + 1, kDn + kDv, kL});
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w); }, ErrorCode::shape_mismatch,
               {"mla_decode", "q", "H (from w_kv"});
}

TEST(MlaBadInput, CacheMustHoldARopeKey) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  t.cache = run.normal(DType::f32, {2, 8, kL});
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w); }, ErrorCode::shape_mismatch,
               {"mla_decode", "cache's last dim", "Dr ≥ 1"});
}

TEST(MlaBadInput, QMustHoldANopePart) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  t.q = run.normal(DType::f32, {2, kH, kDr});
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w); }, ErrorCode::shape_mismatch,
               {"mla_decode", "q's last dim", "Dn ≥ 1"});
}

TEST(MlaBadInput, OutMustHaveTheValueWidth) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  t.out = run.output("out2", DType::f32, {2, kH, kDv + 1});
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w); }, ErrorCode::shape_mismatch,
               {"mla_decode", "out", "Dv (from w_kv and q)"});
}

TEST(MlaBadInput, LengthsOutsideTheCacheAreRefusedOnHostBackends) {
  for (Device* device : {&ref(), &cpu()})
    for (int32_t bad : {0, 9}) {
      CaseRun run(*device, 1);
      Tensors t = decode_tensors(run);
      t.seq_lens = run.ints({2}, {3, bad});
      expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w); }, ErrorCode::invalid_argument,
                   {"mla_decode", "seq_lens[1] = " + std::to_string(bad), "[1, 8]"});
    }
}

TEST(MlaBadInput, LatentNewMustMatchTheCacheRow) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  const Tensor latent = run.normal(DType::f32, {2, kL + kDr + 1});
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w, {}, latent); },
               ErrorCode::shape_mismatch, {"mla_decode", "latent_new", "L + Dr (from cache)"});
}

TEST(MlaBadInput, PrefillNeedsAtLeastTqKeys) {
  CaseRun run(cpu(), 1);
  const Tensor q = run.normal(DType::f32, {1, 5, kH, kDn + kDr});
  const Tensor cache = run.normal(DType::f32, {1, 4, kL + kDr});
  const Tensor w = run.normal(DType::f32, {kH, kDn + kDv, kL});
  const Tensor out = run.output("out", DType::f32, {1, 5, kH, kDv});
  expect_error([&] { ops::mla_prefill(run.stream, out, q, cache, w); }, ErrorCode::shape_mismatch,
               {"mla_prefill", "Tk = 4", "Tq = 5"});
}

TEST(MlaBadInput, NegativeScaleIsRefused) {
  CaseRun run(cpu(), 1);
  Tensors t = decode_tensors(run);
  expect_error([&] { ops::mla_decode(run.stream, t.out, t.q, t.cache, t.seq_lens, t.w, {.scale = -1.0f}); },
               ErrorCode::invalid_argument, {"mla_decode", "scale", "-1"});
}

}  // namespace
}  // namespace ding::testing
