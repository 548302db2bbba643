// rope: closed-form facts on the reference (and the CPU kernel) for both layouts, the scaled
// frequency tables against the published formulas, and bad input through the public front end.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"
#include "op_cases.h"

namespace ding::testing {
namespace {

// Runs `f`, expecting a ding::Error with `code` whose message contains every string of `parts`.

const char* const kBackends[] = {"ref", "cpu"};
const ops::RopeLayout kLayouts[] = {ops::RopeLayout::neox, ops::RopeLayout::interleaved};

TEST(RopeSanity, PositionZeroIsIdentity_B1_T1_H3_D64) {
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 5);
      Tensor x = run.normal(DType::f32, {1, 1, 3, 64}), y = run.output("y", DType::f32, {1, 1, 3, 64});
      ops::rope(run.stream, y, x, {.layout = layout});
      EXPECT_EQ(run.read(y), run.read(x)) << backend;
    }
}

// Index of the partner of dim i < R/2 in each layout, and of dim i itself.
std::pair<int, int> pair_of(ops::RopeLayout layout, int i, int R) {
  return layout == ops::RopeLayout::neox ? std::pair{i, i + R / 2} : std::pair{2 * i, 2 * i + 1};
}

TEST(RopeSanity, RotationPreservesPairNormsAndCopiesTail_T17_D80_R32_pos_1000) {
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 5);
      Tensor x = run.normal(DType::f32, {1, 17, 2, 80}), y = run.output("y", DType::f32, {1, 17, 2, 80});
      ops::rope(run.stream, y, x, {.layout = layout, .rotary_dim = 32, .position_offset = 1000});
      const auto a = run.read(x), b = run.read(y);
      for (int row = 0; row < 17 * 2; ++row) {
        for (int i = 0; i < 16; ++i) {
          auto [p, q] = pair_of(layout, i, 32);
          const double before = std::hypot(a[row * 80 + p], a[row * 80 + q]);
          EXPECT_NEAR(std::hypot(b[row * 80 + p], b[row * 80 + q]), before, 1e-5 * (1 + before)) << backend;
        }
        for (int d = 32; d < 80; ++d) EXPECT_EQ(b[row * 80 + d], a[row * 80 + d]) << backend;
      }
    }
}

TEST(RopeSanity, FirstPairTurnsByPosition_pos1_and_pos2_inplace) {
  // Frequency index 0 has θ⁰ = 1, so its pair turns by exactly `pos` radians: (1, 0) → (cos p, sin p).
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 1);
      std::vector<double> v(2 * 8, 0.0);
      auto [p, q] = pair_of(layout, 0, 8);
      v[p] = 1.0, v[8 + p] = 1.0;
      Tensor x = run.values(DType::f32, {2, 1, 1, 8}, v), positions = run.ints({2, 1}, {1, 2});
      ops::rope(run.stream, x, x, {.layout = layout, .positions = positions});
      const auto r = run.read(x);
      for (int b = 0; b < 2; ++b) {
        EXPECT_NEAR(r[b * 8 + p], std::cos(b + 1.0), 1e-7) << backend;
        EXPECT_NEAR(r[b * 8 + q], std::sin(b + 1.0), 1e-7) << backend;
      }
    }
}

// Linear scaling by 4 divides every f32 frequency by 4 exactly (a power of two), and pos·θ_i is
// formed in double, so position 4p under the scaled table turns every pair by exactly what
// position p turns it under the unscaled one.
TEST(RopeSanity, LinearScalingBy4AtPosition4pIsUnscaledAtP_T5_H2_D64) {
  const ops::RopeScaling linear4{ops::RopeScalingKind::linear, 4.0};
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 7);
      Tensor x = run.normal(DType::f32, {1, 5, 2, 64});
      Tensor scaled = run.output("scaled", DType::f32, {1, 5, 2, 64}), plain = run.output("plain", DType::f32, {1, 5, 2, 64});
      auto table = [&](const ops::RopeScaling& s) {
        const std::vector<float> f = ops::rope_inv_frequencies(10000.0, 64, s);
        return run.values(DType::f32, {32}, std::vector<double>(f.begin(), f.end()));
      };
      const Tensor unscaled_table = table({}), scaled_table = table(linear4);
      const Tensor p = run.ints({1, 5}, {0, 3, 17, 250, 2000}), p4 = run.ints({1, 5}, {0, 12, 68, 1000, 8000});
      ops::rope(run.stream, scaled, x, {.layout = layout, .positions = p4, .inv_freq = scaled_table});
      ops::rope(run.stream, plain, x, {.layout = layout, .positions = p, .inv_freq = unscaled_table});
      EXPECT_EQ(run.read(scaled), run.read(plain)) << backend;
    }
}

