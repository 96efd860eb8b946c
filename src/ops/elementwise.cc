#include "ops/elementwise.h"

#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace pagoda {

void add_bias(Tensor& y, const Tensor& bias, ThreadPool& pool) {
  PAGODA_CHECK(y.dtype() == DType::kF32 && y.ndim() == 2 && bias.dtype() == DType::kF32 && bias.numel() == y.dim(1),
               "add_bias: y {} bias {}", y.shape_string(), bias.shape_string());
  const int64_t n = y.dim(1);
  pool.parallel_for(y.dim(0), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = y.data_as<float>() + r * n;
      const float* b = bias.data_as<float>();
      for (int64_t i = 0; i < n; ++i) row[i] += b[i];
    }
  });
}

void add_inplace(Tensor& y, const Tensor& x, ThreadPool& pool) {
  PAGODA_CHECK(y.dtype() == DType::kF32 && x.dtype() == DType::kF32 && y.shape() == x.shape(), "add_inplace: {} vs {}",
               y.shape_string(), x.shape_string());
  pool.parallel_for(y.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    float* dst = y.data_as<float>();
    const float* src = x.data_as<float>();
    for (int64_t i = b; i < e; ++i) dst[i] += src[i];
  });
}

void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) {
  PAGODA_CHECK(x.dtype() == DType::kF32 && x.ndim() == 2 && out.dtype() == DType::kF32 && out.ndim() == 2 &&
                   out.dim(0) == static_cast<int64_t>(rows.size()) && out.dim(1) == x.dim(1),
               "gather_rows: x {} out {} rows {}", x.shape_string(), out.shape_string(), rows.size());
  const int64_t n = x.dim(1);
  for (size_t i = 0; i < rows.size(); ++i) {
    PAGODA_CHECK(rows[i] >= 0 && rows[i] < x.dim(0), "gather_rows: row {} of {}", rows[i], x.dim(0));
    std::memcpy(out.data_as<float>() + i * n, x.data_as<float>() + rows[i] * n, n * sizeof(float));
  }
}

void split_columns(const Tensor& x, std::initializer_list<Tensor*> parts, ThreadPool& pool) {
  int64_t total = 0;
  for (const Tensor* p : parts) {
    PAGODA_CHECK(p->dtype() == DType::kF32 && p->ndim() == 2 && p->dim(0) == x.dim(0), "split_columns part {}", p->shape_string());
    total += p->dim(1);
  }
  PAGODA_CHECK(x.dtype() == DType::kF32 && x.ndim() == 2 && x.dim(1) == total, "split_columns: x {} into {} columns",
               x.shape_string(), total);
  pool.parallel_for(x.dim(0), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = x.data_as<float>() + r * total;
      for (Tensor* p : parts) {
        const int64_t n = p->dim(1);
        std::memcpy(p->data_as<float>() + r * n, src, static_cast<size_t>(n) * sizeof(float));
        src += n;
      }
    }
  });
}

Tensor to_f32(const Tensor& t) {
  PAGODA_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16, "to_f32: {}", t.shape_string());
  Tensor out = Tensor::empty(DType::kF32, t.shape());
  cpu::cpu_kernels().to_f32_row(t.data(), static_cast<int>(t.dtype()), t.numel(), out.data_as<float>());
  return out;
}

}  // namespace pagoda
