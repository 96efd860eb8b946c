// Scalar conversions between f32 and the 16-bit float formats (IEEE fp16, bfloat16), and FP8
// E4M3 (the OCP / NVIDIA format: bias 7, no infinities, 0x7f / 0xff NaN, max 448).
// Bit-exact with hardware conversion (round to nearest even; NaN preserved; f32 -> E4M3 saturates
// finite values to +-448, as CUDA's __NV_SATFINITE does).
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_fp16(float f) {
  uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (x < 0x38800000u) {
    // subnormal or zero in fp16: round(x_value / 2^-24)
    if (x < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t exp = x >> 23;
    uint32_t man = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp)
    uint32_t half_man = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return static_cast<uint16_t>(sign | half_man);
  }
  uint32_t h = ((x >> 13) - (112u << 10));
  const uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, man = b & 0x7u;
  if (exp == 0xf && man == 0x7) return f32_from_bits(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    const float v = static_cast<float>(man) * 0.001953125f;  // subnormal: man * 2^-9
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 120) << 23) | (man << 20));
}

inline uint8_t f32_to_fp8_e4m3(float f) {
  uint32_t x = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (x >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (x < 0x3c800000u) {
    // below 2^-6: a subnormal of E4M3, round(value / 2^-9) to nearest even
    if (x < 0x3a000000u) return sign;  // below 2^-11: far under the tie at 2^-10, rounds to 0
    const uint32_t exp = x >> 23;
    const uint32_t man = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141 - exp;  // value / 2^-9 = man * 2^(exp - 127 - 23 + 9)
    uint32_t q = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint8_t>(sign | q);  // q == 8 is the smallest normal, 0x08
  }
  uint32_t b = ((x >> 20) - (120u << 3));  // exponent rebias 127 -> 7, 3 mantissa bits
  const uint32_t rem = x & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (b & 1u))) ++b;
  if (b > 0x7eu) b = 0x7eu;  // rounding up past 448 saturates
  return static_cast<uint8_t>(sign | b);
}

}  // namespace pagoda
