// Device-side helpers shared by the kernels: element conversions, warp/block reductions, vector
// loads. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_common.h"
#include "common/dtype.h"

namespace pagoda::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;
// The FP8 KV cache (DType::kF8E4M3): conversions round to nearest even and saturate finite values
// to +-448 (__NV_SATFINITE), bit for bit common/half.h's f32_to_fp8_e4m3.
using f8 = __nv_fp8_e4m3;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(f8 v) { return static_cast<float>(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ f8 from_f32<f8>(float v) { return f8(v); }

// Store a float into a buffer of runtime dtype (f32 | f16 | bf16 | f8_e4m3).
__device__ __forceinline__ void store_as(void* base, DType dt, int64_t idx, float v) {
  if (dt == DType::kF32) static_cast<float*>(base)[idx] = v;
  else if (dt == DType::kBF16) static_cast<bf16*>(base)[idx] = __float2bfloat16_rn(v);
  else if (dt == DType::kF8E4M3) static_cast<f8*>(base)[idx] = f8(v);
  else static_cast<f16*>(base)[idx] = __float2half_rn(v);
}

// Four consecutive values at base[idx] (idx a multiple of 4, the address 4-, 8- or 16-byte
// aligned): one 4-byte store for FP8, one 8-byte store for 16-bit types, one 16-byte store for f32.
template <class T>
__device__ __forceinline__ void store4(T* base, int64_t idx, float4 v) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(base + idx) = v;
  } else if constexpr (sizeof(T) == 1) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x, v.y), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z, v.w), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint32_t*>(base + idx) = lo | (hi << 16);
  } else {
    uint2 u;
    if constexpr (std::is_same_v<T, bf16>) {
      *reinterpret_cast<__nv_bfloat162*>(&u.x) = __floats2bfloat162_rn(v.x, v.y);
      *reinterpret_cast<__nv_bfloat162*>(&u.y) = __floats2bfloat162_rn(v.z, v.w);
    } else {
      *reinterpret_cast<__half2*>(&u.x) = __floats2half2_rn(v.x, v.y);
      *reinterpret_cast<__half2*>(&u.y) = __floats2half2_rn(v.z, v.w);
    }
    *reinterpret_cast<uint2*>(base + idx) = u;
  }
}
// The same into a buffer of runtime dtype (f32 | f16 | bf16 | f8_e4m3).
__device__ __forceinline__ void store4_as(void* base, DType dt, int64_t idx, float4 v) {
  if (dt == DType::kF32) store4(static_cast<float*>(base), idx, v);
  else if (dt == DType::kBF16) store4(static_cast<bf16*>(base), idx, v);
  else if (dt == DType::kF8E4M3) store4(static_cast<f8*>(base), idx, v);
  else store4(static_cast<f16*>(base), idx, v);
}

// Whether a pointer allows 16-byte vector access (nullptr does: optional inputs).
__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// Fixed reduction order: deterministic. `scratch` holds 33 floats; reusable after return.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? scratch[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) scratch[32] = t;
  }
  __syncthreads();
  return scratch[32];
}

// RMSNorm of one f32 row of d4 float4 (D = 4 d4 values) by the whole block: thread i takes float4
// elements i, i + blockDim.x, ...; the first N of them stay in registers (all loads in flight
// together) between the reduction and the normalisation, the rest are read again. Calls
// put(j, x[j] * inv * w[j]) for every j < d4. Fixed summation order (block_sum; a thread's sum runs
// over its elements in order whatever N is), so the fused (GEMV prologue) and standalone norms of
// a row agree. `weight(i, j)` gives w[j], j = threadIdx.x
// + i * blockDim.x for the thread's i-th element (i >= N past the registers): a caller may have
// loaded the first ones already (NormWeightPreload).
template <int N, class Weight, class Put>
__device__ __forceinline__ void block_rms_norm_row_with(const float4* xr, int d4, float eps, float* scratch,
                                                        Weight&& weight, Put&& put) {
  float4 v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int j = threadIdx.x + i * blockDim.x;
    v[i] = j < d4 ? __ldcg(xr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    ss = fmaf(v[i].x, v[i].x, ss);
    ss = fmaf(v[i].y, v[i].y, ss);
    ss = fmaf(v[i].z, v[i].z, ss);
    ss = fmaf(v[i].w, v[i].w, ss);
  }
  for (int j = threadIdx.x + N * blockDim.x; j < d4; j += blockDim.x) {
    const float4 t = __ldcg(xr + j);
    ss = fmaf(t.w, t.w, fmaf(t.z, t.z, fmaf(t.y, t.y, fmaf(t.x, t.x, ss))));  // x first, as in the registers
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(4 * d4) + eps);
  auto out = [&](int i, int j, const float4& t) {
    const float4 g = weight(i, j);
    put(j, make_float4(t.x * inv * g.x, t.y * inv * g.y, t.z * inv * g.z, t.w * inv * g.w));
  };
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int j = threadIdx.x + i * blockDim.x;
    if (j < d4) out(i, j, v[i]);
  }
  for (int j = threadIdx.x + N * blockDim.x, i = N; j < d4; j += blockDim.x, ++i) out(i, j, __ldcg(xr + j));
}

