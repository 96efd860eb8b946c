// Linear-layer kernels for AVX-512 + VNNI (vpdpbusd). The code is linear_x86_512.inc.
// GCC 12 headers trip -Wmaybe-uninitialized on _mm512_undefined_ps() inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "backend/cpu/kernels.h"

#define PAGODA_VNNI 1

namespace pagoda::cpu::vnni {

#include "backend/cpu/linear_x86_512.inc"

const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx512Vnni, quantize_act_impl, qgemm_impl, fgemm_impl, true};
  return &t;
}

}  // namespace pagoda::cpu::vnni
