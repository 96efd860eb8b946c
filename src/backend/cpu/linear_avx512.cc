// Linear-layer kernels for the avx512 level (stub: generic path).
#include "backend/cpu/kernels.h"

namespace pagoda::cpu::avx512 {
const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx512, nullptr, nullptr, nullptr};
  return &t;
}
}  // namespace pagoda::cpu::avx512
