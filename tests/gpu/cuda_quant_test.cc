// The native quantized matmuls of the CUDA backend (quant_matmul.cu) against plain references, per
// GGUF format: dequantize_weight against the host's quant::dequantize_row (the same values), and
// the int8 GEMV (every mode, M = 1 .. kQuantGemvMaxM) against a double matmul over the
// dequantized weights and the unquantized activations, within the int8-activation error budget,
// and the tensor-core matmul (every mode, M up to kQuantMmaMaxM) against one over the bf16-rounded
// dequantized weights, within f32 summation error.
// rms_norm_q8 (the norm fused with the activation quantization, which the executor runs before
// the q/k/v, gate/up and lm_head GEMVs) gives the bits of rms_norm then quantize_activations_q8
// (bf16 and f32 rows, D 64 .. 14336, a zero row, gathered rows).
// Weights are quantized on the host by quant::quantize_row (the reference quantizers), with row
// counts and K that are not multiples of the kernel's tiles, and uploaded in the device layout
// (backend/cuda/quant_layout.h: planar rows padded to 16 bytes; K such that rows need padding and
// such that they do not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/half.h"
#include "gpu_test_util.h"
#include "quant/quant.h"
#include "test_util.h"

#if PAGODA_HAVE_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#endif

namespace pagoda {
namespace {

#if !PAGODA_HAVE_CUDA
TEST(CudaQuant, Skipped) { PAGODA_REQUIRE_GPU(); }
#else

using test::nmse;
using test::random_floats;
using test::to_device;
using test::to_host;

const DType kFormats[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                          DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

struct QuantizedMatrix {
  std::vector<uint8_t> blocks;  // [N] rows of row_bytes(format, K), the file's layout
  std::vector<float> values;    // [N, K] the host's dequantization of them
};

// The blocks on the device, in the layout the kernels read.
cuda::DeviceBuffer upload(DType f, const QuantizedMatrix& q, int64_t N, int64_t K) {
  std::vector<uint8_t> dev(static_cast<size_t>(N * cuda::device_row_bytes(f, K)));
  cuda::to_device_quant_layout(f, q.blocks.data(), dev.data(), N, K);
  return to_device(dev);
}

QuantizedMatrix quantize_matrix(DType f, int64_t N, int64_t K, uint32_t seed) {
  const auto w = random_floats(N * K, seed, -1, 1);
  QuantizedMatrix q;
  const int64_t rb = row_bytes(f, K);
  q.blocks.resize(static_cast<size_t>(N * rb));
  q.values.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    quant::quantize_row(f, w.data() + n * K, q.blocks.data() + n * rb, K);
    quant::dequantize_row(f, q.blocks.data() + n * rb, q.values.data() + n * K, K);
  }
  return q;
}

std::vector<float> bf16_round(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
  return o;
}
std::vector<float> matmul_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * w[n * K + k];
      y[m * N + n] = static_cast<float>(acc);
    }
  return y;
}

// (acc - base) over [M, ld] against ref [M, N] with zeros past N: what a kAddF32 call added.
void added_part(const std::vector<float>& acc, const std::vector<float>& base, const std::vector<float>& ref, int64_t M,
                int64_t N, int64_t ld, std::vector<float>& got, std::vector<float>& want) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ld; ++n) {
      got.push_back(acc[m * ld + n] - base[m * ld + n]);
      want.push_back(n < N ? ref[m * N + n] : 0.0f);
    }
}

