// quant/float_convert.h: the vector path equals the scalar oracle and dequantize_row +
// f32_to_bf16 for every f16 and bf16 bit pattern, for f32 specials, and for lengths that leave a
// scalar tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/half.h"
#include "quant/float_convert.h"
#include "quant/quant.h"

namespace pagoda {
namespace {

std::vector<uint16_t> every_16bit_pattern() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// dequantize_row then f32_to_bf16 / plain f32: what the uploader did before the vector path.
template <class Out>
std::vector<Out> reference(DType st, const void* src, DType dt, int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  quant::dequantize_row(st, src, f.data(), n);
  std::vector<Out> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (sizeof(Out) == 2) out[i] = f32_to_bf16(f[i]);
    else std::memcpy(&out[i], &f[i], 4);
  }
  (void)dt;
  return out;
}

TEST(FloatConvert, EveryHalfPatternToBf16AndF32) {
  const auto src = every_16bit_pattern();
  const int64_t n = static_cast<int64_t>(src.size());
  for (DType st : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> got(src.size()), scalar(src.size());
    if (st == DType::kBF16) {  // bf16 -> bf16 is a copy (below); bf16 -> f32 here
      std::vector<uint32_t> got32(src.size());
      quant::convert_float_row(st, src.data(), DType::kF32, got32.data(), n);
      const auto want32 = reference<uint32_t>(st, src.data(), DType::kF32, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got32[i], want32[i]) << "bf16 pattern 0x" << std::hex << i;
      continue;
    }
    quant::convert_float_row(st, src.data(), DType::kBF16, got.data(), n);
    quant::convert_float_row_scalar(st, src.data(), DType::kBF16, scalar.data(), n);
    const auto want = reference<uint16_t>(st, src.data(), DType::kBF16, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << dtype_name(st) << " pattern 0x" << std::hex << i;
      ASSERT_EQ(scalar[i], want[i]) << dtype_name(st) << " pattern 0x" << std::hex << i;
    }
    std::vector<uint32_t> got32(src.size());
    quant::convert_float_row(st, src.data(), DType::kF32, got32.data(), n);
    const auto want32 = reference<uint32_t>(st, src.data(), DType::kF32, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got32[i], want32[i]) << dtype_name(st) << " pattern 0x" << std::hex << i;
  }
}

TEST(FloatConvert, F32ToBf16RoundsToNearestEvenKeepsNanAndSubnormals) {
  std::vector<float> src = {0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                            f32_from_bits(0x3f808000u),   // a tie, even below: rounds down
                            f32_from_bits(0x3f818000u),   // a tie, odd below: rounds up
                            f32_from_bits(0x7f800001u),   // a signalling NaN: made quiet
                            f32_from_bits(0xff800001u), f32_from_bits(0x007fffffu)};
  std::mt19937 rng(7);
  for (int i = 0; i < 4000; ++i) src.push_back(f32_from_bits(rng()));
  // Every length from 0 to 40 (the vector head and the scalar tail), then the whole set.
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcd);
    quant::convert_float_row(DType::kF32, src.data(), DType::kBF16, got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(src[i])) << "n " << n << " i " << i;
    EXPECT_EQ(got[n], 0xabcd) << "wrote past n = " << n;
  }
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<uint16_t> got(src.size());
  quant::convert_float_row(DType::kF32, src.data(), DType::kBF16, got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(src[i])) << "bits 0x" << std::hex << f32_bits(src[i]);
}

TEST(FloatConvert, SameTypeIsACopyAndOtherPairsAreRefused) {
  const auto src = every_16bit_pattern();
  std::vector<uint16_t> got(src.size());
  quant::convert_float_row(DType::kBF16, src.data(), DType::kBF16, got.data(), static_cast<int64_t>(src.size()));
  EXPECT_EQ(got, src);
  EXPECT_TRUE(quant::float_row_convertible(DType::kF16, DType::kBF16));
  EXPECT_FALSE(quant::float_row_convertible(DType::kF16, DType::kF16));
  EXPECT_FALSE(quant::float_row_convertible(DType::kQ8_0, DType::kBF16));
  EXPECT_FALSE(quant::float_row_convertible(DType::kBF16, DType::kQ8_0));
}

}  // namespace
}  // namespace pagoda
