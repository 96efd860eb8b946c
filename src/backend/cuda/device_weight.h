// Typed device weights: a matmul weight on the GPU carries its format, and the executor's matmul
// dispatch (GEMV for few rows, cuBLASLt or the SIMT GEMM otherwise) checks it against the kernels'
// rows below. Today's rows are the compute dtypes, bf16 and f32: every host dtype (f16, bf16,
// f32, GGUF quantized blocks) is converted or dequantized to one of them at load. Native
// quantized rows (bytes, repack at load, GEMV/GEMM kernels) are added here as formats.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_common.h"
#include "common/dtype.h"

namespace pagoda::cuda {

struct DeviceWeight {
  DType format = DType::kBF16;  // the element format of `data`
  int64_t n = 0, k = 0;         // [N, K] row-major: row i holds the K inputs of output i
  DeviceBuffer storage;         // owned bytes; empty when `data` views another weight (tied output)
  const void* data = nullptr;
};

// The device format a host weight of `host` dtype gets for compute dtype `compute` (bf16 or f32).
inline DType device_weight_format(DType host, DType compute) { return compute; }

// Bytes of an [n, k] weight in `format`.
inline int64_t device_weight_bytes(DType format, int64_t n, int64_t k) { return n * row_bytes(format, k); }

}  // namespace pagoda::cuda
