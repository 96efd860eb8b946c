#include "ops/embedding.h"

#include "backend/cpu/cpu_kernels.h"
#include "quant/quant.h"

namespace pagoda {

void embedding_lookup(const Tensor& table, std::span<const int32_t> ids, Tensor& out, ThreadPool& pool) {
  PAGODA_CHECK(table.ndim() == 2, "embedding table must be 2-d, got {}", table.shape_string());
  const int64_t vocab = table.dim(0), d = table.dim(1);
  PAGODA_CHECK(out.dtype() == DType::kF32 && out.ndim() == 2 && out.dim(0) == static_cast<int64_t>(ids.size()) && out.dim(1) == d,
               "embedding out {} for {} ids of width {}", out.shape_string(), ids.size(), d);
  for (int32_t id : ids) PAGODA_CHECK(id >= 0 && id < vocab, "token id {} outside vocabulary [0, {})", id, vocab);
  const auto& k = cpu::cpu_kernels();
  pool.parallel_for(static_cast<int64_t>(ids.size()), 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const void* row = table.row_ptr(ids[t]);
      float* dst = out.data_as<float>() + t * d;
      const DType dt = table.dtype();
      if (dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16)
        k.to_f32_row(row, static_cast<int>(dt), d, dst);
      else
        quant::dequantize_row(dt, row, dst, d);
    }
  });
}

}  // namespace pagoda
