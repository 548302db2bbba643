// Scalar conversions for the 16- and 8-bit float formats (round to nearest even).
#include <bit>
#include "ding/dtype.h"

#include <cmath>
#include <cstring>

namespace ding {

float f16_to_f32(f16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24
    const float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

f16 f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
    // Round abs to a multiple of 2^-24 with the FPU (exact for this range, ties to even).
    const float magnitude = std::bit_cast<float>(abs);
    return f16{uint16_t(sign | uint16_t(std::nearbyint(magnitude * 16777216.0f)))};
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return f16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}

float f8e4m3_to_f32(f8e4m3 q) {
  const uint32_t sign = q.bits & 0x80u;
  const uint32_t exponent = (q.bits >> 3) & 0xfu;
  const uint32_t mantissa = q.bits & 0x7u;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) magnitude = NAN;
  else if (exponent == 0) magnitude = std::ldexp(float(mantissa), -9);  // subnormal: m · 2^-6 / 8
  else magnitude = std::ldexp(1.0f + float(mantissa) / 8.0f, int(exponent) - 7);
  return sign ? -magnitude : magnitude;
}

f8e4m3 f32_to_f8e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return f8e4m3{uint8_t(sign | 0x7f)};
  float a = std::fabs(f);
  if (a >= 448.0f) return f8e4m3{uint8_t(sign | 0x7e)};  // saturate to the largest finite value
  if (a < std::ldexp(1.0f, -6)) {                          // subnormal range: multiples of 2^-9
    return f8e4m3{uint8_t(sign | uint8_t(std::nearbyint(a * 512.0f)))};  // 8 rounds up into the first normal
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m · 2^e, m ∈ [0.5, 1)
  int mantissa = int(std::nearbyint((m * 2.0f - 1.0f) * 8.0f));
  int exponent = e - 1 + 7;
  if (mantissa == 8) { mantissa = 0; ++exponent; }
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return f8e4m3{uint8_t(sign | 0x7e)};
  return f8e4m3{uint8_t(sign | (exponent << 3) | mantissa)};
}

double load_element(const void* base, DType dtype, int64_t i) {
  const char* p = static_cast<const char*>(base) + i * int64_t(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::f16: { f16 v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::bf16: { bf16 v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::f8e4m3: { f8e4m3 v; std::memcpy(&v, p, 1); return f8e4m3_to_f32(v); }
    case DType::i8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  }
  return 0;
}

void store_element(void* base, DType dtype, int64_t i, double value) {
  char* p = static_cast<char*>(base) + i * int64_t(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: { float v = float(value); std::memcpy(p, &v, 4); break; }
    case DType::f16: { f16 v = f32_to_f16(float(value)); std::memcpy(p, &v, 2); break; }
    case DType::bf16: { bf16 v = f32_to_bf16(float(value)); std::memcpy(p, &v, 2); break; }
    case DType::f8e4m3: { f8e4m3 v = f32_to_f8e4m3(float(value)); std::memcpy(p, &v, 1); break; }
    case DType::i8: { int8_t v = int8_t(std::lround(value)); std::memcpy(p, &v, 1); break; }
    case DType::i32: { int32_t v = int32_t(std::llround(value)); std::memcpy(p, &v, 4); break; }
  }
}

}  // namespace ding
