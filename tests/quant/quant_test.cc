// Tier 3 (quant): reference conversions of every format.
//  * hand-built blocks with known values (layouts proven, not only self-consistent)
//  * the gguf Python package's bytes and dequantized values (testdata/quant, see
//    scripts/gen_quant_fixture.py): our quantizer writes the same bytes for the legacy formats and
//    our dequantizer reproduces gguf's floats exactly for every format (random k-quant blocks)
//  * round-trip NMSE and dot-product error budgets per format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "test_paths.h"

namespace pagoda::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double nmse(const std::vector<float>& out, const std::vector<float>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return r == 0 ? e : e / r;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}
std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(n);
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// ---------- hand-built blocks ----------

TEST(QuantLayout, Q4_0KnownValues) {
  BlockQ4_0 b;
  b.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j)) << j;
  }
}

TEST(QuantLayout, Q4_1KnownValues) {
  BlockQ4_1 b;
  b.d = f32_to_fp16(2.0f);
  b.m = f32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (3 << 4));
  float y[32];
  dequantize_row(DType::kQ4_1, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 5.0f);
  }
}

TEST(QuantLayout, Q5_0AndQ5_1HighBits) {
  BlockQ5_0 b;
  b.d = f32_to_fp16(1.0f);
  std::memset(b.qs, 0, sizeof(b.qs));
  const uint32_t qh = (1u << 3) | (1u << 20);  // element 3 and element 20 get +16
  std::memcpy(b.qh, &qh, 4);
  b.qs[3] = 0x21;  // element 3 low nibble 1, element 19 nibble 2
  float y[32];
  dequantize_row(DType::kQ5_0, &b, y, 32);
  EXPECT_EQ(y[3], 1.0f + 16 - 16);
  EXPECT_EQ(y[19], 2.0f - 16);
  EXPECT_EQ(y[20], 0.0f);  // 0 | 16 - 16
  EXPECT_EQ(y[0], -16.0f);

  BlockQ5_1 c;
  c.d = f32_to_fp16(0.25f);
  c.m = f32_to_fp16(1.0f);
  std::memset(c.qs, 0xFF, sizeof(c.qs));
  const uint32_t all = 0xFFFFFFFFu;
  std::memcpy(c.qh, &all, 4);
  dequantize_row(DType::kQ5_1, &c, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * 31 + 1.0f);
}

TEST(QuantLayout, Q8_0KnownValues) {
  BlockQ8_0 b;
  b.d = f32_to_fp16(0.125f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 127);
  float y[32];
  dequantize_row(DType::kQ8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.125f * (j * 8 - 127));
}

TEST(QuantLayout, Q4_KKnownValues) {
  BlockQ4_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = f32_to_fp16(1.0f);
  b.dmin = f32_to_fp16(0.5f);
  // sub-block j: scale j + 1 (j < 4), 40 + j (j >= 4: needs the high bits); min 2j
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(j < 4 ? j + 1 : 40 + j);
    m[j] = static_cast<uint8_t>(2 * j + (j >= 4 ? 32 : 0));
  }
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  for (int l = 0; l < 128; ++l) b.qs[l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  float y[256];
  dequantize_row(DType::kQ4_K, &b, y, 256);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int byte = 32 * (j / 2) + l;
      const int q = (j % 2 == 0) ? byte % 16 : 15 - byte % 16;
      EXPECT_EQ(y[32 * j + l], 1.0f * sc[j] * q - 0.5f * m[j]) << j << " " << l;
    }
  }
}

TEST(QuantLayout, Q6_KKnownValues) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  b.d = f32_to_fp16(1.0f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s - 8);
  // element e gets code q(e) = e % 64 (6 bits): place its nibble and high bits per the layout
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      auto q = [&](int off) { return (128 * h + l + off) % 64; };
      b.ql[64 * h + l] = static_cast<uint8_t>((q(0) & 0xF) | ((q(64) & 0xF) << 4));
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((q(32) & 0xF) | ((q(96) & 0xF) << 4));
      b.qh[32 * h + l] =
          static_cast<uint8_t>((q(0) >> 4) | ((q(32) >> 4) << 2) | ((q(64) >> 4) << 4) | ((q(96) >> 4) << 6));
    }
  float y[256];
  dequantize_row(DType::kQ6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], static_cast<float>((e / 16 - 8) * (e % 64 - 32))) << e;
}

