#include "ops/norm.h"

#include "backend/cpu/cpu_kernels.h"

namespace pagoda {
namespace {

void check_f32_2d(const Tensor& t, const char* what) {
  PAGODA_CHECK(t.dtype() == DType::kF32 && t.ndim() == 2 && t.device() == Device::kCpu, "{}: expected [T, D] f32 on cpu, got {}",
               what, t.shape_string());
}
void check_weight(const Tensor& w, int64_t d) {
  PAGODA_CHECK(w.dtype() == DType::kF32 && w.numel() == d, "norm weight: expected [{}] f32, got {}", d, w.shape_string());
}
// Rows per task: enough work per dispatch to amortise it, at least one row per thread.
int64_t row_grain(int64_t d) { return d >= 1024 ? 1 : 1024 / d + 1; }

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, double eps, Tensor& out, ThreadPool& pool) {
  check_f32_2d(x, "rms_norm x");
  check_f32_2d(out, "rms_norm out");
  PAGODA_CHECK(x.shape() == out.shape(), "rms_norm: {} vs {}", x.shape_string(), out.shape_string());
  const int64_t d = x.dim(1);
  check_weight(w, d);
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(x.dim(0), row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      k.rms_norm_row(x.data_as<float>() + r * d, w.data_as<float>(), d, static_cast<float>(eps), out.data_as<float>() + r * d);
  });
}

void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, double eps, Tensor& out, ThreadPool& pool) {
  check_f32_2d(residual, "add_rms_norm residual");
  check_f32_2d(x, "add_rms_norm x");
  check_f32_2d(out, "add_rms_norm out");
  PAGODA_CHECK(residual.shape() == x.shape() && x.shape() == out.shape(), "add_rms_norm shapes");
  PAGODA_CHECK(out.data() != residual.data(), "add_rms_norm: out must not alias residual");
  const int64_t d = x.dim(1);
  check_weight(w, d);
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(x.dim(0), row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      k.add_rms_norm_row(residual.data_as<float>() + r * d, x.data_as<float>() + r * d, w.data_as<float>(), d,
                         static_cast<float>(eps), out.data_as<float>() + r * d);
  });
}

void head_rms_norm(Tensor& x, int64_t head_dim, const Tensor& w, double eps, ThreadPool& pool) {
  check_f32_2d(x, "head_rms_norm x");
  PAGODA_CHECK(head_dim > 0 && x.dim(1) % head_dim == 0, "head_rms_norm: {} not divisible by head_dim {}", x.shape_string(), head_dim);
  check_weight(w, head_dim);
  const int64_t rows = x.numel() / head_dim;
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(rows, row_grain(head_dim), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* p = x.data_as<float>() + r * head_dim;
      k.rms_norm_row(p, w.data_as<float>(), head_dim, static_cast<float>(eps), p);
    }
  });
}

}  // namespace pagoda