// attention_factor f scales both rotated components (cos and sin) and leaves the copied dims alone.
TEST(RopeSanity, AttentionFactorScalesRotatedDimsOnly_T17_D80_R32) {
  for (const char* backend : kBackends)
    for (ops::RopeLayout layout : kLayouts) {
      CaseRun run(Device::open(backend), 8);
      Tensor x = run.normal(DType::f32, {1, 17, 2, 80});
      Tensor y1 = run.output("y1", DType::f32, {1, 17, 2, 80}), yf = run.output("yf", DType::f32, {1, 17, 2, 80});
      ops::rope(run.stream, y1, x, {.layout = layout, .rotary_dim = 32, .position_offset = 500});
      ops::rope(run.stream, yf, x, {.layout = layout, .rotary_dim = 32, .position_offset = 500, .attention_factor = 1.5f});
      const auto a = run.read(y1), b = run.read(yf);
      for (int row = 0; row < 17 * 2; ++row) {
        for (int d = 0; d < 32; ++d)
          EXPECT_NEAR(b[row * 80 + d], 1.5 * a[row * 80 + d], 1e-6 * (1 + std::abs(a[row * 80 + d]))) << backend;
        for (int d = 32; d < 80; ++d) EXPECT_EQ(b[row * 80 + d], a[row * 80 + d]) << backend;
      }
    }
}

// ---- rope_inv_frequencies against the published formulas ---------------------------------------
// Each expected value is formed here from the formula as its source states it, in double; the
// table must be that value rounded to f32 (within half an f32 ulp, 2⁻²⁴ relative).

void expect_rounded(const std::vector<float>& table, const std::vector<double>& expected) {
  ASSERT_EQ(table.size(), expected.size());
  for (size_t i = 0; i < table.size(); ++i)
    EXPECT_NEAR(double(table[i]), expected[i], 0x1p-24 * expected[i]) << "frequency " << i;
}

// RoFormer eq. 15: θ_i = 10000^(−2(i−1)/d), i = 1 … d/2 (here from i = 0), with `base` for 10000.
std::vector<double> roformer(double base, int64_t d) {
  std::vector<double> theta;
  for (int64_t i = 1; i <= d / 2; ++i) theta.push_back(1.0 / std::pow(base, 2.0 * double(i - 1) / double(d)));
  return theta;
}

TEST(RopeInvFrequencies, UnscaledIsRoformer_theta10000_R128_theta500000_R80_theta1e6_R2) {
  for (auto [base, d] : {std::pair{10000.0, int64_t(128)}, {500000.0, int64_t(80)}, {1e6, int64_t(2)}})
    expect_rounded(ops::rope_inv_frequencies(base, d, {}), roformer(base, d));
}

// Linear (position interpolation, Chen et al. 2023, eq. 4): positions divided by the factor, the
// same as every frequency divided by it.
TEST(RopeInvFrequencies, LinearDividesByFactor_factor4_R64_factor2_5_R96) {
  for (auto [factor, d] : {std::pair{4.0, int64_t(64)}, {2.5, int64_t(96)}}) {
    std::vector<double> expected = roformer(10000.0, d);
    for (double& f : expected) f = f / factor;
    expect_rounded(ops::rope_inv_frequencies(10000.0, d, {ops::RopeScalingKind::linear, factor}), expected);
  }
}

// Llama 3.1's apply_scaling (Meta's reference model code), branch by branch: wavelengths shorter
// than old_context_len / high_freq_factor keep their frequency, longer than old_context_len /
// low_freq_factor are divided by the factor, and between the two the frequency is interpolated.
double llama31_scaled(double freq, double factor, double low_freq_factor, double high_freq_factor,
                      double old_context_len) {
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;
  const double wavelen = 2 * M_PI / freq;
  if (wavelen < high_freq_wavelen) return freq;
  if (wavelen > low_freq_wavelen) return freq / factor;
  const double smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
  return (1 - smooth) * freq / factor + smooth * freq;
}