// ---------- gguf fixture ----------

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class GgufFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufFixture, MatchesGgufPackage) {
  const std::string name = GetParam();
  const std::string dir = test::testdata_dir() + "/quant/";
  const DType t = *dtype_from_name(name);
  const auto q = read_file(dir + name + ".q");
  const auto deq_bytes = read_file(dir + name + ".deq");
  ASSERT_FALSE(q.empty()) << "missing fixture " << dir << name << ".q (scripts/gen_quant_fixture.py)";
  const int64_t n = static_cast<int64_t>(deq_bytes.size() / 4);
  ASSERT_EQ(static_cast<int64_t>(q.size()), row_bytes(t, n));
  std::vector<float> want(n);
  std::memcpy(want.data(), deq_bytes.data(), deq_bytes.size());

  const auto got = dequantize(t, q, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i])) << name << " element " << i << ": " << got[i] << " vs " << want[i];
  }

  if (!is_quantized(t) || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 || t == DType::kQ5_1 ||
      t == DType::kQ8_0) {
    const auto in_bytes = read_file(dir + "input.f32");
    ASSERT_EQ(in_bytes.size(), deq_bytes.size());
    std::vector<float> x(n);
    std::memcpy(x.data(), in_bytes.data(), in_bytes.size());
    const auto mine = quantize(t, x);
    ASSERT_EQ(mine.size(), q.size());
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(mine[i], q[i]) << name << " byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GgufFixture,
                         ::testing::Values("f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k",
                                           "q6_k", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "tq1_0", "tq2_0"),
                         [](const auto& info) { return std::string(info.param); });

// ---------- round trip and dot products ----------

struct Budget {
  DType t;
  double roundtrip_nmse;  // quantize -> dequantize of gaussian data
  double dot_rel;         // |vec_dot - exact| / (|w| |x|) over random vectors
};

class QuantBudget : public ::testing::TestWithParam<Budget> {};

TEST_P(QuantBudget, RoundTrip) {
  const Budget b = GetParam();
  const int64_t n = 4096;
  const auto x = gaussian(n, 7);
  const auto y = dequantize(b.t, quantize(b.t, x), n);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
  const double e = nmse(y, x);
  EXPECT_LE(e, b.roundtrip_nmse) << dtype_name(b.t);
  RecordProperty("nmse", std::to_string(e));
  std::printf("%s roundtrip nmse %.3g\n", std::string(dtype_name(b.t)).c_str(), e);
  // A quantizer that collapses everything to zero would have nmse 1: also require real signal.
  EXPECT_LT(e, 0.1);
}

TEST_P(QuantBudget, ZerosAndConstants) {
  const Budget b = GetParam();
  const int64_t n = 512;
  std::vector<float> z(n, 0.0f), c(n, -0.3f);
  for (float v : dequantize(b.t, quantize(b.t, z), n)) ASSERT_EQ(v, 0.0f) << dtype_name(b.t);
  for (float v : dequantize(b.t, quantize(b.t, c), n)) ASSERT_NEAR(v, -0.3f, 0.01f) << dtype_name(b.t);
}

TEST_P(QuantBudget, DotProduct) {
  const Budget b = GetParam();
  const QuantOps* ops = quant_ops(b.t);
  ASSERT_NE(ops, nullptr);
  const int64_t n = 1024;
  double worst = 0;
  for (uint32_t seed = 0; seed < 8; ++seed) {
    const auto w = gaussian(n, 100 + seed);
    const auto x = gaussian(n, 200 + seed, 3.0f);
    const auto wq = quantize(b.t, w);
    const auto wd = dequantize(b.t, wq, n);
    std::vector<uint8_t> xq(row_bytes(ops->vec_dot_type, n));
    quantize_row(ops->vec_dot_type, x.data(), xq.data(), n);
    const float got = vec_dot(b.t, wq.data(), xq.data(), n);
    ASSERT_TRUE(std::isfinite(got));
    double exact = 0, nw = 0, nx = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += static_cast<double>(wd[i]) * x[i];
      nw += static_cast<double>(wd[i]) * wd[i];
      nx += static_cast<double>(x[i]) * x[i];
    }
    worst = std::max(worst, std::fabs(got - exact) / std::sqrt(nw * nx));
  }
  EXPECT_LE(worst, b.dot_rel) << dtype_name(b.t);
  std::printf("%s dot rel err %.3g\n", std::string(dtype_name(b.t)).c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantBudget,
                         ::testing::Values(Budget{DType::kF32, 0, 1e-7}, Budget{DType::kF16, 1e-7, 1e-7},
                                           Budget{DType::kBF16, 4e-6, 1e-7}, Budget{DType::kQ4_0, 9e-3, 6e-4},
                                           Budget{DType::kQ4_1, 7.5e-3, 6e-4}, Budget{DType::kQ5_0, 2.2e-3, 6e-4},
                                           Budget{DType::kQ5_1, 1.7e-3, 6e-4}, Budget{DType::kQ8_0, 3.5e-5, 6e-4},
                                           Budget{DType::kQ4_K, 6.5e-3, 6e-4}, Budget{DType::kQ5_K, 1.6e-3, 6e-4},
                                           Budget{DType::kQ6_K, 4e-4, 6e-4}, Budget{DType::kQ2_K, 0.08, 6e-4},
                                           Budget{DType::kQ3_K, 0.025, 6e-4}, Budget{DType::kIQ4_NL, 6.5e-3, 6e-4},
                                           Budget{DType::kIQ4_XS, 6.5e-3, 6e-4}),
                         [](const auto& info) { return std::string(dtype_name(info.param.t)); });