TEST(CudaQuant, DequantizeMatchesTheHost) {
  PAGODA_REQUIRE_GPU();
  for (DType f : kFormats) {
    ASSERT_TRUE(cuda::quant_weight_supported(f)) << dtype_name(f);
    EXPECT_EQ(cuda::planar_quant_layout(f), f != DType::kQ4_K && f != DType::kQ5_K) << dtype_name(f);
    // 512 and 2048: rows of whole 16-byte multiples but for Q6_K at 512 (420 bytes, padded);
    // 288: padded rows for every format.
    for (int64_t K : {512, 2048, 288}) {
      if (K % dtype_traits(f).block_size != 0) continue;
      const int64_t N = 37;
      const auto q = quantize_matrix(f, N, K, 7);
      auto dw = upload(f, q, N, K);
      cuda::DeviceBuffer out(N * K * 4);
      cuda::dequantize_weight(dw.get(), f, N, K, out.get(), DType::kF32, nullptr);
      const auto got = to_host<float>(out, N * K);
      double worst = 0;
      for (int64_t i = 0; i < N * K; ++i) worst = std::max(worst, double(std::fabs(got[i] - q.values[i])));
      EXPECT_LE(worst, 1e-6) << dtype_name(f);
      cuda::dequantize_weight(dw.get(), f, N, K, out.get(), DType::kBF16, nullptr);
      // bf16 is the f32 value rounded (as values: the host may give -0 where the device gives +0).
      EXPECT_EQ(from_bf16(to_host<uint16_t>(out, N * K)), from_bf16(to_bf16(q.values))) << dtype_name(f);
    }
  }
  EXPECT_FALSE(cuda::quant_weight_supported(DType::kBF16));
  EXPECT_FALSE(cuda::quant_weight_supported(DType::kIQ4_XS));
}

TEST(CudaQuant, GemvMatchesTheDequantizedMatmulInEveryMode) {
  PAGODA_REQUIRE_GPU();
  for (DType f : kFormats) {
    // 256, 2816, 288: rows with and without padding; 8448: two rows a warp (K >= 8192).
    for (int64_t K : {256, 2816, 288, 8448}) {
      if (K % dtype_traits(f).block_size != 0) continue;
      const int64_t N = K > 4096 ? 2 * 9 : 2 * 77;  // even: [gate; up] for SwiGLU
      const auto q = quantize_matrix(f, N, K, 11 + static_cast<uint32_t>(K));
      auto dw = upload(f, q, N, K);
      for (int64_t M = 1; M <= cuda::kQuantGemvMaxM; ++M) {
        const auto x = bf16_round(random_floats(M * K, 30 + static_cast<uint32_t>(M), -2, 2));
        auto dx = to_device(to_bf16(x));
        cuda::DeviceBuffer xq(M * K), xds(M * (K / 32) * 8);
        cuda::quantize_activations_q8(dx.get(), DType::kBF16, M, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
        const auto ref = matmul_ref(x, q.values, M, N, K);
        const std::string where = std::string(dtype_name(f)) + " K " + std::to_string(K) + " M " + std::to_string(M);
        // int8 activations: about 2^-8 relative error an input, averaging out over K.
        constexpr double kBudget = 1e-4;
        cuda::DeviceBuffer y(M * N * 4);
        cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, y.get(), N, cuda::GemmOut::kStoreF32,
                         nullptr);
        const auto got = to_host<float>(y, M * N);
        EXPECT_LT(nmse(got, ref), kBudget) << where;
        // Accumulate into a prefilled y with a row stride wider than N.
        const int64_t ld = N + 5;
        const auto base = random_floats(M * ld, 5);
        auto dyb = to_device(base);
        cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, dyb.get(), ld, cuda::GemmOut::kAddF32,
                         nullptr);
        const auto acc = to_host<float>(dyb, M * ld);
        std::vector<float> acc_got, acc_ref;
        added_part(acc, base, ref, M, N, ld, acc_got, acc_ref);
        EXPECT_LT(nmse(acc_got, acc_ref), kBudget) << where << " (add)";
        cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, y.get(), N, cuda::GemmOut::kStoreAct,
                         nullptr);
        EXPECT_LT(nmse(from_bf16(to_host<uint16_t>(y, M * N)), ref), kBudget) << where << " (bf16)";
        const int64_t F = N / 2;
        cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, y.get(), F, cuda::GemmOut::kSwiGlu,
                         nullptr);
        std::vector<float> sw(M * F);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t i = 0; i < F; ++i) {
            const float g = ref[m * N + i], u = ref[m * N + F + i];
            sw[m * F + i] = g / (1.0f + std::exp(-g)) * u;
          }
        EXPECT_LT(nmse(from_bf16(to_host<uint16_t>(y, M * F)), sw), kBudget) << where << " (swiglu)";
      }
    }
  }
}

