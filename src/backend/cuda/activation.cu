// Elementwise kernels: SwiGLU / GeGLU over the fused gate/up projection output, logit soft-capping,
// and dtype conversions
// (weight upload, tests). Grid-stride loops; f32 arithmetic, one rounding at the store. The bf16
// SwiGLU of prefill (8192 x 2 x 14336 values a layer at the 8B shape) moves 8 values a thread
// with 16-byte loads and 32-bit index arithmetic; the scalar kernel covers the rest.
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

// The gate's activation times up, in f32.
struct SiluMul {
  __device__ float operator()(float g, float u) const { return silu_mul(g, u); }
};
// gelu_pytorch_tanh(g) * u (ops/activation.h's row kernel computes the same).
struct GeluTanhMul {
  __device__ float operator()(float g, float u) const {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
  }
};

// out[t, i] = Act(gu[t, i], gu[t, F + i]), one value a thread.
template <class T, class Act>
__global__ void gated_kernel(const T* __restrict__ gu, int64_t T_, int64_t F, T* __restrict__ out) {
  pdl_trigger();
  pdl_wait();
  const int64_t n = T_ * F;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / F, i = idx - t * F;
    out[idx] = from_f32<T>(Act{}(to_f32(gu[t * 2 * F + i]), to_f32(gu[t * 2 * F + F + i])));
  }
}

// silu(gate) * up of 8 bf16 pairs (a 16-byte load of each), f32 arithmetic, rounded to bf16.
__device__ __forceinline__ uint4 swiglu_bf16x8(const uint4 gv, const uint4 uv) {
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
  const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
  uint4 r;
  __nv_bfloat162* r2 = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 g = __bfloat1622float2(g2[i]), u = __bfloat1622float2(u2[i]);
    r2[i] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
  }
  return r;
}

// gu [T, 2 F] bf16 (gate | up), F = 8 * F8, T * F8 < 2^31: out [T, F] = silu(gate) * up, 8 a thread.
__global__ void swiglu_bf16x8_kernel(const uint4* __restrict__ gu, int T_, int F8, uint4* __restrict__ out) {
  pdl_trigger();
  pdl_wait();
  const int n = T_ * F8;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
    const int t = idx / F8, c = idx - t * F8;
    const int64_t gi = static_cast<int64_t>(t) * 2 * F8 + c;
    out[idx] = swiglu_bf16x8(__ldg(gu + gi), __ldg(gu + gi + F8));
  }
}

// One block a row t: swiglu_bf16x8_kernel's bf16 values of the row (the same arithmetic) kept in
// shared memory, then quantized as quantize_activations_fp8 does (scale max|row| / 448, e4m3(v /
// scale) codes), 8 a thread a store.
__global__ void swiglu_fp8_kernel(const uint4* __restrict__ gu, int F8, uint8_t* __restrict__ q, float* __restrict__ scale) {
  extern __shared__ uint4 row8[];  // F8 entries of 8 bf16
  __shared__ float red[33];
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x;
  float amax = 0.0f;
  for (int c = threadIdx.x; c < F8; c += blockDim.x) {
    const int64_t gi = t * 2 * F8 + c;
    const uint4 r = swiglu_bf16x8(__ldg(gu + gi), __ldg(gu + gi + F8));
    const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(&r);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(r2[i]);
      amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
    }
    row8[c] = r;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  amax = warp_max(amax);
  if (lane == 0) red[warp] = amax;
  __syncthreads();  // red and row8 written
  if (warp == 0) {
    float m = lane < nw ? red[lane] : 0.0f;
    m = warp_max(m);
    if (lane == 0) red[32] = m;
  }
  __syncthreads();
  const float sc = red[32] / 448.0f;
  uint2* qr = reinterpret_cast<uint2*>(q + t * 8 * F8);
  for (int c = threadIdx.x; c < F8; c += blockDim.x) {
    uint2 codes = make_uint2(0, 0);
    if (sc != 0.0f) {
      const uint4 r = row8[c];
      const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(&r);
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 v = __bfloat1622float2(r2[i]);
        w[i] = __nv_cvt_float2_to_fp8x2(make_float2(v.x / sc, v.y / sc), __NV_SATFINITE, __NV_E4M3);
      }
      codes = make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
    }
    qr[c] = codes;
  }
  if (threadIdx.x == 0) scale[t] = sc;
}

__global__ void softcap_kernel(float* __restrict__ x, int64_t n, float cap, float inv_cap) {
  pdl_trigger();
  pdl_wait();
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[idx] = cap * tanhf(x[idx] * inv_cap);
}

template <class TI, class TO>
__global__ void convert_kernel(const TI* __restrict__ src, TO* __restrict__ dst, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] = from_f32<TO>(to_f32(src[idx]));
}

__global__ void accumulate_bf16_kernel(const bf16* __restrict__ src, float* __restrict__ dst, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] += to_f32(src[idx]);
}

