// The portable CPU kernels compiled for the avx512 level (flags from the file-name suffix).
#include "backend/cpu/cpu_kernels.h"

#define PAGODA_KERNEL_NS isa_avx512
#define PAGODA_KERNEL_LEVEL IsaLevel::kAvx512
#define PAGODA_KERNEL_TABLE kKernelsAvx512
#include "backend/cpu/kernels_impl.inc"
