// Element types and their scalar conversions.
// f16 is IEEE binary16, bf16 the top half of an f32, f8e4m3 the OCP E4M3 "fn" format
// (no infinities, one NaN pattern, max 448). Conversions round to nearest even.
#pragma once
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ding {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  f8e4m3,
  i8,   // quantized: dequantized value = q * scale[row]; scales travel with the tensor
  i32,
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f8e4m3: return 1;
    case DType::i8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3;
}

// Storage types: distinct structs so a uint16_t is never silently read as a number.
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };
struct f8e4m3 { uint8_t bits; };

// memcpy rather than std::bit_cast: the public headers stay C++17 so that GPU sources built by
// older HIP toolchains (ROCm 5.2's clang with -std=c++17) can include them.
inline float bf16_to_f32(bf16 h) {
  const uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16{uint16_t(u >> 16)};
}

float f16_to_f32(f16 h);
f16 f32_to_f16(float f);
float f8e4m3_to_f32(f8e4m3 q);
f8e4m3 f32_to_f8e4m3(float f);  // saturates to ±448

// Element i of an array of `dtype` at `base`, as a double; and the store back, rounding floats
// to nearest even and integers to nearest. For loaders, references and tests, not hot loops.
double load_element(const void* base, DType dtype, int64_t i);
void store_element(void* base, DType dtype, int64_t i, double value);

}  // namespace ding