// Activation formats round trip too.
TEST(QuantActivation, Q8_1SumAndQ8_KBsums) {
  const int64_t n = 512;
  const auto x = gaussian(n, 5);
  std::vector<BlockQ8_1> a(n / 32);
  quantize_row(DType::kQ8_1, x.data(), a.data(), n);
  for (const auto& blk : a) {
    int s = 0;
    for (int j = 0; j < 32; ++j) s += blk.qs[j];
    EXPECT_NEAR(fp16_to_f32(blk.s), s * fp16_to_f32(blk.d), 1e-3 * std::fabs(s * fp16_to_f32(blk.d)) + 1e-4);
  }
  std::vector<BlockQ8_K> k(n / 256);
  quantize_row(DType::kQ8_K, x.data(), k.data(), n);
  for (const auto& blk : k)
    for (int i = 0; i < 16; ++i) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += blk.qs[16 * i + j];
      EXPECT_EQ(blk.bsums[i], s);
    }
  std::vector<float> y(n);
  dequantize_row(DType::kQ8_K, k.data(), y.data(), n);
  EXPECT_LT(nmse(y, x), 1e-4);
  dequantize_row(DType::kQ8_1, a.data(), y.data(), n);
  EXPECT_LT(nmse(y, x), 1e-4);
}

// Ternary formats: ternary data round-trips exactly; gaussian data keeps the sign of the large values.
TEST(QuantTernary, ExactOnTernaryData) {
  for (DType t : {DType::kTQ1_0, DType::kTQ2_0}) {
    const int64_t n = 1024;
    std::vector<float> x(n);
    std::mt19937 rng(5);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.25f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
    for (int64_t b = 0; b < n / 256; ++b) x[256 * b] = 0.25f;  // every block's absmax is 0.25
    const auto y = dequantize(t, quantize(t, x), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i]) << dtype_name(t) << " element " << i;
    const QuantOps* ops = quant_ops(t);
    const auto a = gaussian(n, 3);
    std::vector<uint8_t> aq(row_bytes(ops->vec_dot_type, n));
    quantize_row(ops->vec_dot_type, a.data(), aq.data(), n);
    std::vector<float> ad(n);
    dequantize_row(ops->vec_dot_type, aq.data(), ad.data(), n);
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(x[i]) * ad[i];
    const auto xq = quantize(t, x);
    EXPECT_NEAR(vec_dot(t, xq.data(), aq.data(), n), exact, 1e-4 * std::fabs(exact) + 1e-5) << dtype_name(t);
  }
}

// Known values of the formats whose layouts are easy to get wrong by one bit position.
TEST(QuantLayout, Q3_KSignsAndScales) {
  BlockQ3_K b{};
  b.d = f32_to_fp16(0.5f);
  // scale of sub-block 0: low nibble 1 (scales[0] & 15), high bits 2 (scales[8] bits 0..1) -> 33 - 32 = 1
  b.scales[0] = 0x01;
  b.scales[8] = 0x02;
  // element 0: low2 = 3, hmask bit set -> q = 3; element 1: low2 = 1, hmask clear -> q = -3
  b.qs[0] = 3;
  b.qs[1] = 1;
  b.hmask[0] = 1;
  float y[256];
  dequantize_row(DType::kQ3_K, &b, y, 256);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -1.5f);
  EXPECT_EQ(y[2], -2.0f);  // low2 0, hmask clear: -4 * 0.5 * 1
  EXPECT_EQ(y[16], 64.0f);  // sub-block 1: scale 0 - 32 = -32, q = -4: 0.5 * -32 * -4
}

TEST(QuantLayout, IQ4_NLLevels) {
  BlockIQ4_NL b{};
  b.d = f32_to_fp16(2.0f);
  for (int l = 0; l < 16; ++l) b.qs[l] = static_cast<uint8_t>(l | ((15 - l) << 4));
  float y[32];
  dequantize_row(DType::kIQ4_NL, &b, y, 32);
  for (int l = 0; l < 16; ++l) {
    EXPECT_EQ(y[l], 2.0f * kIq4nlValues[l]);
    EXPECT_EQ(y[16 + l], 2.0f * kIq4nlValues[15 - l]);
  }
}