TEST(RopeInvFrequencies, Llama3MatchesApplyScaling_Llama31_8_1_4_8192_and_32_2_8_4096) {
  struct Triple {
    double theta;
    int64_t d;
    ops::RopeScaling scaling;
  };
  for (const Triple& t : {Triple{500000.0, 128, {ops::RopeScalingKind::llama3, 8.0, 1.0, 4.0, 8192}},
                          Triple{10000.0, 64, {ops::RopeScalingKind::llama3, 32.0, 2.0, 8.0, 4096}}}) {
    std::vector<double> expected;
    int kept = 0, divided = 0, blended = 0;
    for (double freq : roformer(t.theta, t.d)) {
      const double scaled = llama31_scaled(freq, t.scaling.factor, t.scaling.low_freq_factor, t.scaling.high_freq_factor,
                                           double(t.scaling.original_max_position));
      expected.push_back(scaled);
      kept += scaled == freq;
      divided += scaled == freq / t.scaling.factor;
      blended += scaled != freq && scaled != freq / t.scaling.factor;
    }
    // The triples exercise every band.
    EXPECT_GT(kept, 0);
    EXPECT_GT(divided, 0);
    EXPECT_GT(blended, 0);
    expect_rounded(ops::rope_inv_frequencies(t.theta, t.d, t.scaling), expected);
  }
}

TEST(RopeInvFrequencies, BadValuesRaise) {
  using ops::RopeScalingKind;
  const auto bad = [](double theta, int64_t d, ops::RopeScaling s, std::initializer_list<std::string> parts) {
    expect_error([&] { ops::rope_inv_frequencies(theta, d, s); }, ErrorCode::invalid_argument, parts);
  };
  bad(0.0, 64, {}, {"rope_inv_frequencies", "theta", "0"});
  bad(std::nan(""), 64, {}, {"theta", "nan"});
  bad(10000.0, 63, {}, {"rotary_dim", "63"});
  bad(10000.0, 0, {}, {"rotary_dim", "0"});
  bad(10000.0, 64, {RopeScalingKind::linear, 0.0}, {"factor", "0"});
  bad(10000.0, 64, {RopeScalingKind::linear, -2.0}, {"factor", "-2"});
  bad(10000.0, 64, {RopeScalingKind::llama3, std::numeric_limits<double>::infinity()}, {"factor", "inf"});
  bad(10000.0, 64, {RopeScalingKind::llama3, 8.0, 4.0, 4.0, 8192}, {"low_freq_factor = 4", "high_freq_factor = 4"});
  bad(10000.0, 64, {RopeScalingKind::llama3, 8.0, 0.0, 4.0, 8192}, {"low_freq_factor = 0"});
  bad(10000.0, 64, {RopeScalingKind::llama3, 8.0, 1.0, 4.0, 0}, {"original_max_position", "0"});
}

class RopeBadInput : public ::testing::Test {
 protected:
  Device& cpu = Device::open("cpu");
  CaseRun run{cpu, 1};
  Tensor x = run.normal(DType::f32, {2, 3, 4, 8});
  Tensor y = run.output("y", DType::f32, {2, 3, 4, 8});
};

TEST_F(RopeBadInput, OddRotaryDim_5) {
  expect_error([&] { ops::rope(run.stream, y, x, {.rotary_dim = 5}); }, ErrorCode::invalid_argument, {"rope", "rotary_dim", "5"});
}

TEST_F(RopeBadInput, RotaryDimAboveD_10_D8) {
  expect_error([&] { ops::rope(run.stream, y, x, {.rotary_dim = 10}); }, ErrorCode::invalid_argument,
               {"rope", "rotary_dim", "D = 8", "10"});
}

TEST_F(RopeBadInput, Rank3Input) {
  Tensor x3 = run.normal(DType::f32, {2, 3, 8});
  expect_error([&] { ops::rope(run.stream, x3, x3); }, ErrorCode::shape_mismatch, {"rope", "rank 4", "[2, 3, 8]"});
}