int grid_for(int64_t n, int threads) {
  const int64_t g = ceil_div(n, threads);
  return static_cast<int>(g < 65535 ? g : 65535);
}

template <class TI>
void convert_to(const TI* src, void* dst, DType dst_dtype, int64_t n, cudaStream_t s) {
  const int grid = grid_for(n, 256);
  switch (dst_dtype) {
    case DType::kF32: convert_kernel<<<grid, 256, 0, s>>>(src, static_cast<float*>(dst), n); break;
    case DType::kBF16: convert_kernel<<<grid, 256, 0, s>>>(src, static_cast<bf16*>(dst), n); break;
    case DType::kF16: convert_kernel<<<grid, 256, 0, s>>>(src, static_cast<f16*>(dst), n); break;
    default: PAGODA_CUDA_REQUIRE(false, "convert: destination dtype must be f32, f16 or bf16");
  }
}

}  // namespace

void swiglu(const void* gu, int64_t T, int64_t F, void* out, DType dtype, cudaStream_t s) {
  if (T <= 0) return;
  const int grid = grid_for(T * F, 256);
  if (dtype == DType::kF32) {
    launch_pdl(gated_kernel<float, SiluMul>, dim3(grid), dim3(256), 0, s, static_cast<const float*>(gu), T, F, static_cast<float*>(out));
  } else {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16, "swiglu: dtype must be f32 or bf16");
    if (F % 8 == 0 && aligned16(gu) && aligned16(out) && T * (F / 8) < (int64_t{1} << 31)) {
      const int64_t n8 = T * (F / 8);
      launch_pdl(swiglu_bf16x8_kernel, dim3(grid_for(n8, 256)), dim3(256), 0, s, static_cast<const uint4*>(gu),
                 static_cast<int>(T), static_cast<int>(F / 8), static_cast<uint4*>(out));
      CUDA_CHECK_LAUNCH();
      return;
    }
    launch_pdl(gated_kernel<bf16, SiluMul>, dim3(grid), dim3(256), 0, s, static_cast<const bf16*>(gu), T, F, static_cast<bf16*>(out));
  }
  CUDA_CHECK_LAUNCH();
}

bool swiglu_fp8(const void* gu, int64_t T, int64_t F, uint8_t* q, float* scale, cudaStream_t s) {
  constexpr size_t kMaxSmem = 160 * 1024;  // opted into below 48 KiB (Hopper: up to 227 KiB a block)
  const size_t smem = static_cast<size_t>(F) * 2;
  if (F % 8 != 0 || !aligned16(gu) || reinterpret_cast<uintptr_t>(q) % 8 != 0 || smem > kMaxSmem) return false;
  if (T <= 0) return true;
  if (smem > 47 * 1024) {  // the default 48 KiB a block also hold the static shared memory (a KiB of margin)
    static const bool opted = [] {
      CUDA_CHECK(cudaFuncSetAttribute(swiglu_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kMaxSmem)));
      return true;
    }();
    (void)opted;
  }
  launch_pdl(swiglu_fp8_kernel, dim3(static_cast<unsigned>(T)), dim3(256), smem, s, static_cast<const uint4*>(gu),
             static_cast<int>(F / 8), q, scale);
  CUDA_CHECK_LAUNCH();
  return true;
}

void geglu_tanh(const void* gu, int64_t T, int64_t F, void* out, DType dtype, cudaStream_t s) {
  if (T <= 0) return;
  const int grid = grid_for(T * F, 256);
  if (dtype == DType::kF32) {
    launch_pdl(gated_kernel<float, GeluTanhMul>, dim3(grid), dim3(256), 0, s, static_cast<const float*>(gu), T, F, static_cast<float*>(out));
  } else {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16, "geglu_tanh: dtype must be f32 or bf16");
    launch_pdl(gated_kernel<bf16, GeluTanhMul>, dim3(grid), dim3(256), 0, s, static_cast<const bf16*>(gu), T, F, static_cast<bf16*>(out));
  }
  CUDA_CHECK_LAUNCH();
}

void softcap_f32(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return;
  PAGODA_CUDA_REQUIRE(cap > 0.0f, "softcap_f32: cap must be positive");
  launch_pdl(softcap_kernel, dim3(grid_for(n, 256)), dim3(256), 0, s, x, n, cap, 1.0f / cap);
  CUDA_CHECK_LAUNCH();
}

void accumulate_bf16(const void* src, float* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  accumulate_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(static_cast<const bf16*>(src), dst, n);
  CUDA_CHECK_LAUNCH();
}

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  switch (src_dtype) {
    case DType::kF32: convert_to(static_cast<const float*>(src), dst, dst_dtype, n, s); break;
    case DType::kBF16: convert_to(static_cast<const bf16*>(src), dst, dst_dtype, n, s); break;
    case DType::kF16: convert_to(static_cast<const f16*>(src), dst, dst_dtype, n, s); break;
    default: PAGODA_CUDA_REQUIRE(false, "convert: source dtype must be f32, f16 or bf16");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
