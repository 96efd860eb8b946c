// Linear-layer kernels for the vnni level (stub: generic path).
#include "backend/cpu/kernels.h"

namespace pagoda::cpu::vnni {
const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx512Vnni, nullptr, nullptr, nullptr};
  return &t;
}
}  // namespace pagoda::cpu::vnni
