// The CUDA backends of the op-test harness (op_cases/op_backend.h): the CUDA kernels with the
// executor's activation dtypes, f32 and bf16, each op on the path the executor dispatches to for
// that shape (backend/cuda/cuda_step_ops.cc, cuda_executor.cc): the bf16 GEMV for few rows,
// cuBLASLt otherwise; native GGUF formats through the int8 GEMV for few rows and a dequantized
// copy for cuBLASLt beyond; every other weight format converted at load (device_weight_format).
// Without a GPU, or in a build without the CUDA backend, every case skips with the reason.
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "op_cases/op_backend.h"
#include "quant/quant.h"

#if PAGODA_HAVE_CUDA
#include <memory>

#include "backend/cuda/blas.h"
#include "backend/cuda/device_weight.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "cuda_fixtures.h"
#endif

namespace pagoda::test {
namespace {

class CudaOpBackend final : public OpBackend {
 public:
  explicit CudaOpBackend(DType compute) : compute_(compute) {}
  std::string name() const override { return compute_ == DType::kF32 ? "cuda_f32" : "cuda_bf16"; }
  std::string unavailable() const override {
    std::string why;
    if (!cuda_available(&why)) return "GPU test skipped: " + why;
    return {};
  }
  // bf16 activations and bf16-converted weights: ~2^-9 relative error per operand.
  double activation_nmse() const override { return compute_ == DType::kBF16 ? 3e-5 : 0.0; }

#if PAGODA_HAVE_CUDA
  std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t D,
                              double eps) override {
    auto dx = to_device(x), dw = to_device(w);
    cuda::DeviceBuffer y(T * D * 4);
    cuda::rms_norm(dx.as<float>(), nullptr, T, D, dw.as<float>(), static_cast<float>(eps), y.get(), compute_, nullptr);
    return download_as(y, T * D, compute_);
  }
  std::vector<float> gated_activation(const std::vector<float>& gate_up, int64_t T, int64_t F,
                                      GateActivation act) override {
    auto dgu = upload_as(gate_up, compute_);
    cuda::DeviceBuffer out(T * F * 4);
    if (act == GateActivation::kSilu)
      cuda::swiglu(dgu.get(), T, F, out.get(), compute_, nullptr);
    else
      cuda::geglu_tanh(dgu.get(), T, F, out.get(), compute_, nullptr);
    return download_as(out, T * F, compute_);
  }
  // The embedding kernel reads f32, f16 and bf16 tables; the loader converts other tables first.
  bool embeds_exactly(DType t) const override { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
  std::vector<float> embedding(const Tensor& table, const std::vector<int32_t>& ids) override {
    const int64_t T = static_cast<int64_t>(ids.size()), D = table.dim(1);
    std::vector<uint8_t> bytes(static_cast<const uint8_t*>(table.data()),
                               static_cast<const uint8_t*>(table.data()) + table.dim(0) * table.row_bytes());
    auto dt = to_device(bytes), dids = to_device(ids);
    cuda::DeviceBuffer out(T * D * 4);
    cuda::embedding(dt.get(), table.dtype(), dids.as<int32_t>(), T, D, out.as<float>(), nullptr);
    return to_host<float>(out, T * D);
  }
  std::vector<float> linear(const Tensor& w, const std::vector<float>& x, int64_t M) override {
    const int64_t N = w.dim(0), K = w.dim(1);
    const DType dev = cuda::device_weight_format(w.dtype(), K, compute_, /*native_quant=*/true);
    auto dx = upload_as(x, compute_);
    cuda::DeviceBuffer y(M * N * 4);
    if (is_quantized(dev)) {
      std::vector<uint8_t> blocks(static_cast<size_t>(N * cuda::device_row_bytes(dev, K)));
      cuda::to_device_quant_layout(dev, static_cast<const uint8_t*>(w.data()), blocks.data(), N, K);
      auto dw = to_device(blocks);
      if (M <= cuda::kQuantGemvMaxM) {
        cuda::DeviceBuffer q(M * K), ds(M * (K / 32) * sizeof(float2));
        cuda::quantize_activations_q8(dx.get(), compute_, M, K, q.as<int8_t>(), ds.as<float2>(), nullptr);
        cuda::gemv_quant(q.as<int8_t>(), ds.as<float2>(), dw.get(), dev, M, N, K, y.get(), N, cuda::GemmOut::kStoreF32,
                         nullptr);
      } else {
        cuda::DeviceBuffer deq(N * K * 4);
        cuda::dequantize_weight(dw.get(), dev, N, K, deq.get(), compute_, nullptr);
        blas().matmul(dx.get(), deq.get(), compute_, M, N, K, y.get(), DType::kF32, false, nullptr);
      }
    } else {
      std::vector<float> wf(N * K);
      for (int64_t r = 0; r < N; ++r) quant::dequantize_row(w.dtype(), w.row_ptr(r), wf.data() + r * K, K);
      auto dw = upload_as(wf, dev);
      if (dev == DType::kBF16 && M <= cuda::kGemvMaxM && cuda::gemv_supported(M, K))
        cuda::gemv_bf16(dx.get(), dw.get(), M, N, K, y.get(), N, cuda::GemmOut::kStoreF32, nullptr);
      else
        blas().matmul(dx.get(), dw.get(), dev, M, N, K, y.get(), DType::kF32, false, nullptr);
    }
    return to_host<float>(y, M * N);
  }

 private:
  cuda::BlasLt& blas() {
    if (!blas_) blas_ = std::make_unique<cuda::BlasLt>();
    return *blas_;
  }
  std::unique_ptr<cuda::BlasLt> blas_;
#else
  // Never called: every case skips in SetUp (unavailable()).
  std::vector<float> rms_norm(const std::vector<float>&, const std::vector<float>&, int64_t, int64_t, double) override {
    return {};
  }
  std::vector<float> gated_activation(const std::vector<float>&, int64_t, int64_t, GateActivation) override { return {}; }
  bool embeds_exactly(DType) const override { return false; }
  std::vector<float> embedding(const Tensor&, const std::vector<int32_t>&) override { return {}; }
  std::vector<float> linear(const Tensor&, const std::vector<float>&, int64_t) override { return {}; }
#endif

 private:
  DType compute_;
};

}  // namespace

std::vector<std::shared_ptr<OpBackend>> make_op_backends() {
  return {std::make_shared<CudaOpBackend>(DType::kF32), std::make_shared<CudaOpBackend>(DType::kBF16)};
}

}  // namespace pagoda::test
