// Warp-level tensor-core and asynchronous-copy primitives (sm_80+ PTX) shared by the attention
// kernels: cp.async 16-byte copies with zero-fill, a 16-byte chunk of FP8 E4M3 to f16,
// ldmatrix (plain and transposed), the m16n8k16 bf16 / f16 mma with f32 accumulators, and packing
// two floats into a 16-bit pair.
#pragma once

#include <cmath>

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// The attention kernels' cache element types: an FP8 E4M3 cache reaches the mma as f16 (exact),
// a 16-bit one as itself; a 16-byte chunk holds kChunkElems<KVT> elements.
template <class KVT>
inline constexpr bool kIsFp8 = std::is_same_v<KVT, f8>;
template <class KVT>
using mma_type_t = std::conditional_t<kIsFp8<KVT>, f16, KVT>;
template <class KVT>
inline constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KVT));

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two FP8 E4M3 values (the low 16 bits of w16, the lower byte first) as an f16 pair (exact: every
// E4M3 value is an f16 value).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t w16) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w16 & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
}
// 16 FP8 E4M3 values (one 16-byte chunk of shared memory) to 16 f16 values at dst (32 bytes,
// 16-byte aligned).
__device__ __forceinline__ void fp8x16_to_f16(const void* src, void* dst) {
  const uint4 q = *static_cast<const uint4*>(src);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  uint4 h[2];
  uint32_t* hw = reinterpret_cast<uint32_t*>(h);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    hw[2 * e] = e4m3x2_to_f16x2(w[e]);
    hw[2 * e + 1] = e4m3x2_to_f16x2(w[e] >> 16);
  }
  static_cast<uint4*>(dst)[0] = h[0];
  static_cast<uint4*>(dst)[1] = h[1];
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// d += a (16x16, row) * b (16x8, col); f32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bf16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, f16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> two 16-bit values in one register (first in the low half).
__device__ __forceinline__ uint32_t pack2(float a, float b, bf16) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, f16) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace pagoda::cuda
