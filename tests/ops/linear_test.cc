// Tier 2 (ops): linear() for every weight dtype x every ISA level this machine supports x token
// counts x odd N, against a double-precision reference on the dequantized weights. NaN/Inf first,
// then an NMSE budget per dtype (the integer paths quantize the activations to 8 bits, so their
// budgets are the activation quantization error, ~1e-4; float paths are exact up to f32 rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "ops/linear.h"
#include "quant/quant.h"
#include "test_paths.h"

namespace pagoda {
namespace {

struct Case {
  DType t;
  double nmse_budget;
};

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor make_weight(DType t, int64_t n, int64_t k, uint32_t seed) {
  Tensor w = Tensor::empty(t, {n, k});
  const auto src = gaussian(n * k, seed, 0.05f);
  for (int64_t r = 0; r < n; ++r) quant::quantize_row(t, src.data() + r * k, w.row_ptr(r), k);
  return w;
}

// y_ref[m][n] = sum_k dequant(W)[n][k] * x[m][k] in double.
std::vector<double> reference(const Tensor& w, const std::vector<float>& x, int64_t m) {
  const int64_t n = w.dim(0), k = w.dim(1);
  std::vector<float> wd(n * k);
  for (int64_t r = 0; r < n; ++r) quant::dequantize_row(w.dtype(), w.row_ptr(r), wd.data() + r * k, k);
  std::vector<double> y(m * n);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) s += static_cast<double>(wd[r * k + e]) * x[t * k + e];
      y[t * n + r] = s;
    }
  return y;
}

double g_worst = 0;  // worst NMSE of the current dtype (printed)

void check(const std::vector<float>& y, const std::vector<double>& ref, double budget, const std::string& what) {
  for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << what << " non-finite at " << i;
  double e = 0, r = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    e += (y[i] - ref[i]) * (y[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  ASSERT_GT(r, 0) << what;
  EXPECT_LE(e / r, budget) << what;
  g_worst = std::max(g_worst, e / r);
}

class LinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(LinearTest, AllIsaLevelsAndShapes) {
  const Case c = GetParam();
  const int64_t bs = dtype_traits(c.t).block_size;
  // odd N (partial row groups); K = a few blocks (256 multiples for the k-quants)
  std::vector<std::pair<int64_t, int64_t>> shapes = {{37, bs == 256 ? 256 : 96}, {19, 512}};
  if (bs == 1) shapes.push_back({5, 37});  // float weights: K need not be a multiple of anything
  const std::vector<int64_t> ms = {1, 2, 3, 7, 16, 33, 128, 512};
  ThreadPool pool1(1), pool2(2);
  g_worst = 0;
  for (auto [n, k] : shapes) {
    const Tensor w = make_weight(c.t, n, k, static_cast<uint32_t>(n * 31 + k));
    const int64_t max_m = ms.back();
    const auto x = gaussian(max_m * k, static_cast<uint32_t>(k), 1.0f);
    const auto ref_all = reference(w, x, max_m);
    for (IsaLevel isa : cpu::supported_isa_levels()) {
      auto lw = prepare_linear(w, "w", isa);
      ASSERT_TRUE(lw.ok()) << lw.status().to_string();
      EXPECT_EQ(linear_weight_isa(**lw), isa);
      for (int64_t m : ms) {
        for (ThreadPool* pool : {&pool1, &pool2}) {
          if (pool == &pool2 && m != 1 && m != 7 && m != 128) continue;  // threads: a few sizes
          std::vector<float> y(m * n, NAN);
          linear(**lw, x.data(), m, y.data(), *pool);
          const std::vector<double> ref(ref_all.begin(), ref_all.begin() + m * n);
          check(y, ref, c.nmse_budget,
                std::string(dtype_name(c.t)) + " " + isa_level_name(isa) + " M=" + std::to_string(m) +
                    " N=" + std::to_string(n) + " K=" + std::to_string(k) + " threads=" + std::to_string(pool->size()));
        }
      }
    }
  }
  std::printf("%s: worst nmse %.3g (budget %.3g)\n", std::string(dtype_name(c.t)).c_str(), g_worst, c.nmse_budget);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest,
                         ::testing::Values(Case{DType::kF32, 1e-11}, Case{DType::kF16, 1e-11},
                                           Case{DType::kBF16, 1e-11}, Case{DType::kQ4_0, 1e-4},
                                           Case{DType::kQ4_1, 1e-4}, Case{DType::kQ5_0, 1e-4},
                                           Case{DType::kQ5_1, 1e-4}, Case{DType::kQ8_0, 1e-4},
                                           Case{DType::kQ4_K, 1e-4}, Case{DType::kQ5_K, 1e-4},
                                           Case{DType::kQ6_K, 1e-4}, Case{DType::kQ2_K, 1e-4},
                                           Case{DType::kQ3_K, 1e-4}, Case{DType::kIQ4_NL, 1e-4},
                                           Case{DType::kIQ4_XS, 1e-4}, Case{DType::kTQ1_0, 1e-4},
                                           Case{DType::kTQ2_0, 1e-4}),
                         [](const auto& info) { return std::string(dtype_name(info.param.t)); });

// Weights made by the gguf package (testdata/quant: legacy formats quantized by gguf, k-quants
// random blocks, so every scale/min bit pattern occurs) through every level's packing and kernels.
TEST(LinearGguf, FixtureWeightsAllLevels) {
  ThreadPool pool(1);
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "bf16", "q2_k", "q3_k",
                           "iq4_nl", "iq4_xs", "tq1_0", "tq2_0"}) {
    const DType t = *dtype_from_name(name);
    std::ifstream f(test::testdata_dir() + "/quant/" + name + ".q", std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const int64_t n = 8, k = 512;
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), n * row_bytes(t, k)) << name;
    Tensor w = Tensor::empty(t, {n, k});
    std::memcpy(w.data(), bytes.data(), bytes.size());
    const int64_t m = 9;
    const auto x = gaussian(m * k, 77);
    const auto ref = reference(w, x, m);
    for (IsaLevel isa : cpu::supported_isa_levels()) {
      auto lw = prepare_linear(w, name, isa);
      ASSERT_TRUE(lw.ok());
      for (int64_t mm : {int64_t{1}, m}) {
        std::vector<float> y(mm * n, NAN);
        linear(**lw, x.data(), mm, y.data(), pool);
        check(y, std::vector<double>(ref.begin(), ref.begin() + mm * n), 1e-4,
              std::string(name) + " fixture " + isa_level_name(isa) + " M=" + std::to_string(mm));
      }
    }
  }
}

