// Scalar dtype conversions against independent oracles: the CPU's F16C instructions for f16,
// exhaustive nearest-value search for f8e4m3 and bf16.
#include <bit>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "ding/dtype.h"

namespace ding {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_EQ(dtype_name(DType::i32), "i32");
}

TEST(DType, F16EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const f16 h{uint16_t(bits)};
    const float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f).bits, h.bits) << "bits " << bits;
  }
}

#if defined(__F16C__)
TEST(DType, F16MatchesHardwareConversionOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    // Bias towards the f16 range: random f32 bit patterns with exponents near zero.
    uint32_t u = any_bits(rng);
    u = (u & 0x807fffffu) | (uint32_t(100 + (u >> 23) % 60) << 23);
    const float f = std::bit_cast<float>(u);
    const uint16_t hw = uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(f32_to_f16(f).bits, hw) << "f = " << f;
    ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(f16{hw})), std::bit_cast<uint32_t>(_cvtsh_ss(hw)));
  }
}
#endif

TEST(DType, Bf16RoundsToNearestEven) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1e6f, 1e6f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    const float r = bf16_to_f32(f32_to_bf16(f));
    // The two bf16 neighbours of f bracket it; the result must be the nearer one.
    const uint32_t lower_bits = std::bit_cast<uint32_t>(f) & 0xffff0000u;
    const float lower = std::bit_cast<float>(lower_bits), upper = std::bit_cast<float>(lower_bits + 0x10000u);
    const float nearer = std::fabs(f - lower) < std::fabs(upper - f) ? lower : upper;
    if (std::fabs(f - lower) != std::fabs(upper - f)) ASSERT_EQ(r, nearer) << "f = " << f;
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F8E4M3IsTheNearestRepresentableValue) {
  std::vector<float> representable;
  for (int code = 0; code < 256; ++code) {
    const float v = f8e4m3_to_f32(f8e4m3{uint8_t(code)});
    if (!std::isnan(v)) representable.push_back(v);
  }
  EXPECT_EQ(representable.size(), 254u);  // 256 codes minus the two NaNs (±)
  EXPECT_EQ(*std::max_element(representable.begin(), representable.end()), 448.0f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-460.0f, 460.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = i % 2 ? dist(rng) : dist(rng) / 256.0f;
    float best = representable[0];
    for (float v : representable)
      if (std::fabs(v - f) < std::fabs(best - f)) best = v;
    const float got = f8e4m3_to_f32(f32_to_f8e4m3(f));
    if (std::fabs(f) >= 448.0f) {
      EXPECT_EQ(std::fabs(got), 448.0f);
    } else {
      EXPECT_EQ(std::fabs(got - f), std::fabs(best - f)) << "f = " << f << " got " << got << " nearest " << best;
    }
  }
}

}  // namespace
}  // namespace ding