TEST(QuantTraits, GgufTypeIds) {
  // ggml_type ids and block sizes of the GGUF spec
  struct Row {
    uint32_t id;
    const char* name;
    int64_t block, bytes;
  };
  for (const Row& r : {Row{10, "q2_k", 256, 84}, Row{11, "q3_k", 256, 110}, Row{16, "iq2_xxs", 256, 66},
                       Row{17, "iq2_xs", 256, 74}, Row{18, "iq3_xxs", 256, 98}, Row{19, "iq1_s", 256, 50},
                       Row{20, "iq4_nl", 32, 18}, Row{21, "iq3_s", 256, 110}, Row{22, "iq2_s", 256, 82},
                       Row{23, "iq4_xs", 256, 136}, Row{29, "iq1_m", 256, 56}, Row{34, "tq1_0", 256, 54},
                       Row{35, "tq2_0", 256, 66}, Row{39, "mxfp4", 32, 17}}) {
    const auto tr = dtype_traits_of(r.id);
    ASSERT_TRUE(tr.has_value()) << r.name;
    EXPECT_EQ(tr->name, r.name);
    EXPECT_EQ(tr->block_size, r.block) << r.name;
    EXPECT_EQ(tr->block_bytes, r.bytes) << r.name;
    // every type either computes or says what to use instead
    EXPECT_TRUE(tr->weight_supported || !tr->unsupported_hint.empty()) << r.name;
  }
}

TEST(QuantTraits, TableAgreesWithDTypeTraits) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ8_0, DType::kQ8_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K, DType::kQ2_K,
                  DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0}) {
    const QuantOps* o = quant_ops(t);
    ASSERT_NE(o, nullptr) << dtype_name(t);
    EXPECT_EQ(o->block_size, dtype_traits(t).block_size);
    EXPECT_EQ(o->block_bytes, dtype_traits(t).block_bytes);
    if (dtype_traits(t).weight_supported) {
      EXPECT_NE(o->vec_dot, nullptr) << dtype_name(t);
    }
  }
  EXPECT_EQ(quant_ops(DType::kIQ2_XXS), nullptr);
}

// F8E4M3Rows: a row is [f32 scale][K e4m3 codes]; scale = max|x| / 448, code = e4m3(x / scale)
// (nearest even, saturating), w = scale x e4m3(code) exactly in f32. No CPU dot product (the CPU
// runs these weights as bf16), not a GGUF type.
TEST(QuantTraits, Fp8RowsAreAScaleAndTheCodes) {
  EXPECT_EQ(row_bytes(DType::kF8E4M3Rows, 4096), 4096 + 4);
  EXPECT_TRUE(is_quantized(DType::kF8E4M3Rows));
  EXPECT_FALSE(dtype_traits_of(static_cast<uint32_t>(DType::kF8E4M3Rows)).has_value());
  EXPECT_EQ(dtype_from_name("f8_e4m3_rows"), DType::kF8E4M3Rows);
  const QuantOps* o = quant_ops(DType::kF8E4M3Rows);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->vec_dot, nullptr);
  const int64_t K = 96;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> x(K), back(K);
  for (auto& v : x) v = dist(rng);
  x[5] = -0.25f;  // the extreme: code -448
  std::vector<uint8_t> row(K + 4);
  quantize_row(DType::kF8E4M3Rows, x.data(), row.data(), K);
  float s;
  std::memcpy(&s, row.data(), 4);
  EXPECT_EQ(s, 0.25f / 448.0f);
  EXPECT_EQ(row[4 + 5], 0xFE);  // -448: sign, exponent 15, mantissa 6
  dequantize_row(DType::kF8E4M3Rows, row.data(), back.data(), K);
  EXPECT_NEAR(back[5], -0.25f, 1e-7f);
  for (int64_t i = 0; i < K; ++i) {
    EXPECT_EQ(row[4 + i], f32_to_fp8_e4m3(x[i] / s)) << i;
    EXPECT_EQ(back[i], fp8_e4m3_to_f32(row[4 + i]) * s) << i;
    // half an E4M3 step: 2^-4 relative, or 2^-10 x s among the subnormals
    EXPECT_LE(std::abs(back[i] - x[i]), std::abs(x[i]) * 0.0625f + s * 0.0009765625f + 1e-12f) << i;
  }
  std::vector<float> zeros(K, 0.0f);
  quantize_row(DType::kF8E4M3Rows, zeros.data(), row.data(), K);
  std::memcpy(&s, row.data(), 4);
  EXPECT_EQ(s, 0.0f);
  for (int64_t i = 0; i < K; ++i) EXPECT_EQ(row[4 + i], 0) << i;
}

}  // namespace
}  // namespace pagoda::quant
