// The bf16 GEMV's arithmetic (gemv.cu): a 16-byte chunk's dot product, and the SwiGLU of a
// gate / up pair, which the persistent decode-layer kernel (decode_layer.cu) shares so that both
// round the pair alike.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// acc += dot(8 bf16 weights, 8 bf16 inputs), as eight f32 FMAs in element order.
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]);
    const float2 b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// silu(gate) * up with both rounded to bf16 first, as the unfused path (bf16 GEMM output) does.
__device__ __forceinline__ bf16 swiglu_out(float gate, float up) {
  const float g = __bfloat162float(__float2bfloat16_rn(gate));
  const float u = __bfloat162float(__float2bfloat16_rn(up));
  return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
}

}  // namespace pagoda::cuda
