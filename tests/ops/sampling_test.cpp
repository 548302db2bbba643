// argmax / top_k / sample: closed-form facts on the reference and CPU backends, and bad input
// through the public front end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ding/ding.h"
#include "expect_error.h"
#include "tensors.h"
#include "ding/ops/sampling.h"

namespace ding::testing {
namespace {

const char* const kBackends[] = {"ref", "cpu"};

// B rows of the same logits, one uniform per row; returns the sampled ids.
std::vector<int32_t> sample_rows(const char* backend, const std::vector<float>& row, const std::vector<float>& u,
                                 const ops::SampleParams& params) {
  Tensors ts(Device::open(backend));
  const int64_t B = int64_t(u.size()), V = int64_t(row.size());
  std::vector<float> logits;
  for (int64_t b = 0; b < B; ++b) logits.insert(logits.end(), row.begin(), row.end());
  Tensor out = ts.make(DType::i32, {B});
  ops::sample(ts.stream(), out, ts.from(DType::f32, {B, V}, logits), ts.from(DType::f32, {B}, u), params);
  return ts.read<int32_t>(out);
}

std::vector<float> normal_row(int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(V));
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- reference facts (checked on ref and cpu) ----------------------------------------------

TEST(Argmax, OneHotGivesTheHotIndexAndTiesTheFirst_V50257) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    std::vector<float> logits(2 * 50257, 0.0f);
    logits[12345] = 1.0f;                                    // row 0: one-hot
    logits[50257 + 40000] = logits[50257 + 7777] = 2.0f;     // row 1: a tie, the lower index wins
    Tensor out = ts.make(DType::i32, {2});
    ops::argmax(ts.stream(), out, ts.from(DType::f32, {2, 50257}, logits));
    EXPECT_EQ(ts.read<int32_t>(out), (std::vector<int32_t>{12345, 7777})) << backend;
  }
}

TEST(TopK, OfAPermutationIsTheLargestValuesDescending_V1000_k40) {
  std::vector<float> logits(1000);
  std::iota(logits.begin(), logits.end(), 0.0f);
  std::shuffle(logits.begin(), logits.end(), std::mt19937(7));
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor values = ts.make(DType::f32, {1, 40}), indices = ts.make(DType::i32, {1, 40});
    ops::top_k(ts.stream(), values, indices, ts.from(DType::f32, {1, 1000}, logits));
    const auto v = ts.read<float>(values);
    const auto i = ts.read<int32_t>(indices);
    for (int j = 0; j < 40; ++j) {
      EXPECT_EQ(v[j], float(999 - j)) << backend;
      EXPECT_EQ(logits[size_t(i[j])], float(999 - j)) << backend;
    }
  }
}

TEST(TopK, TiesComeInIndexOrder_V6_k6) {
  for (const char* backend : kBackends) {
    Tensors ts(Device::open(backend));
    Tensor values = ts.make(DType::f32, {1, 6}), indices = ts.make(DType::i32, {1, 6});
    ops::top_k(ts.stream(), values, indices, ts.from(DType::f32, {1, 6}, std::vector<float>{1, 3, 1, 3, 2, 1}));
    EXPECT_EQ(ts.read<int32_t>(indices), (std::vector<int32_t>{1, 3, 4, 0, 2, 5})) << backend;
  }
}

TEST(Sample, TemperatureZeroIsArgmax_V4097) {
  const std::vector<float> row = normal_row(4097, 1);
  const int32_t best = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  for (const char* backend : kBackends)
    for (int32_t id : sample_rows(backend, row, {0.0f, 0.5f, 0.999f}, {.temperature = 0, .top_p = 0.5f}))
      EXPECT_EQ(id, best) << backend;
}

TEST(Sample, TopK1IsArgmaxForAnyU_V4097) {
  const std::vector<float> row = normal_row(4097, 2);
  const int32_t best = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  for (const char* backend : kBackends)
    for (int32_t id : sample_rows(backend, row, {0.0f, 0.3f, 0.7f, 0.99999f}, {.temperature = 1.5f, .top_k = 1}))
      EXPECT_EQ(id, best) << backend;
}