template <int N, class Put>
__device__ __forceinline__ void block_rms_norm_row(const float4* xr, const float4* w4, int d4, float eps, float* scratch,
                                                   Put&& put) {
  block_rms_norm_row_with<N>(xr, d4, eps, scratch, [&](int, int j) { return w4[j]; }, put);
}

// Loads a kernel may issue before pdl_wait(), to overlap its predecessor. EARLY: plain weak loads.
// They must not be non-coherent (ld.global.nc, __ldg): ptxas may sink a read-only load below
// griddepcontrol.wait (ACQBULK in the SASS), and does, which would issue it only once the
// predecessor completed; plain loads stay where they are written (checked in the SASS of sm_90a,
// CUDA 13.0). Without EARLY: an ordinary load (the compiler may make it read-only).
template <bool EARLY>
__device__ __forceinline__ float4 load_f32x4(const float4* p) {
  if constexpr (EARLY) {
    float4 r;
    asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
  } else {
    return *p;
  }
}
template <bool EARLY>
__device__ __forceinline__ float2 load_f32x2(const float2* p) {
  if constexpr (EARLY) {
    float2 r;
    asm volatile("ld.global.v2.f32 {%0,%1}, [%2];\n" : "=f"(r.x), "=f"(r.y) : "l"(p));
    return r;
  } else {
    return *p;
  }
}
__device__ __forceinline__ int load_s32_early(const int* p) {
  int r;
  asm volatile("ld.global.s32 %0, [%1];\n" : "=r"(r) : "l"(p));
  return r;
}
// 16 bytes of a stream read once (weights), leaving L1 alone. EARLY: a plain load, for use before
// pdl_wait(); else a read-only one (.nc), for the loads after it.
template <bool EARLY>
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  if constexpr (EARLY) {
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  }
  return r;
}

// The norm weights of a block's first NG elements a thread (block_rms_norm_row_with's i < NG), read
// before the kernel waits for its predecessor: they do not depend on it, and the weight of a layer's
// norm is not in L2 by then (the step streams far more than L2 holds), so read after the reduction
// they would add a DRAM round trip to the critical path of a GEMV's first wave.
template <int NG>
struct NormWeightPreload {
  float4 g[NG > 0 ? NG : 1];
  const float4* w4;
  __device__ __forceinline__ void load(const float4* w, int d4) {
    w4 = w;
#pragma unroll
    for (int i = 0; i < NG; ++i) {
      const int j = threadIdx.x + i * blockDim.x;
      g[i] = j < d4 ? load_f32x4<true>(w + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  __device__ __forceinline__ float4 operator()(int i, int j) const {
    float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < NG; ++k)
      if (i == k) r = g[k];
    return i < NG ? r : __ldg(w4 + j);
  }
};

// NV consecutive elements of T at p (16-byte aligned when NV * sizeof(T) >= 16) into floats.
template <class T, int NV>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[NV]) {
  constexpr int kBytes = NV * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const uint4 u = *reinterpret_cast<const uint4*>(p + c * kPer);
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int i = 0; i < kPer; ++i) out[c * kPer + i] = to_f32(e[i]);
    }
  } else if constexpr (kBytes % 8 == 0) {
    constexpr int kPer = 8 / sizeof(T);
#pragma unroll
    for (int c = 0; c < kBytes / 8; ++c) {
      const uint2 u = *reinterpret_cast<const uint2*>(p + c * kPer);
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int i = 0; i < kPer; ++i) out[c * kPer + i] = to_f32(e[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < NV; ++i) out[i] = to_f32(p[i]);
  }
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace pagoda::cuda

namespace pagoda::cuda {

// Programmatic dependent launch (Hopper): kernels launched with launch_pdl() may start while the
// previous kernel in the stream finishes. Each such kernel calls pdl_wait() before it touches
// anything an earlier kernel wrote (it returns once the previous grid has completed and its
// writes are visible; loads issued before it: load_f32x4<true> and its kin), and pdl_trigger() early so the next
// kernel can be scheduled. Every kernel
// calls pdl_wait() on every path before it exits, so completion stays transitive along the
// stream. No-ops below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches `kernel` with the programmatic-stream-serialization attribute (captured into CUDA
// graphs as a programmatic edge).
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// Gemma 2's attention soft-cap on a score in log2 units (q.k x scale x log2(e), as the attention
// kernels' exp2 softmax takes it): cap_l2 x tanh(s / cap_l2) with cap_l2 = cap x log2(e), which is
// log2(e) x cap x tanh(q.k x scale / cap); cap_l2 <= 0: s unchanged. Only for valid keys (a masked
// -inf must stay -inf). softcap_log2_on: the same where cap_l2 > 0 is known (no test).
__device__ __forceinline__ float softcap_log2_on(float s, float cap_l2) { return cap_l2 * tanhf(s / cap_l2); }
__device__ __forceinline__ float softcap_log2(float s, float cap_l2) {
  return cap_l2 > 0.0f ? softcap_log2_on(s, cap_l2) : s;
}

}  // namespace pagoda::cuda
