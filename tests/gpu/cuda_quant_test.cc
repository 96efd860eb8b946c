// The native quantized matmuls of the CUDA backend (quant_matmul.cu) against plain references, per
// GGUF format: dequantize_weight against the host's quant::dequantize_row (the same values), and
// the int8 GEMV (every mode, M = 1 .. kQuantGemvMaxM) against a double matmul over the
// dequantized weights and the unquantized activations, within the int8-activation error budget,
// and the tensor-core matmul (every mode, M up to kQuantMmaMaxM) against one over the bf16-rounded
// dequantized weights, within f32 summation error.
// rms_norm_q8 (the norm fused with the activation quantization, which the executor runs before
// the q/k/v, gate/up and lm_head GEMVs) gives the bits of rms_norm then quantize_activations_q8
// (bf16 and f32 rows, D 64 .. 14336, a zero row, gathered rows). The batched-load GEMV experiment
// (gemv_quant_batched, decisions.md D81) gives gemv_quant's outputs. The GEMV that
// quantizes its own activations per block (gemv_quant_inblock, decisions.md D83) gives
// quantize_activations_q8 + gemv_quant's outputs bit for bit (every format, mode, M and input
// dtype it takes), and a quantized model gives the same logits with it on as off.
// Weights are quantized on the host by quant::quantize_row (the reference quantizers), with row
// counts and K that are not multiples of the kernel's tiles, and uploaded in the device layout
// (backend/cuda/quant_layout.h: planar rows padded to 16 bytes; K such that rows need padding and
// such that they do not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/half.h"
#include "gpu_test_util.h"
#include "model/model_loader.h"
#include "quant/quant.h"
#include "reference_data.h"
#include "runtime/cuda_executor.h"
#include "test_paths.h"
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

TEST(CudaQuant, BatchedLoadGemvExperimentMatchesTheGemv) {
  PAGODA_REQUIRE_GPU();
  // gemv_quant_batched (decisions.md D81: a lane's weight loads of kQuantGemvExperimentBatch
  // units before their dot products) sums the same products in the same order as gemv_quant: the
  // same outputs up to the compiler's contraction choices. K 256 (2 units a lane at most: a partial
  // batch), 2816 (88 units), 8448 (264: two rows a warp at M <= 2, three batches, the last partial).
  for (DType f : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t K : {256, 2816, 8448}) {
      if (K % dtype_traits(f).block_size != 0) continue;
      const int64_t N = 2 * 21;
      const auto q = quantize_matrix(f, N, K, 41 + static_cast<uint32_t>(K));
      auto dw = upload(f, q, N, K);
      for (int64_t M : {1, 2, 8}) {
        const auto x = bf16_round(random_floats(M * K, 50 + static_cast<uint32_t>(M), -2, 2));
        auto dx = to_device(to_bf16(x));
        cuda::DeviceBuffer xq(M * K), xds(M * (K / 32) * 8);
        cuda::quantize_activations_q8(dx.get(), DType::kBF16, M, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
        const std::string where = std::string(dtype_name(f)) + " K " + std::to_string(K) + " M " + std::to_string(M);
        for (cuda::GemmOut mode : {cuda::GemmOut::kStoreF32, cuda::GemmOut::kAddF32, cuda::GemmOut::kSwiGlu}) {
          const bool swiglu = mode == cuda::GemmOut::kSwiGlu;
          const int64_t ld = swiglu ? N / 2 : N, bytes = M * ld * 4;
          const auto base = random_floats(M * ld, 9);
          auto y0 = to_device(base), y1 = to_device(base);
          cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, y0.get(), ld, mode, nullptr);
          cuda::gemv_quant_batched(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, N, K, y1.get(), ld, mode, nullptr);
          std::vector<float> a, b;
          if (swiglu) {
            a = from_bf16(to_host<uint16_t>(y0, M * ld));
            b = from_bf16(to_host<uint16_t>(y1, M * ld));
          } else {
            a = to_host<float>(y0, bytes / 4);
            b = to_host<float>(y1, bytes / 4);
          }
          EXPECT_LT(nmse(b, a), swiglu ? 1e-9 : 1e-12) << where << " mode " << static_cast<int>(mode);
        }
      }
    }
  }
}