TEST(CudaQuant, TensorCoreMatmulMatchesTheBf16DequantizedMatmulInEveryMode) {
  PAGODA_REQUIRE_GPU();
  // The kernel multiplies the bf16 values dequantize_weight writes by bf16 activations with f32
  // accumulation: against a double matmul over those same bf16 weights the error is f32 summation
  // only (bf16 outputs: their rounding). K 288 and 2816: a last round of 1 and 3 units (9 and 88
  // units); N = 154 and 18: a last column tile of 2; M across the one- and four-m-tile kernels.
  for (DType f : kFormats) {
    for (int64_t K : {256, 2816, 288, 8448}) {
      if (K % dtype_traits(f).block_size != 0) continue;
      const int64_t N = K > 4096 ? 2 * 9 : 2 * 77;  // even: [gate; up] for SwiGLU
      const auto q = quantize_matrix(f, N, K, 13 + static_cast<uint32_t>(K));
      const auto wv = bf16_round(q.values);
      auto dw = upload(f, q, N, K);
      for (int64_t M : {1, 3, 8, 16, 17, 40, 64}) {
        const auto x = bf16_round(random_floats(M * K, 70 + static_cast<uint32_t>(M), -2, 2));
        auto dx = to_device(to_bf16(x));
        const auto ref = matmul_ref(x, wv, M, N, K);
        const std::string where = std::string(dtype_name(f)) + " K " + std::to_string(K) + " M " + std::to_string(M);
        constexpr double kF32Budget = 1e-9, kBf16Budget = 2e-5;
        // Stored into y with a guard column past N.
        const int64_t ld = N + 3;
        std::vector<float> init(static_cast<size_t>(M * ld), 1234.5f);
        auto dy = to_device(init);
        cuda::gemm_quant_mma(dx.get(), dw.get(), f, M, N, K, dy.get(), ld, cuda::GemmOut::kStoreF32, nullptr);
        const auto y = to_host<float>(dy, M * ld);
        std::vector<float> got;
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) got.push_back(y[m * ld + n]);
          for (int64_t n = N; n < ld; ++n) ASSERT_EQ(y[m * ld + n], 1234.5f) << where << " guard";
        }
        EXPECT_LT(nmse(got, ref), kF32Budget) << where;
        // A row's result does not depend on M: the first row alone (M = 1) gives the same bits.
        auto d1 = to_device(to_bf16(std::vector<float>(x.begin(), x.begin() + K)));
        cuda::DeviceBuffer y1(N * 4);
        cuda::gemm_quant_mma(d1.get(), dw.get(), f, 1, N, K, y1.get(), N, cuda::GemmOut::kStoreF32, nullptr);
        const auto one = to_host<float>(y1, N);
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(one[n], got[n]) << where << " row 0 at M = 1, column " << n;
        // Accumulated into a prefilled y.
        const auto base = random_floats(M * ld, 5);
        auto dyb = to_device(base);
        cuda::gemm_quant_mma(dx.get(), dw.get(), f, M, N, K, dyb.get(), ld, cuda::GemmOut::kAddF32, nullptr);
        const auto acc = to_host<float>(dyb, M * ld);
        std::vector<float> acc_got, acc_ref;
        added_part(acc, base, ref, M, N, ld, acc_got, acc_ref);
        EXPECT_LT(nmse(acc_got, acc_ref), kF32Budget) << where << " (add)";
        cuda::DeviceBuffer yb(M * N * 2);
        cuda::gemm_quant_mma(dx.get(), dw.get(), f, M, N, K, yb.get(), N, cuda::GemmOut::kStoreAct, nullptr);
        EXPECT_LT(nmse(from_bf16(to_host<uint16_t>(yb, M * N)), ref), kBf16Budget) << where << " (bf16)";
        const int64_t F = N / 2;
        cuda::gemm_quant_mma(dx.get(), dw.get(), f, M, N, K, yb.get(), F, cuda::GemmOut::kSwiGlu, nullptr);
        std::vector<float> sw(M * F);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t i = 0; i < F; ++i) {
            const float g = bf16_to_f32(f32_to_bf16(ref[m * N + i])), u = bf16_to_f32(f32_to_bf16(ref[m * N + F + i]));
            sw[m * F + i] = g / (1.0f + std::exp(-g)) * u;
          }
        EXPECT_LT(nmse(from_bf16(to_host<uint16_t>(yb, M * F)), sw), kBf16Budget) << where << " (swiglu)";
      }
    }
  }
}

