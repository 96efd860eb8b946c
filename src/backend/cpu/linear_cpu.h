// CPU implementation of the linear layer (ops/linear.h is the front end).
#pragma once

#include <memory>
#include <string>

#include "backend/cpu/kernels.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// A weight prepared for the CPU kernels: immutable after prepare, shareable across threads.
struct LinearWeight {
  Tensor weight;  // [n, k] original (GGUF layout), kept alive
  std::string name;
  DType dtype = DType::kF32;
  int64_t n = 0, k = 0;
  IsaLevel isa = IsaLevel::kScalar;      // level the kernels were chosen for
  cpu::PackKind pack = cpu::PackKind::kNone;
  std::shared_ptr<void> packed;          // packed_bytes(dtype, n, k) bytes, or null
  const cpu::KernelTable* kernels = nullptr;  // null: generic path
};

namespace cpu {

std::shared_ptr<LinearWeight> prepare_linear_cpu(const Tensor& w, const std::string& name, IsaLevel isa);
// x: [m, k] f32 contiguous; y: [m, n] f32 contiguous.
void linear_cpu(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool);

// Tokens at or below which linear() runs the GEMV schedule (all threads split the rows).
constexpr int64_t kGemvMaxTokens = 8;

}  // namespace cpu
}  // namespace pagoda