TEST(CudaQuant, InBlockQuantizationGivesTheTwoKernelsBits) {
  PAGODA_REQUIRE_GPU();
  // gemv_quant_inblock against quantize_activations_q8 + gemv_quant over the same x: the same
  // bytes in y (guard columns past N included). K 256, 4096, 14336 (two rows a warp at M <= 2)
  // and 288 (rows padded; the 32-input formats only); every M <= kQuantGemvInBlockMaxM with M x K
  // within kQuantGemvInBlockMaxInputs (the others refused); N - 1 outputs (odd: a two-row warp with one row, warps of a block
  // without rows) for the f32 / bf16 stores, N / 2 for SwiGLU; bf16 and f32 inputs with a zero
  // 32-input block (d = 0), a tiny one and a large one.
  int compared = 0;
  for (DType f : kFormats) {
    for (int64_t K : {256, 4096, 14336, 288}) {
      if (K % dtype_traits(f).block_size != 0) continue;
      const int64_t N = K > 4096 ? 2 * 9 : 2 * 77;
      const auto q = quantize_matrix(f, N, K, 61 + static_cast<uint32_t>(K));
      auto dw = upload(f, q, N, K);
      for (int64_t M = 1; M <= cuda::kQuantGemvMaxM; ++M) {
        for (DType xt : {DType::kBF16, DType::kF32}) {
          const std::string where = std::string(dtype_name(f)) + " K " + std::to_string(K) + " M " + std::to_string(M) +
                                    " x " + std::string(dtype_name(xt));
          std::vector<float> x = random_floats(M * K, 80 + static_cast<uint32_t>(M), -2, 2);
          for (int64_t k = 0; k < 32; ++k) {
            x[static_cast<size_t>(k)] = 0.0f;                             // a zero block
            x[static_cast<size_t>((M - 1) * K + K - 32 + k)] *= 1e-6f;  // tiny
          }
          for (int64_t k = 64; k < 96; ++k) x[static_cast<size_t>(k)] *= 1e4f;  // large
          cuda::DeviceBuffer dx = xt == DType::kBF16 ? to_device(to_bf16(x)) : to_device(x);
          if (M > cuda::kQuantGemvInBlockMaxM || M * K > cuda::kQuantGemvInBlockMaxInputs) {
            EXPECT_FALSE(cuda::gemv_quant_inblock_supported(dx.get(), xt, M, K)) << where;
            continue;
          }
          ASSERT_TRUE(cuda::gemv_quant_inblock_supported(dx.get(), xt, M, K)) << where;
          cuda::DeviceBuffer xq(M * K), xds(M * (K / 32) * 8);
          cuda::quantize_activations_q8(dx.get(), xt, M, K, xq.as<int8_t>(), xds.as<float2>(), nullptr);
          for (cuda::GemmOut mode : {cuda::GemmOut::kStoreF32, cuda::GemmOut::kAddF32, cuda::GemmOut::kStoreAct,
                                     cuda::GemmOut::kSwiGlu}) {
            const bool swiglu = mode == cuda::GemmOut::kSwiGlu;
            const int64_t rows = swiglu ? N : N - 1, outs = swiglu ? N / 2 : N - 1, ld = outs + 3;
            const int64_t elem = mode == cuda::GemmOut::kStoreF32 || mode == cuda::GemmOut::kAddF32 ? 4 : 2;
            const auto base = random_floats(M * ld, 9);  // prefilled y (the add mode adds into it; guards)
            std::vector<uint8_t> init(static_cast<size_t>(M * ld * elem));
            if (elem == 4) {
              std::memcpy(init.data(), base.data(), init.size());
            } else {
              const auto b16 = to_bf16(base);
              std::memcpy(init.data(), b16.data(), init.size());
            }
            auto y0 = to_device(init), y1 = to_device(init);
            cuda::gemv_quant(xq.as<int8_t>(), xds.as<float2>(), dw.get(), f, M, rows, K, y0.get(), ld, mode, nullptr);
            cuda::gemv_quant_inblock(dx.get(), xt, dw.get(), f, M, rows, K, y1.get(), ld, mode, nullptr);
            const auto a = to_host<uint8_t>(y0, init.size()), b = to_host<uint8_t>(y1, init.size());
            int64_t differ = 0;
            for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
            EXPECT_EQ(differ, 0) << where << " mode " << static_cast<int>(mode) << ": bytes of y differ";
            EXPECT_TRUE(a != init) << where << " mode " << static_cast<int>(mode) << ": nothing written";
            ++compared;
          }
          // Not vacuous: the outputs are the matmul's (the int8-activation budget of the GEMV test).
          if (xt == DType::kBF16) {
            cuda::DeviceBuffer y(M * N * 4);
            cuda::gemv_quant_inblock(dx.get(), xt, dw.get(), f, M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
            EXPECT_LT(nmse(to_host<float>(y, M * N), matmul_ref(bf16_round(x), q.values, M, N, K)), 1e-4) << where;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 8 * 4 * 2 * 4);
}

TEST(CudaQuant, InBlockQuantizationTakesWhatFitsItsSharedMemory) {
  PAGODA_REQUIRE_GPU();
  cuda::DeviceBuffer x(8 * 14336 * 4);
  const void* p = x.get();
  EXPECT_TRUE(cuda::gemv_quant_inblock_supported(p, DType::kBF16, 2, 14336));   // 8B down at batch 2
  EXPECT_TRUE(cuda::gemv_quant_inblock_supported(p, DType::kF32, 2, 4096));
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kF32, 3, 4096));   // M past kQuantGemvInBlockMaxM
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kBF16, 3, 14336));  // M x K past the limit
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kBF16, 9, 256));    // M past kQuantGemvMaxM
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kBF16, 0, 256));
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kBF16, 1, 80));     // K % 32 != 0
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(p, DType::kF16, 1, 256));     // no q8 path from f16
  EXPECT_FALSE(cuda::gemv_quant_inblock_supported(x.as<uint8_t>() + 2, DType::kBF16, 1, 256));  // unaligned
}

