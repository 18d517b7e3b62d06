// Host-side float16 and bfloat16 storage types for the CPU kernels: 16-bit
// patterns with exact conversions to float and round-to-nearest-even back.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashdwc {

struct HostHalf {
  uint16_t bits;
};
struct HostBFloat16 {
  uint16_t bits;
};

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float to_float(float v) { return v; }
inline float to_float(HostBFloat16 v) { return bits_to_float(uint32_t(v.bits) << 16); }
inline float to_float(HostHalf v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1fu;
  const uint32_t man = v.bits & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal or zero: man * 2^-24, exact in float.
  const float mag = float(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

template <typename T>
T from_float(float f);

template <>
inline float from_float<float>(float f) { return f; }

template <>
inline HostBFloat16 from_float<HostBFloat16>(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

template <>
inline HostHalf from_float<HostHalf>(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {uint16_t(sign | 0x7e00u)};  // nan
  if (abs >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal in half: round abs * 2^24 to an integer, ties to even.
    const float scaled = bits_to_float(abs) * 16777216.0f;
    uint32_t q = uint32_t(scaled);
    const float rem = scaled - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return {uint16_t(sign | q)};
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t dropped = abs & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u))) ++h;
  return {uint16_t(sign | h)};
}

}  // namespace flashdwc