TEST(LinearFused, MatchesSeparateCalls) {
  ThreadPool pool(2);
  const Tensor gate = make_weight(DType::kQ4_1, 40, 64, 1), up = make_weight(DType::kQ4_1, 24, 64, 2);
  auto fused = prepare_linear_fused({gate, up}, "gate_up");
  ASSERT_TRUE(fused.ok());
  auto g = prepare_linear(gate, "gate");
  auto u = prepare_linear(up, "up");
  const int64_t m = 3;
  const auto x = gaussian(m * 64, 5);
  std::vector<float> yf(m * 64), yg(m * 40), yu(m * 24);
  linear(**fused, x.data(), m, yf.data(), pool);
  linear(**g, x.data(), m, yg.data(), pool);
  linear(**u, x.data(), m, yu.data(), pool);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(yf[t * 64 + i], yg[t * 40 + i]);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(yf[t * 64 + 40 + i], yu[t * 24 + i]);
  }
  EXPECT_FALSE(prepare_linear_fused({gate, make_weight(DType::kQ4_1, 8, 96, 3)}, "bad_k").ok());
}

// Fused parts of different dtypes (llama-quantize's mixes: attn_v / ffn_down a type higher): one
// group per dtype run, each written into its columns; bit-identical to separate linear() calls at
// every level and token count, and the groups are what linear_weight_parts returns.
TEST(LinearFused, MixedDtypesMatchSeparateCalls) {
  ThreadPool pool(2);
  const int64_t k = 512;
  const std::vector<std::vector<std::pair<DType, int64_t>>> mixes = {
      {{DType::kQ5_0, 40}, {DType::kQ5_0, 24}, {DType::kQ8_0, 24}},      // c offsets differ (vnni)
      {{DType::kQ4_K, 48}, {DType::kQ4_K, 16}, {DType::kQ6_K, 16}},      // c16 for the last group only
      {{DType::kQ3_K, 33}, {DType::kQ2_K, 17}, {DType::kIQ4_XS, 9}},     // three groups
      {{DType::kIQ4_NL, 20}, {DType::kF16, 12}, {DType::kIQ4_NL, 12}},  // float between integer groups
      {{DType::kTQ2_0, 24}, {DType::kQ4_0, 16}, {DType::kQ3_K, 16}, {DType::kQ6_K, 8}},  // c offsets 1, 8; c16 shared
  };
  for (const auto& mix : mixes) {
    std::vector<Tensor> ws;
    int64_t n = 0;
    for (const auto& [t, rows] : mix) {
      ws.push_back(make_weight(t, rows, k, static_cast<uint32_t>(n + rows)));
      n += rows;
    }
    for (IsaLevel isa : cpu::supported_isa_levels()) {
      auto fused = prepare_linear_fused(ws, "mixed", isa);
      ASSERT_TRUE(fused.ok()) << fused.status().to_string();
      const std::vector<Tensor> parts = linear_weight_parts(**fused);
      int64_t groups = 1;
      for (size_t i = 1; i < mix.size(); ++i) groups += mix[i].first != mix[i - 1].first;
      ASSERT_EQ(static_cast<int64_t>(parts.size()), groups);
      EXPECT_EQ(linear_weight_mixed(**fused), groups > 1);
      EXPECT_EQ(linear_weight_tensor(**fused).dim(0), n);
      int64_t rows = 0;
      for (const Tensor& p : parts) {
        EXPECT_EQ(p.dim(1), k);
        rows += p.dim(0);
      }
      EXPECT_EQ(rows, n);
      for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{33}}) {
        const auto x = gaussian(m * k, static_cast<uint32_t>(m));
        std::vector<float> yf(m * n, NAN);
        linear(**fused, x.data(), m, yf.data(), pool);
        int64_t col = 0;
        for (size_t i = 0; i < ws.size(); ++i) {
          auto one = prepare_linear(ws[i], "one", isa);
          ASSERT_TRUE(one.ok());
          const int64_t ni = ws[i].dim(0);
          std::vector<float> yi(m * ni);
          linear(**one, x.data(), m, yi.data(), pool);
          for (int64_t t = 0; t < m; ++t)
            for (int64_t j = 0; j < ni; ++j)
              ASSERT_EQ(yf[t * n + col + j], yi[t * ni + j])
                  << isa_level_name(isa) << " part " << i << " (" << dtype_name(ws[i].dtype()) << ") M=" << m;
          col += ni;
        }
      }
    }
    // kScalar keeps the originals: stacking the parts' rows gives the weights
    auto plain = prepare_linear_fused(ws, "mixed", IsaLevel::kScalar);
    ASSERT_TRUE(plain.ok());
    size_t wi = 0;
    for (const Tensor& p : linear_weight_parts(**plain)) {
      ASSERT_NE(p.data(), nullptr);
      int64_t row = 0;
      while (row < p.dim(0)) {
        ASSERT_EQ(ws[wi].dtype(), p.dtype());
        EXPECT_EQ(std::memcmp(p.row_ptr(row), ws[wi].data(), static_cast<size_t>(ws[wi].nbytes())), 0);
        row += ws[wi].dim(0);
        ++wi;
      }
    }
    EXPECT_EQ(wi, ws.size());
  }
}