TEST(Sample, UZeroPicksTheTopCandidate_V50257) {
  const std::vector<float> row = normal_row(50257, 3);
  const int32_t best = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  for (const char* backend : kBackends)
    for (ops::SampleParams p : {ops::SampleParams{}, ops::SampleParams{.temperature = 0.7f, .top_p = 0.9f, .min_p = 0.05f}})
      EXPECT_EQ(sample_rows(backend, row, {0.0f}, p)[0], best) << backend;
}

// Frequencies of each token over N uniform draws, for a 3-token row with probabilities
// {0.5, 0.3, 0.2}: each must lie within 5σ = 5·√(q(1−q)/N) of the kept-and-renormalised q.
void expect_frequencies(const ops::SampleParams& params, const std::vector<double>& expected) {
  const int N = 20000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> u(N);
  for (float& x : u) x = uniform(rng);
  const std::vector<float> row = {std::log(0.3f), std::log(0.5f), std::log(0.2f)};  // token 1 most likely
  for (const char* backend : kBackends) {
    std::vector<double> freq(3, 0.0);
    for (int32_t id : sample_rows(backend, row, u, params)) freq[size_t(id)] += 1.0 / N;
    for (int v = 0; v < 3; ++v) {
      const double q = expected[size_t(v)];
      EXPECT_NEAR(freq[size_t(v)], q, 5 * std::sqrt(q * (1 - q) / N) + 1e-12) << backend << " token " << v;
    }
  }
}

TEST(Sample, FrequenciesMatchProbabilities_V3) { expect_frequencies({}, {0.3, 0.5, 0.2}); }
// top_p 0.75: the shortest prefix with Σp ≥ 0.75 is {1, 0} (0.8), renormalised to 3/8, 5/8.
TEST(Sample, TopP075KeepsTwoTokens_V3) { expect_frequencies({.top_p = 0.75f}, {0.375, 0.625, 0.0}); }
// min_p 0.5: keeps p ≥ 0.25, i.e. {1, 0}.
TEST(Sample, MinP05KeepsTwoTokens_V3) { expect_frequencies({.min_p = 0.5f}, {0.375, 0.625, 0.0}); }
// top_k 2 keeps {1, 0}; temperature 1 leaves the probabilities.
TEST(Sample, TopK2KeepsTwoTokens_V3) { expect_frequencies({.top_k = 2}, {0.375, 0.625, 0.0}); }

// ---- bad input ------------------------------------------------------------------------------

TEST(Argmax, RejectsBadInput_B2_V5) {
  Tensors ts(Device::open("cpu")), other(Device::open("ref"));
  Stream& s = ts.stream();
  Tensor logits = ts.make(DType::f32, {2, 5});
  expect_error([&] { ops::argmax(s, ts.make(DType::i32, {3}), logits); }, ErrorCode::shape_mismatch, {"argmax", "out", "3"});
  expect_error([&] { ops::argmax(s, ts.make(DType::f32, {2}), logits); }, ErrorCode::dtype_mismatch, {"argmax", "out", "f32"});
  expect_error([&] { ops::argmax(s, ts.make(DType::i32, {2}), ts.make(DType::i32, {2, 5})); }, ErrorCode::dtype_mismatch,
               {"argmax", "logits", "i32"});
  expect_error([&] { ops::argmax(s, ts.make(DType::i32, {2}), other.make(DType::f32, {2, 5})); }, ErrorCode::device_mismatch,
               {"argmax", "logits", "ref"});
  Tensor out_in_logits = logits.reshape({10}).slice(0, 0, 2);
  out_in_logits.dtype = DType::i32;
  expect_error([&] { ops::argmax(s, out_in_logits, logits); }, ErrorCode::aliasing, {"argmax", "out", "logits"});
  Tensor empty = logits;
  empty.shape[1] = 0;
  expect_error([&] { ops::argmax(s, ts.make(DType::i32, {2}), empty); }, ErrorCode::invalid_argument, {"argmax", "logits", "size 0"});
  Tensor huge = logits;
  huge.shape[1] = int64_t(1) << 61;
  expect_error([&] { ops::argmax(s, ts.make(DType::i32, {2}), huge); }, ErrorCode::invalid_argument, {"argmax", "logits"});
}

