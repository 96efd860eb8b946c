// The portable CPU kernels compiled for the avx2 level (flags from the file-name suffix).
#include "backend/cpu/cpu_kernels.h"

#define PAGODA_KERNEL_NS isa_avx2
#define PAGODA_KERNEL_LEVEL IsaLevel::kAvx2
#define PAGODA_KERNEL_TABLE kKernelsAvx2
#include "backend/cpu/kernels_impl.inc"
