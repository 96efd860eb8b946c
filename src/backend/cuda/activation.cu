// Elementwise kernels: SwiGLU over the fused gate/up projection output, and dtype conversions
// (weight upload, tests). Grid-stride loops; f32 arithmetic, one rounding at the store.
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

template <class T>
__global__ void swiglu_kernel(const T* __restrict__ gu, int64_t T_, int64_t F, T* __restrict__ out) {
  pdl_trigger();
  pdl_wait();
  const int64_t n = T_ * F;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / F, i = idx - t * F;
    const float g = to_f32(gu[t * 2 * F + i]);
    const float u = to_f32(gu[t * 2 * F + F + i]);
    out[idx] = from_f32<T>(g / (1.0f + expf(-g)) * u);
  }
}

template <class TI, class TO>
__global__ void convert_kernel(const TI* __restrict__ src, TO* __restrict__ dst, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] = from_f32<TO>(to_f32(src[idx]));
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
    launch_pdl(swiglu_kernel<float>, dim3(grid), dim3(256), 0, s, static_cast<const float*>(gu), T, F, static_cast<float*>(out));
  } else {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16, "swiglu: dtype must be f32 or bf16");
    launch_pdl(swiglu_kernel<bf16>, dim3(grid), dim3(256), 0, s, static_cast<const bf16*>(gu), T, F, static_cast<bf16*>(out));
  }
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
