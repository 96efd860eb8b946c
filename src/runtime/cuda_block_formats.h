// The GGUF block formats the CUDA backend computes with in their blocks: its dense matmuls and
// grouped expert matmuls keep weights in these formats as the file's blocks (backend/cuda/
// quant_unit.cuh has a decoder for each; kernels.h quant_weight_supported checks this list).
// Here for the parts of the engine that size or describe a CUDA load without the CUDA library
// (the memory planner's CLI).
#pragma once

#include "common/dtype.h"

namespace pagoda {

inline bool cuda_block_format(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: return true;
    default: return false;
  }
}

}  // namespace pagoda
