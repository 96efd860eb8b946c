// FP8 E4M3 conversions of common/half.h (the CUDA backend's FP8 KV cache; the GPU tests check the
// device conversion against these): every code decodes to its value, every finite code survives
// a round trip, ties round to the even code, values past 448 saturate.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/half.h"

namespace pagoda {
namespace {

TEST(Fp8E4M3, DecodesKnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_TRUE(std::isinf(fp8_e4m3_to_f32(0x78)) == false);  // exponent 15 is finite (no infinities)
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);
}

TEST(Fp8E4M3, EveryFiniteCodeRoundTripsAndCodesAreOrdered) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(code)), code) << "code " << c;
  }
  for (int c = 1; c <= 0x7e; ++c) EXPECT_LT(fp8_e4m3_to_f32(static_cast<uint8_t>(c - 1)), fp8_e4m3_to_f32(static_cast<uint8_t>(c)));
}

TEST(Fp8E4M3, RoundsToNearestEven) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(c)), hi = fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in f32
    const uint8_t even = (c & 1) ? static_cast<uint8_t>(c + 1) : static_cast<uint8_t>(c);
    EXPECT_EQ(f32_to_fp8_e4m3(mid), even) << "tie between codes " << c << " and " << c + 1;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)), c + 1) << "just above the tie after code " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, -1e9f)), c) << "just below the tie after code " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), even | 0x80) << "negative tie after code " << c;
  }
  // Below the smallest subnormal: 2^-10 is the tie with 0 (rounds to even 0), above it 2^-9.
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Fp8E4M3, SaturatesPast448AndKeepsNaN) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(463.99f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(500.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

}  // namespace
}  // namespace pagoda