TEST(TopK, RejectsBadInput_B2_V5) {
  Tensors ts(Device::open("cpu"));
  Stream& s = ts.stream();
  Tensor logits = ts.make(DType::f32, {2, 5});
  expect_error([&] { ops::top_k(s, ts.make(DType::f32, {2, 6}), ts.make(DType::i32, {2, 6}), logits); },
               ErrorCode::invalid_argument, {"top_k", "k = 6", "V = 5"});
  expect_error([&] { ops::top_k(s, ts.make(DType::f32, {2, 3}), ts.make(DType::i32, {2, 2}), logits); },
               ErrorCode::shape_mismatch, {"top_k", "indices"});
  expect_error([&] { ops::top_k(s, ts.make(DType::bf16, {2, 3}), ts.make(DType::i32, {2, 3}), logits); },
               ErrorCode::dtype_mismatch, {"top_k", "values", "bf16"});
  Tensor both = ts.make(DType::f32, {2, 3});
  Tensor both_i32 = both;
  both_i32.dtype = DType::i32;
  expect_error([&] { ops::top_k(s, both, both_i32, logits); }, ErrorCode::aliasing, {"top_k", "values", "indices"});
}

TEST(Sample, RejectsBadParams_B2_V5) {
  Tensors ts(Device::open("cpu"));
  Stream& s = ts.stream();
  Tensor out = ts.make(DType::i32, {2}), logits = ts.make(DType::f32, {2, 5});
  Tensor u = ts.from(DType::f32, {2}, std::vector<float>{0.1f, 0.2f});
  auto bad = [&](const ops::SampleParams& p, std::initializer_list<std::string> parts) {
    expect_error([&] { ops::sample(s, out, logits, u, p); }, ErrorCode::invalid_argument, parts);
  };
  bad({.top_p = 0.0f}, {"sample", "top_p must be in (0, 1], got 0"});
  bad({.top_p = 1.5f}, {"sample", "top_p", "1.5"});
  bad({.min_p = 1.0f}, {"sample", "min_p must be in [0, 1), got 1"});
  bad({.temperature = -0.5f}, {"sample", "temperature", "-0.5"});
  bad({.temperature = NAN}, {"sample", "temperature", "nan"});
  bad({.top_k = -1}, {"sample", "top_k", "-1"});
}

TEST(Sample, RejectsBadTensors_B2_V5) {
  Tensors ts(Device::open("cpu")), other(Device::open("ref"));
  Stream& s = ts.stream();
  Tensor out = ts.make(DType::i32, {2}), logits = ts.make(DType::f32, {2, 5}), u = ts.make(DType::f32, {2});
  expect_error([&] { ops::sample(s, out, logits, ts.make(DType::f32, {3})); }, ErrorCode::shape_mismatch, {"sample", "uniforms", "3"});
  expect_error([&] { ops::sample(s, out, logits, ts.make(DType::f16, {2})); }, ErrorCode::dtype_mismatch, {"sample", "uniforms", "f16"});
  expect_error([&] { ops::sample(s, out, logits, other.make(DType::f32, {2})); }, ErrorCode::device_mismatch, {"sample", "uniforms", "ref"});
  Tensor u_as_out = u;
  u_as_out.dtype = DType::i32;
  expect_error([&] { ops::sample(s, u_as_out, logits, u); }, ErrorCode::aliasing, {"sample", "out", "uniforms"});
  expect_error([&] { ops::sample(s, out, ts.make(DType::f32, {2, 5, 1}), u); }, ErrorCode::shape_mismatch, {"sample", "logits", "rank 2"});
}

}  // namespace
}  // namespace ding::testing
