#include "ops/activation.h"

#include <algorithm>

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

void swiglu_fused(const Tensor& gate_up, Tensor& out, ThreadPool& pool) {
  PAGODA_CHECK(gate_up.dtype() == DType::kF32 && out.dtype() == DType::kF32 && gate_up.ndim() == 2 && out.ndim() == 2 &&
                   gate_up.dim(0) == out.dim(0) && gate_up.dim(1) == 2 * out.dim(1),
               "swiglu_fused: gate_up {} out {}", gate_up.shape_string(), out.shape_string());
  const int64_t F = out.dim(1);
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(out.dim(0), std::max<int64_t>(1, 4096 / F), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = gate_up.data_as<float>() + r * 2 * F;
      k.swiglu_row(row, row + F, F, out.data_as<float>() + r * F);
    }
  });
}

void geglu_tanh_fused(const Tensor& gate_up, Tensor& out, ThreadPool& pool) {
  PAGODA_CHECK(gate_up.dtype() == DType::kF32 && out.dtype() == DType::kF32 && gate_up.ndim() == 2 && out.ndim() == 2 &&
                   gate_up.dim(0) == out.dim(0) && gate_up.dim(1) == 2 * out.dim(1),
               "geglu_tanh_fused: gate_up {} out {}", gate_up.shape_string(), out.shape_string());
  const int64_t F = out.dim(1);
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(out.dim(0), std::max<int64_t>(1, 4096 / F), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = gate_up.data_as<float>() + r * 2 * F;
      k.geglu_tanh_row(row, row + F, F, out.data_as<float>() + r * F);
    }
  });
}

}  // namespace pagoda
