// FP8 E4M3 weights with a scale per output channel (DType::kF8E4M3Rows in the device layout of
// device_weight.h: codes [N, K] then scales [N] f32), kernels.h "FP8 weights":
//   - gemv_fp8: y = x W^T for a few rows of bf16 x (W8A16): each lane streams 16 codes (one
//     16-byte load) of its rows, converts them to f32 in registers (cvt e4m3x2 -> f16x2) and
//     multiplies them with the 16 matching inputs of every row; the sum of a row is scaled by the
//     channel's scale at the end. A warp computes one output (two rows for large weights, where
//     the warps are many; for SwiGLU the gate row p and the up row n_out + p); lane l takes the
//     16-code chunks l, l + 32, ... so a warp reads 512 consecutive bytes of a row at a time. The
//     reduction order of a row does not depend on M (batch-invariant mode loops over rows).
//   - quantize_activations_fp8: x [M, K] (bf16 / f32) -> e4m3 codes with one f32 scale a row
//     (dynamic per-token: s = max|x| / 448, code = e4m3(x / s), nearest even, saturating; a zero
//     row has s = 0), the A operand of the cuBLASLt FP8 GEMM (blas.h matmul_fp8).
//   - scale_fp8_output: the per-token x per-channel scaling of an unscaled FP8 GEMM's f32 output,
//     where cuBLASLt has no outer-vector kernel (blas.h matmul_fp8_unscaled).
// Both launched with PDL (device_utils.cuh); the GEMV reads its first weight chunk before it waits.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemv_warp_rows.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8;

struct Fp8GemvArgs {
  const bf16* x;        // [M, K]
  const uint8_t* w;     // [N, K] e4m3 codes
  const float* scale;   // [N]
  int n_out, K;         // n_out: outputs (F for SwiGLU, whose up rows start at row F)
  void* y;
  int64_t ldy;
};

// 16 e4m3 codes (a 16-byte load) as f32.
__device__ __forceinline__ void decode16(const uint4& v, float (&f)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] & 0xFFFF), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

template <int M, GemmOut MODE, int ROWS>
__global__ __launch_bounds__(kWarps * 32) void gemv_fp8_kernel(Fp8GemvArgs a) {
  using Rows = GemvWarpRows<MODE, ROWS>;
  constexpr int R = Rows::R;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  int n0, row_of[R];
  if (!Rows::warp_rows(kWarps, a.n_out, n0, row_of)) return;
  const int chunks = a.K / 16;
  const uint4* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(row_of[r]) * a.K);
  uint4 first[R];
  if (lane < chunks) {
#pragma unroll
    for (int r = 0; r < R; ++r) first[r] = load_stream<true>(rows[r] + lane);
  }
  pdl_wait();
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  auto accumulate = [&](const uint4 (&wv)[R], int c) {
    float wf[R][16];
#pragma unroll
    for (int r = 0; r < R; ++r) decode16(wv[r], wf[r]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[16];
      load_bf16x16(a.x + static_cast<int64_t>(m) * a.K + 16 * c, xf);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) s = fmaf(xf[i], wf[r][i], s);
        acc[m][r] += s;
      }
    }
  };
  if (lane < chunks) accumulate(first, lane);
#pragma unroll 2
  for (int c = lane + 32; c < chunks; c += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = load_stream<false>(rows[r] + c);
    accumulate(wv, c);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float sc = a.scale[row_of[r]];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m][r] *= sc;
  }
  Rows::store(acc, n0, a.n_out, a.y, a.ldy);
}

void launch_fp8(const Fp8GemvArgs& a, int64_t M, GemmOut mode, cudaStream_t s) {
  with_gemv_kernel(M, mode, a.n_out, a.K, [&](auto m, auto r, auto md) {
    const dim3 grid(static_cast<unsigned>(ceil_div(gemv_warps(a.n_out, mode, r), kWarps)));
    launch_pdl(gemv_fp8_kernel<decltype(m)::value, decltype(md)::value, decltype(r)::value>, grid, dim3(kWarps * 32), 0,
               s, a);
  });
}

// ---- activations --------------------------------------------------------------------------

constexpr int kQuantThreads = 256;

