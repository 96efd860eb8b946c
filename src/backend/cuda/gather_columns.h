// The act-order gather (norm.cu): an act-order weight's inputs in its column order.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "common/dtype.h"

namespace pagoda::cuda {

// out[r, j] = x[r, order[j]] for r < M, j < K: rows of K values (f32, bf16 or f16), contiguous;
// order: [K] i32 on the device. out must not alias x. Enqueued on `s`.
void gather_columns(const void* x, DType dtype, int64_t M, int64_t K, const int32_t* order, void* out, cudaStream_t s);

}  // namespace pagoda::cuda
