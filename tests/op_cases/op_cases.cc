// Op cases of the harness (op_backend.h), each written once: inputs, a plain reference
// (backend/reference, or a double-precision matmul on the dequantized weights) and an NMSE budget,
// run against every backend of the binary. Budgets: the op's own error (f32 rounding; the 8-bit
// activation quantization of the integer matmul paths) plus the backend's activation precision.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/reference_ops.h"
#include "op_cases/op_backend.h"
#include "quant/quant.h"
#include "test_util.h"

namespace pagoda::test {
namespace {

class OpCase : public ::testing::TestWithParam<std::shared_ptr<OpBackend>> {
 protected:
  void SetUp() override {
    if (const std::string why = GetParam()->unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
  OpBackend& backend() { return *GetParam(); }
};

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST_P(OpCase, RmsNorm) {
  // D = 70: no vector width divides it (scalar tails); 4096: the Llama-3-8B width.
  for (int64_t D : {70, 72, 576, 4096}) {
    for (int64_t T : {1, 5}) {
      const auto x = random_floats(T * D, 1 + D + T, -3, 3), w = random_floats(D, 2 + D, 0.5f, 1.5f);
      std::vector<float> ref(T * D);
      reference::rms_norm(x.data(), w.data(), T, D, 1e-5, ref.data());
      EXPECT_LE(nmse(backend().rms_norm(x, w, T, D, 1e-5), ref), 1e-12 + backend().activation_nmse())
          << "T " << T << " D " << D;
    }
  }
}

TEST_P(OpCase, GatedActivations) {
  for (GateActivation act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    for (int64_t F : {96, 100, 1536}) {  // 100: no 8-wide vector divides it
      const int64_t T = 3;
      const auto gu = random_floats(T * 2 * F, 4 + F, -4, 4);
      std::vector<float> ref(T * F);
      for (int64_t t = 0; t < T; ++t) {
        const float* g = gu.data() + t * 2 * F;
        if (act == GateActivation::kSilu)
          reference::swiglu(g, g + F, F, ref.data() + t * F);
        else
          reference::geglu_tanh(g, g + F, F, ref.data() + t * F);
      }
      EXPECT_LE(nmse(backend().gated_activation(gu, T, F, act), ref), 1e-10 + backend().activation_nmse())
          << (act == GateActivation::kSilu ? "silu" : "gelu_tanh") << " F " << F;
    }
  }
}

// Every table dtype a GGUF file may store its token embedding in.
const DType kTableTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};

TEST_P(OpCase, EmbeddingGathersExactRows) {
  const int64_t V = 50, D = 256;
  const auto values = random_floats(V * D, 3, -1, 1);
  const std::vector<int32_t> ids = {7, 0, 49, 7, 13};
  int exact_types = 0;
  for (DType t : kTableTypes) {
    if (!backend().embeds_exactly(t)) continue;
    ++exact_types;
    Tensor table = Tensor::empty(t, {V, D});
    for (int64_t r = 0; r < V; ++r) quant::quantize_row(t, values.data() + r * D, table.row_ptr(r), D);
    std::vector<float> row(D);
    const auto got = backend().embedding(table, ids);
    ASSERT_EQ(got.size(), ids.size() * D);
    for (size_t i = 0; i < ids.size(); ++i) {
      quant::dequantize_row(t, table.row_ptr(ids[i]), row.data(), D);
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(got[i * D + d], row[d]) << dtype_name(t) << " id " << ids[i] << " d " << d;
    }
  }
  EXPECT_GE(exact_types, 3) << "f32, f16 and bf16 tables at least";
}

// Every weight format of llama.cpp's quantizer that the loader accepts, with the NMSE of its
// matmul path (the integer paths quantize activations to 8 bits per 32 inputs).
struct Format {
  DType t;
  double budget;
};
const Format kFormats[] = {
    {DType::kF32, 1e-10},  {DType::kF16, 1e-10},  {DType::kBF16, 1e-10},  {DType::kQ4_0, 1e-4},  {DType::kQ4_1, 1e-4},
    {DType::kQ5_0, 1e-4},  {DType::kQ5_1, 1e-4},  {DType::kQ8_0, 1e-4},   {DType::kQ2_K, 1e-4},  {DType::kQ3_K, 1e-4},
    {DType::kQ4_K, 1e-4},  {DType::kQ5_K, 1e-4},  {DType::kQ6_K, 1e-4},   {DType::kIQ4_NL, 1e-4}, {DType::kIQ4_XS, 1e-4},
    {DType::kTQ1_0, 1e-4}, {DType::kTQ2_0, 1e-4},
};

// y_ref[m, n] = sum_k dequant(w)[n, k] * x[m, k] in double.
std::vector<float> matmul_reference(const Tensor& w, const std::vector<float>& x, int64_t M) {
  const int64_t N = w.dim(0), K = w.dim(1);
  std::vector<float> wd(N * K), y(M * N);
  for (int64_t r = 0; r < N; ++r) quant::dequantize_row(w.dtype(), w.row_ptr(r), wd.data() + r * K, K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(wd[n * K + k]) * x[m * K + k];
      y[m * N + n] = static_cast<float>(s);
    }
  return y;
}

// M from one row (the decode GEMVs) past every small-M path to a GEMM; N not a multiple of any tile.
TEST_P(OpCase, LinearEveryWeightFormat) {
  for (const Format& f : kFormats) {
    for (auto [N, K] : {std::pair<int64_t, int64_t>{37, 256}, {300, 1024}}) {
      Tensor w = Tensor::empty(f.t, {N, K});
      const auto src = gaussian(N * K, static_cast<uint32_t>(N * 31 + K), 0.05f);
      for (int64_t r = 0; r < N; ++r) quant::quantize_row(f.t, src.data() + r * K, w.row_ptr(r), K);
      const int64_t max_m = 64;
      const auto x = gaussian(max_m * K, static_cast<uint32_t>(K + 7), 1.0f);
      const auto ref_all = matmul_reference(w, x, max_m);
      for (int64_t M : {1, 3, 8, 9, 64}) {
        const auto y = backend().linear(w, std::vector<float>(x.begin(), x.begin() + M * K), M);
        const std::vector<float> ref(ref_all.begin(), ref_all.begin() + M * N);
        EXPECT_LE(nmse(y, ref), f.budget + backend().activation_nmse())
            << dtype_name(f.t) << " M " << M << " N " << N << " K " << K;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, OpCase, ::testing::ValuesIn(make_op_backends()),
                         [](const auto& info) { return info.param->name(); });

}  // namespace
}  // namespace pagoda::test
