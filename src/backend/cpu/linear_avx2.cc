// Linear-layer kernels for the avx2 level (stub: generic path).
#include "backend/cpu/kernels.h"

namespace pagoda::cpu::avx2 {
const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx2, nullptr, nullptr, nullptr};
  return &t;
}
}  // namespace pagoda::cpu::avx2
