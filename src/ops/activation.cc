#include "ops/activation.h"

#include "backend/cpu/cpu_kernels.h"

namespace pagoda {

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool) {
  PAGODA_CHECK(gate.dtype() == DType::kF32 && up.dtype() == DType::kF32 && out.dtype() == DType::kF32, "swiglu: f32 only");
  PAGODA_CHECK(gate.shape() == up.shape() && gate.shape() == out.shape(), "swiglu: gate {} up {} out {}", gate.shape_string(),
               up.shape_string(), out.shape_string());
  const int64_t n = gate.numel();
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(n, 4096, [&](int64_t b, int64_t e) {
    k.swiglu_row(gate.data_as<float>() + b, up.data_as<float>() + b, e - b, out.data_as<float>() + b);
  });
}

}  // namespace pagoda