// One block a row: max|x| over the row, then each element x / s rounded to e4m3 (the division in
// IEEE f32, as the host's quant::quantize_row(kF8E4M3Rows) divides).
template <class T>
__global__ __launch_bounds__(kQuantThreads) void quantize_fp8_kernel(const T* __restrict__ x, int K,
                                                                    uint8_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ float red[kQuantThreads / 32];
  pdl_trigger();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const T* xr = x + row * K;
  float amax = 0.0f;
  for (int i = threadIdx.x; i < K; i += kQuantThreads) amax = fmaxf(amax, fabsf(to_f32(xr[i])));
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kQuantThreads / 32 ? red[threadIdx.x] : 0.0f;
    v = warp_max(v);
    if (threadIdx.x == 0) red[0] = v;
  }
  __syncthreads();
  const float s = red[0] / 448.0f;
  uint8_t* qr = q + row * K;
  for (int i = threadIdx.x; i < K; i += kQuantThreads) {
    const float v = to_f32(xr[i]);
    qr[i] = s != 0.0f ? static_cast<uint8_t>(__nv_cvt_float_to_fp8(v / s, __NV_SATFINITE, __NV_E4M3)) : uint8_t{0};
  }
  if (threadIdx.x == 0) scale[row] = s;
}

// y[m, n] (mode) = xs[m] * ws[n] * acc[m, n]: a thread an element, grid-stride.
template <GemmOut MODE>
__global__ void scale_fp8_output_kernel(const float* __restrict__ acc, int64_t M, int64_t N, const float* __restrict__ xs,
                                        const float* __restrict__ ws, void* __restrict__ y, int64_t ldy) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    const float v = acc[i] * (xs[m] * ws[n]);
    if constexpr (MODE == GemmOut::kStoreF32) static_cast<float*>(y)[m * ldy + n] = v;
    else if constexpr (MODE == GemmOut::kAddF32) static_cast<float*>(y)[m * ldy + n] += v;
    else static_cast<bf16*>(y)[m * ldy + n] = __float2bfloat16_rn(v);
  }
}

}  // namespace

bool fp8_weight_supported(int64_t K) { return K > 0 && K % 16 == 0; }

void scale_fp8_output(const float* acc, int64_t M, int64_t N, const float* x_scale, const float* w_scale, void* y,
                      int64_t ldy, GemmOut mode, cudaStream_t s) {
  if (M <= 0 || N <= 0) return;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(ceil_div(M * N, 256), 65535));
  switch (mode) {
    case GemmOut::kStoreF32: launch_pdl(scale_fp8_output_kernel<GemmOut::kStoreF32>, dim3(grid), dim3(256), 0, s, acc, M, N, x_scale, w_scale, y, ldy); break;
    case GemmOut::kAddF32: launch_pdl(scale_fp8_output_kernel<GemmOut::kAddF32>, dim3(grid), dim3(256), 0, s, acc, M, N, x_scale, w_scale, y, ldy); break;
    case GemmOut::kStoreAct: launch_pdl(scale_fp8_output_kernel<GemmOut::kStoreAct>, dim3(grid), dim3(256), 0, s, acc, M, N, x_scale, w_scale, y, ldy); break;
    case GemmOut::kSwiGlu: PAGODA_CUDA_REQUIRE(false, "scale_fp8_output: no SwiGLU"); break;
  }
  CUDA_CHECK_LAUNCH();
}

void gemv_fp8(const void* x, const void* w, const float* w_scale, int64_t M, int64_t N, int64_t K, void* y,
              int64_t ldy, GemmOut mode, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(M >= 1 && M <= kFp8GemvMaxM, "gemv_fp8: 1 <= M <= kFp8GemvMaxM");
  PAGODA_CUDA_REQUIRE(fp8_weight_supported(K), "gemv_fp8: K must be a positive multiple of 16");
  PAGODA_CUDA_REQUIRE(mode != GemmOut::kSwiGlu || N % 2 == 0, "gemv_fp8: SwiGLU needs [gate; up] rows");
  PAGODA_CUDA_REQUIRE(aligned16(x) && aligned16(w), "gemv_fp8: x and w must be 16-byte aligned");
  Fp8GemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.w = static_cast<const uint8_t*>(w);
  a.scale = w_scale;
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.y = y;
  a.ldy = ldy;
  if (a.n_out <= 0) return;
  launch_fp8(a, M, mode, s);
  CUDA_CHECK_LAUNCH();
}

void quantize_activations_fp8(const void* x, DType x_dtype, int64_t M, int64_t K, uint8_t* q, float* scale,
                              cudaStream_t s) {
  if (M <= 0) return;
  const dim3 grid(static_cast<unsigned>(M)), block(kQuantThreads);
  const int k = static_cast<int>(K);
  if (x_dtype == DType::kBF16) launch_pdl(quantize_fp8_kernel<bf16>, grid, block, 0, s, static_cast<const bf16*>(x), k, q, scale);
  else if (x_dtype == DType::kF32) launch_pdl(quantize_fp8_kernel<float>, grid, block, 0, s, static_cast<const float*>(x), k, q, scale);
  else PAGODA_CUDA_REQUIRE(false, "quantize_activations_fp8: x must be bf16 or f32");
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