// A quantized model's logits (a 6-token prompt on the int8 GEMV, then greedy decode steps of one
// row, graphs included) with tuning.quant_gemv_inblock_q8 on equal those with it off, bit for bit:
// o and down (and, for the act-order checkpoint, q/k/v and gate/up + SwiGLU over the gathered
// inputs) take gemv_quant_inblock instead of quantize_activations_q8 + gemv_quant.
TEST(CudaQuant, InBlockQuantizationLeavesAModelsLogitsUnchanged) {
  PAGODA_REQUIRE_GPU();
  namespace fs = std::filesystem;
  const std::string d = test::models_dir();
  int checked = 0;
  for (const std::string& path : {d + "/tiny/llama-mqa/model-q4_0.gguf", d + "/tiny/llama3/model-q8_0.gguf",
                                  d + "/SmolLM2-135M-Instruct.Q4_1.gguf", d + "/tiny/quant/llama3-gptq-w4g32-actorder"}) {
    if (!fs::exists(path)) continue;
    ModelLoadOptions lo;
    lo.cpu_kernels = false;
    auto m = load_model(path, lo);
    ASSERT_TRUE(m.ok()) << path << ": " << m.status().to_string();
    const int64_t V = m->config.vocab_size;
    std::vector<int32_t> prompt = {1};
    for (int i = 1; i < 6; ++i) prompt.push_back(3 + (i * 37) % std::min<int>(500, m->config.vocab_size - 3));
    const int steps = 8;
    const int64_t bs = 16;
    const int64_t nblocks = (static_cast<int64_t>(prompt.size()) + steps + bs - 1) / bs + 1;
    std::vector<float> logits[2];
    for (int on = 0; on < 2; ++on) {
      KvCacheSpec spec;
      spec.num_blocks = nblocks + 3;
      spec.block_size = bs;
      spec.dtype = DType::kBF16;
      CudaExecutorOptions co;
      co.dtype = "bf16";
      co.max_num_tokens = 64;
      co.max_num_seqs = 4;
      co.max_model_len = (nblocks + 1) * bs;
      co.tuning.quant_gemv_inblock_q8 = on == 1;
      auto ex = make_cuda_executor(*m->model, spec, co);
      ASSERT_TRUE(ex.ok()) << ex.status().to_string();
      std::vector<int32_t> table;
      for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
      ForwardBatch batch;
      batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
      const Tensor& l0 = (*ex)->forward(batch);
      logits[on].assign(l0.data_as<float>(), l0.data_as<float>() + l0.numel());
      int32_t next = test::argmax(logits[on].data() + (prompt.size() - 1) * V, V);
      int32_t ctx = static_cast<int32_t>(prompt.size());
      for (int s = 0; s < steps; ++s) {  // the greedy tokens of the run with the option off
        batch.clear();
        batch.add_sequence({next}, ++ctx, table, bs);
        const Tensor& l = (*ex)->forward(batch);
        logits[on].insert(logits[on].end(), l.data_as<float>(), l.data_as<float>() + V);
        next = test::argmax(logits[0].data() + logits[on].size() - V, V);
      }
    }
    ASSERT_EQ(logits[0].size(), logits[1].size()) << path;
    int64_t differ = 0;
    for (size_t i = 0; i < logits[0].size(); ++i)
      differ += std::memcmp(&logits[0][i], &logits[1][i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << path << ": logits differ with the in-block quantization on";
    ++checked;
  }
  EXPECT_GE(checked, 2) << "quantized GGUF test models under " << d;
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
