// Linear-layer kernels for AVX-512 F/BW/VL/DQ without VNNI (vpmaddubsw + vpmaddwd). The code is
// linear_x86_512.inc.
// GCC 12 headers trip -Wmaybe-uninitialized on _mm512_undefined_ps() inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "backend/cpu/kernels.h"

namespace pagoda::cpu::avx512 {

#include "backend/cpu/linear_x86_512.inc"

const KernelTable* kernel_table() {
  static const KernelTable t{IsaLevel::kAvx512, quantize_act_impl, qgemm_impl, avx512::fgemm_512, true,
                             kTile, nullptr, avx512::pack_x_512, avx512::fgemm_packed_512};
  return &t;
}

}  // namespace pagoda::cpu::avx512
