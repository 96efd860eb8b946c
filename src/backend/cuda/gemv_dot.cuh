// The bf16 GEMV's inner step, shared by the GEMV kernel (gemv.cu) and the persistent decode-layer
// kernel (decode_layer.cu): both accumulate a lane's 16-byte chunks in the same order with the same
// FMAs, so their outputs agree bit for bit.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// The 8 bf16 values of a 16-byte chunk as floats (exact: a bf16 is the high half of its f32).
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
// One 16-byte shared-memory load (a plain uint4 read through a reference may be split).
__device__ __forceinline__ uint4 ld_shared16(const uint4* p) {
  uint4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))));
  return r;
}
// acc += dot(8 bf16 weights, 8 inputs), as eight f32 FMAs in element order.
__device__ __forceinline__ float dot8(const uint4& w, const float (&x)[8], float acc) {
  float wf[8];
  unpack8(w, wf);
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(wf[i], x[i], acc);
  return acc;
}
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  float xf[8];
  unpack8(x, xf);
  return dot8(w, xf, acc);
}

// silu(gate) * up with both rounded to bf16 first, as the unfused path (bf16 GEMM output) does.
__device__ __forceinline__ bf16 swiglu_out(float gate, float up) {
  const float g = __bfloat162float(__float2bfloat16_rn(gate));
  const float u = __bfloat162float(__float2bfloat16_rn(up));
  return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
}

}  // namespace pagoda::cuda