TEST_F(RopeBadInput, PositionsShape_2x4_vs_T3) {
  Tensor positions = run.ints({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_error([&] { ops::rope(run.stream, y, x, {.positions = positions}); }, ErrorCode::shape_mismatch,
               {"rope", "positions", "T (from x)", "4", "3"});
}

TEST_F(RopeBadInput, FloatPositions_f32) {
  Tensor positions = run.normal(DType::f32, {2, 3});
  expect_error([&] { ops::rope(run.stream, y, x, {.positions = positions}); }, ErrorCode::dtype_mismatch,
               {"rope", "positions", "f32"});
}

TEST_F(RopeBadInput, OutShape_D6) {
  Tensor y6 = run.output("y6", DType::f32, {2, 3, 4, 6});
  expect_error([&] { ops::rope(run.stream, y6, x); }, ErrorCode::shape_mismatch, {"rope", "out", "[2, 3, 4, 6]", "[2, 3, 4, 8]"});
}

TEST_F(RopeBadInput, OtherDevice_x_on_ref) {
  CaseRun other(Device::open("ref"), 1);
  Tensor xr = other.normal(DType::f32, {2, 3, 4, 8});
  expect_error([&] { ops::rope(run.stream, y, xr); }, ErrorCode::device_mismatch, {"rope", "x", "ref"});
}

TEST_F(RopeBadInput, PartialOverlap_out_shifted_by_one_batch) {
  Tensor big = run.normal(DType::f32, {3, 3, 4, 8});
  Tensor in = big.slice(0, 0, 2), out = big.slice(0, 1, 3);
  expect_error([&] { ops::rope(run.stream, out, in); }, ErrorCode::aliasing, {"rope", "out", "overlaps", "x"});
}

TEST_F(RopeBadInput, NegativeOffset_minus1) {
  expect_error([&] { ops::rope(run.stream, y, x, {.position_offset = -1}); }, ErrorCode::invalid_argument,
               {"rope", "position_offset", "-1"});
}

TEST_F(RopeBadInput, NonPositiveTheta_0) {
  expect_error([&] { ops::rope(run.stream, y, x, {.theta = 0.0f}); }, ErrorCode::invalid_argument, {"rope", "theta", "0"});
}

TEST_F(RopeBadInput, InvFreqLength5_for_R8) {
  Tensor table = run.uniform(DType::f32, {5}, 0.1, 1.0);
  expect_error([&] { ops::rope(run.stream, y, x, {.inv_freq = table}); }, ErrorCode::shape_mismatch,
               {"rope", "inv_freq", "R/2", "4", "5"});
}

TEST_F(RopeBadInput, InvFreqDtype_f16) {
  Tensor table = run.uniform(DType::f16, {4}, 0.1, 1.0);
  expect_error([&] { ops::rope(run.stream, y, x, {.inv_freq = table}); }, ErrorCode::dtype_mismatch,
               {"rope", "inv_freq", "f16"});
}

TEST_F(RopeBadInput, InvFreqRank2) {
  Tensor table = run.uniform(DType::f32, {2, 4}, 0.1, 1.0);
  expect_error([&] { ops::rope(run.stream, y, x, {.inv_freq = table}); }, ErrorCode::shape_mismatch,
               {"rope", "inv_freq", "rank 1", "[2, 4]"});
}

TEST_F(RopeBadInput, InvFreqNotContiguous_stride2) {
  Tensor strided = run.uniform(DType::f32, {4, 2}, 0.1, 1.0).select(1, 0);  // [4], stride 2
  expect_error([&] { ops::rope(run.stream, y, x, {.inv_freq = strided}); }, ErrorCode::invalid_argument,
               {"rope", "inv_freq", "contiguous"});
}

TEST_F(RopeBadInput, InvFreqOnRef) {
  CaseRun other(Device::open("ref"), 1);
  Tensor table = other.uniform(DType::f32, {4}, 0.1, 1.0);
  expect_error([&] { ops::rope(run.stream, y, x, {.inv_freq = table}); }, ErrorCode::device_mismatch,
               {"rope", "inv_freq", "ref"});
}

TEST_F(RopeBadInput, AttentionFactor_0_and_nan) {
  expect_error([&] { ops::rope(run.stream, y, x, {.attention_factor = 0.0f}); }, ErrorCode::invalid_argument,
               {"rope", "attention_factor", "0"});
  expect_error([&] { ops::rope(run.stream, y, x, {.attention_factor = std::nanf("")}); }, ErrorCode::invalid_argument,
               {"rope", "attention_factor", "nan"});
}

TEST_F(RopeBadInput, ZeroSizeDim_H0) {
  Tensor empty = Tensor::view(x.data, &cpu, DType::f32, {2, 3, 0, 8});
  expect_error([&] { ops::rope(run.stream, empty, empty); }, ErrorCode::invalid_argument, {"rope", "x", "size 0"});
}

TEST_F(RopeBadInput, OverflowShape_2pow31_tokens_and_heads) {
  const int64_t n = int64_t(1) << 31;
  Tensor huge = Tensor::view(x.data, &cpu, DType::f32, {n, n, n, 8});
  expect_error([&] { ops::rope(run.stream, huge, huge); }, ErrorCode::invalid_argument, {"rope", "x", "64 bits"});
}

}  // namespace
}  // namespace ding::testing
