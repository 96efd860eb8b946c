// The portable CPU kernels compiled for the scalar level (flags from the file-name suffix).
#include "backend/cpu/cpu_kernels.h"

#define PAGODA_KERNEL_NS isa_scalar
#define PAGODA_KERNEL_LEVEL IsaLevel::kScalar
#define PAGODA_KERNEL_TABLE kKernelsScalar
#include "backend/cpu/kernels_impl.inc"
