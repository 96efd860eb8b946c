// CPU implementation of the linear layer (ops/linear.h is the front end).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "common/tensor.h"
#include "common/thread_pool.h"

namespace pagoda {

// A weight prepared for the CPU kernels: immutable after prepare, shareable across threads.
//
// A fused weight whose parts differ in dtype holds one prepared sub-weight per run of equal-dtype
// parts (`parts`, each with its own packing and kernels); sub-weight i writes the columns
// [part_col[i], part_col[i] + parts[i]->n) of y. Then `weight` is a data-less [n, k] view with
// the first part's dtype, and pack / packed / kernels are unused.
struct LinearWeight {
  Tensor weight;  // [n, k] original (GGUF layout), kept alive
  std::string name;
  DType dtype = DType::kF32;
  DType kernel_dtype = DType::kF32;      // cpu::kernel_dtype(dtype): the packed layout's format
  int64_t n = 0, k = 0;
  IsaLevel isa = IsaLevel::kScalar;      // level the kernels were chosen for
  cpu::PackKind pack = cpu::PackKind::kNone;
  std::shared_ptr<void> packed;          // packed_bytes(dtype, n, k) bytes, or null
  const cpu::KernelTable* kernels = nullptr;  // null: generic path
  std::vector<std::shared_ptr<const LinearWeight>> parts;  // mixed fused weight only
  std::vector<int64_t> part_col;
  std::vector<int32_t> input_order;  // [k]: column j reads input input_order[j]; empty: identity
};

namespace cpu {

std::shared_ptr<LinearWeight> prepare_linear_cpu(const Tensor& w, const std::string& name, IsaLevel isa);
// Same with the packed layout given (the bytes an earlier prepare_linear_cpu of the same [n, k]
// weight made on this ISA level; `packed` keeps them alive): nothing is repacked. `w` may be a
// data-less view (shape and dtype only). Null if this ISA level does not repack w's dtype or the
// size differs from packed_bytes.
std::shared_ptr<LinearWeight> prepare_linear_cpu_prepacked(const Tensor& w, const std::string& name, IsaLevel isa,
                                                           std::shared_ptr<void> packed, size_t bytes);
// A mixed fused weight over prepared sub-weights (same k, at least two), in column order.
std::shared_ptr<LinearWeight> make_mixed_linear(std::vector<std::shared_ptr<const LinearWeight>> parts,
                                                const std::string& name);
// x: [m, k] f32 contiguous; y: [m, n] f32 contiguous.
void linear_cpu(const LinearWeight& w, const float* x, int64_t m, float* y, ThreadPool& pool);

// Tokens at or below which linear() runs the GEMV schedule (all threads split the rows).
constexpr int64_t kGemvMaxTokens = 8;

}  // namespace cpu
}  // namespace pagoda