// Enough row groups that 2 threads split the groups (not the tokens) for a GEMM-sized M, with a
// partial last group; every level.
TEST(LinearThreads, GroupSplitMatchesReference) {
  ThreadPool pool(2);
  for (DType t : {DType::kQ4_0, DType::kQ4_K, DType::kF16}) {
    const int64_t n = 301, k = 256, m = 33;
    const Tensor w = make_weight(t, n, k, 11);
    const auto x = gaussian(m * k, 12);
    const auto ref = reference(w, x, m);
    for (IsaLevel isa : cpu::supported_isa_levels()) {
      std::vector<float> y(m * n, NAN);
      linear(**prepare_linear(w, "w", isa), x.data(), m, y.data(), pool);
      check(y, ref, t == DType::kF16 ? 1e-11 : 1e-4,
            std::string(dtype_name(t)) + " group split " + isa_level_name(isa));
    }
  }
}

// Batch invariance (the engine relies on it: 64 concurrent greedy requests must give exactly the
// tokens each gives alone): a token row's output is bit-identical whatever M is, wherever the row
// sits in the batch, whatever the thread count, for every dtype and ISA level. The reference for
// each row is the M = 1 (GEMV) call.
TEST(LinearBatchInvariance, RowsBitIdenticalAcrossM) {
  ThreadPool pool1(1), pool2(2);
  const std::vector<int64_t> ms = {1, 2, 7, 33, 512};
  const int64_t rows_x = 520;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL,
                  DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0}) {
    const int64_t bs = dtype_traits(t).block_size;
    // N: several groups and panels with a partial last group; K: several GEMM K blocks (and, for
    // float weights, one not a multiple of anything)
    std::vector<std::pair<int64_t, int64_t>> shapes = {{301, 512}};
    if (bs == 1) shapes.push_back({53, 389});
    for (auto [n, k] : shapes) {
      const Tensor w = make_weight(t, n, k, static_cast<uint32_t>(n + k));
      const auto x = gaussian(rows_x * k, 99, 1.0f);
      for (IsaLevel isa : cpu::supported_isa_levels()) {
        auto lw = prepare_linear(w, "w", isa);
        ASSERT_TRUE(lw.ok());
        std::vector<float> ref(rows_x * n);
        for (int64_t r = 0; r < rows_x; ++r) linear(**lw, x.data() + r * k, 1, ref.data() + r * n, pool1);
        for (int64_t m : ms) {
          for (int64_t start : {int64_t{0}, int64_t{5}, rows_x - m}) {
            for (ThreadPool* pool : {&pool1, &pool2}) {
              std::vector<float> y(m * n, NAN);
              linear(**lw, x.data() + start * k, m, y.data(), *pool);
              const std::string what = std::string(dtype_name(t)) + " " + isa_level_name(isa) + " N=" +
                                       std::to_string(n) + " K=" + std::to_string(k) + " M=" + std::to_string(m) +
                                       " start=" + std::to_string(start) + " threads=" + std::to_string(pool->size());
              ASSERT_EQ(std::memcmp(y.data(), ref.data() + start * n, y.size() * sizeof(float)), 0) << what;
            }
          }
        }
      }
    }
  }
}

