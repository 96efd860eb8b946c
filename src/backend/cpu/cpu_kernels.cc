#include "backend/cpu/cpu_kernels.h"

namespace pagoda::cpu {

const KernelTable* cpu_kernels_for(IsaLevel level) {
  if (level > active_isa_level()) return nullptr;
  switch (level) {
    case IsaLevel::kScalar: return &kKernelsScalar;
    case IsaLevel::kAvx2: return &kKernelsAvx2;
    case IsaLevel::kAvx512:
    case IsaLevel::kAvx512Vnni:
    case IsaLevel::kAmx: return &kKernelsAvx512;
  }
  return &kKernelsScalar;
}

const KernelTable& cpu_kernels() { return *cpu_kernels_for(active_isa_level()); }

}  // namespace pagoda::cpu