TEST(CudaQuant, TwoRowGemvStoresAnOddLastRowOnce) {
  PAGODA_REQUIRE_GPU();
  // K >= 8192 puts two rows in a warp; with N odd the last warp has one row to store, and the
  // output past it (a guard value) must stay.
  for (DType f : kFormats) {
    const int64_t N = 19, K = 8448, M = 2;
    const auto q = quantize_matrix(f, N, K, 21);
    auto dw = upload(f, q, N, K);
    const auto x = bf16_round(random_floats(M * K, 4, -2, 2));
    auto dx = to_device(to_bf16(x));
    cuda::DeviceBuffer xq(M * K), xds(M * (K / 32) * 8);
    cuda::quantize_activations_q8(dx.get(), DType::kBF16, M, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
    const int64_t ld = N + 1;
    std::vector<float> init(M * ld, 1234.5f);
    auto dy = to_device(init);
    cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, dy.get(), ld, cuda::GemmOut::kStoreF32,
                     nullptr);
    const auto y = to_host<float>(dy, M * ld);
    const auto ref = matmul_ref(x, q.values, M, N, K);
    std::vector<float> got;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) got.push_back(y[m * ld + n]);
      EXPECT_EQ(y[m * ld + N], 1234.5f) << dtype_name(f) << " row " << m;
    }
    EXPECT_LT(nmse(got, ref), 1e-4) << dtype_name(f);
  }
}