TEST(LinearIsa, CapLimitsPreparedLevel) {
  const Tensor w = make_weight(DType::kQ8_0, 16, 64, 9);
  const IsaLevel best = cpu::supported_isa_levels().back();
  EXPECT_EQ(linear_weight_isa(**prepare_linear(w, "w")), best);
  set_isa_level_cap(IsaLevel::kScalar);
  EXPECT_EQ(linear_weight_isa(**prepare_linear(w, "w")), IsaLevel::kScalar);
  set_isa_level_cap(IsaLevel::kAmx);
  EXPECT_EQ(cpu::active_isa_level(), best);
}

TEST(LinearFrontEnd, RejectsBadWeights) {
  EXPECT_FALSE(prepare_linear(Tensor(), "none").ok());
  EXPECT_FALSE(prepare_linear(Tensor::zeros(DType::kF32, {4}), "1d").ok());
  EXPECT_FALSE(prepare_linear(Tensor::zeros(DType::kI32, {4, 4}), "i32").ok());
}

TEST(LinearFrontEnd, TensorFormAndWeightAccess) {
  const Tensor w = make_weight(DType::kQ8_0, 5, 64, 3);
  auto lw = prepare_linear(w, "w");
  ASSERT_TRUE(lw.ok());
  EXPECT_EQ(linear_weight_tensor(**lw).data(), w.data());
  Tensor x = Tensor::zeros(DType::kF32, {2, 64});
  Tensor y = Tensor::empty(DType::kF32, {2, 5});
  ThreadPool pool(1);
  linear(**lw, x, y, pool);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(y.data_as<float>()[i], 0.0f);
}

}  // namespace
}  // namespace pagoda
