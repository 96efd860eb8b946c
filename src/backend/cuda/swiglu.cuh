// SwiGLU's arithmetic, shared by the SwiGLU kernels (activation.cu) and the GEMV's fused SwiGLU
// (gemv.cu), so that every path computes and rounds silu(gate) * up alike.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// silu(g) * u in f32.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// silu(gate) * up from f32 matmul sums: both rounded to bf16 first, as the unfused path (a bf16
// GEMM output, then the SwiGLU kernel) does.
__device__ __forceinline__ bf16 swiglu_out(float gate, float up) {
  return __float2bfloat16_rn(silu_mul(__bfloat162float(__float2bfloat16_rn(gate)),
                                      __bfloat162float(__float2bfloat16_rn(up))));
}

}  // namespace pagoda::cuda