TEST(CudaQuant, AllZeroActivationsGiveZeroAndTheMinTerm) {
  PAGODA_REQUIRE_GPU();
  // d = 0 for an all-zero input block must not divide by zero: y = x W^T = 0 for every format.
  for (DType f : kFormats) {
    const int64_t N = 8, K = 256;
    const auto q = quantize_matrix(f, N, K, 3);
    auto dw = upload(f, q, N, K);
    std::vector<uint16_t> zeros(K, 0);
    auto dx = to_device(zeros);
    cuda::DeviceBuffer xq(K), xds((K / 32) * 8), y(N * 4);
    cuda::quantize_activations_q8(dx.get(), DType::kBF16, 1, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
    cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, 1, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
    for (float v : to_host<float>(y, N)) EXPECT_EQ(v, 0.0f) << dtype_name(f);
  }
}

TEST(CudaQuant, FusedNormQuantizationEqualsTheTwoKernels) {
  PAGODA_REQUIRE_GPU();
  // rms_norm_q8 against rms_norm into the activation dtype then quantize_activations_q8 (what the
  // unfused path runs): the same codes and (d, d * sum) bits. D 160 and 4160: a last float4 pass of
  // a quarter and a half warp (lane groups of 8 without the rest of their warp); 64: the tiny test
  // models' width; the 8B-class widths. Row 2 is zero (d = 0), row 3 tiny, row 4 large.
  for (int64_t D : {64, 128, 160, 4096, 4160, 5120, 8192, 14336}) {
    for (DType act : {DType::kBF16, DType::kF32}) {
      for (bool gather : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "D " << D << " " << dtype_name(act) << (gather ? " gathered rows" : ""));
        const int64_t T = 7;
        std::vector<float> x = random_floats(T * D, 17 + static_cast<uint32_t>(D), -4.0f, 4.0f);
        for (int64_t k = 0; k < D; ++k) {
          x[static_cast<size_t>(2 * D + k)] = 0.0f;
          x[static_cast<size_t>(3 * D + k)] *= 1e-6f;
          x[static_cast<size_t>(4 * D + k)] *= 1e4f;
        }
        const std::vector<float> w = random_floats(D, 23, -1.5f, 1.5f);
        const std::vector<int32_t> rows = {6, 2, 0, 3, 3, 4};
        const int64_t n = gather ? static_cast<int64_t>(rows.size()) : T;
        auto dx = to_device(x), dw = to_device(w), dr = to_device(rows);
        const int32_t* rp = gather ? dr.as<int32_t>() : nullptr;
        const int64_t blocks = n * (D / 32);
        cuda::DeviceBuffer normed(n * D * 4), q1(n * D), ds1(blocks * 8), q2(n * D), ds2(blocks * 8);
        cuda::rms_norm(dx.as<float>(), rp, n, D, dw.as<float>(), 1e-5f, normed.get(), act, nullptr);
        cuda::quantize_activations_q8(normed.get(), act, n, D, q1.as<int8_t>(), ds1.as<float2>(), nullptr);
        ASSERT_TRUE(cuda::rms_norm_q8(dx.as<float>(), rp, n, D, dw.as<float>(), 1e-5f, act, q2.as<int8_t>(),
                                      ds2.as<float2>(), nullptr));
        const auto a = to_host<int8_t>(q1, n * D), b = to_host<int8_t>(q2, n * D);
        const auto da = to_host<uint32_t>(ds1, blocks * 2), db = to_host<uint32_t>(ds2, blocks * 2);
        int64_t code_diff = 0, ds_diff = 0;
        for (size_t i = 0; i < a.size(); ++i) code_diff += a[i] != b[i];
        for (size_t i = 0; i < da.size(); ++i) ds_diff += da[i] != db[i];
        EXPECT_EQ(code_diff, 0) << "codes differ";
        EXPECT_EQ(ds_diff, 0) << "(d, d * sum) bits differ";
        // Not vacuous: the codes span the int8 range and the zero row (row 2, gathered as row 1) is zero.
        EXPECT_EQ(*std::max_element(b.begin(), b.end()), 127);
        const int64_t zero_row = gather ? 1 : 2;
        for (int64_t k = 0; k < D; ++k) ASSERT_EQ(b[static_cast<size_t>(zero_row * D + k)], 0);
        for (int64_t j = 0; j < D / 32; ++j) ASSERT_EQ(db[static_cast<size_t>(2 * (zero_row * (D / 32) + j))], 0u);
      }
    }
  }
  // Where the vectorised norm does not apply, nothing is launched and the caller is told.
  cuda::DeviceBuffer x(4 * 96), w(4 * 96), q(96), ds(8 * 3);
  EXPECT_FALSE(cuda::rms_norm_q8(x.as<float>(), nullptr, 1, 80, w.as<float>(), 1e-5f, DType::kBF16, q.as<int8_t>(),
                                 ds.as<float2>(), nullptr));  // D % 32 != 0
  EXPECT_FALSE(cuda::rms_norm_q8(x.as<float>() + 1, nullptr, 1, 64, w.as<float>(), 1e-5f, DType::kBF16, q.as<int8_t>(),
                                 ds.as<float2>(), nullptr));  // unaligned rows
  EXPECT_FALSE(cuda::rms_norm_q8(x.as<float>(), nullptr, 1, 64, w.as<float>(), 1e-5f, DType::kF16, q.as<int8_t>(),
                                 ds.as<float2>(), nullptr));  // no q8 path from f16
}

#endif

}  // namespace
}  // namespace pagoda
