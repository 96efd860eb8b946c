// Matmuls outside cuBLASLt.
//
// gemv_bf16: decode-sized (M <= 4) y = x W^T with bf16 weights, the batch-1 hot path. Bound by
// reading W once: one warp per output row (two for the fused gate/up + SwiGLU), each lane
// streams 16-byte chunks of the row with four loads in flight (L1-bypassing streaming loads;
// x is re-read from L1), f32 FMAs, one warp reduction per output at the end.
//
// gemm_simt: the batch-invariant matmul. 64x64 output tiles, 16-deep k slices through shared
// memory, 4x4 outputs per thread; every output is a single f32 fmaf chain over k in order, so a
// row's result is bit-identical whatever M is and whatever else is in the batch. Used for every
// linear layer in --batch-invariant mode (tests), never for speed.
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kUnroll = 4;

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

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

// R = weight rows per warp (2 for SwiGLU: gate row n and up row F + n).
template <int M, int R>
__device__ __forceinline__ void gemv_rows(const uint4* const (&w)[R], const uint4* x, int kc, int lane,
                                          float (&acc)[M][R]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  int c = lane;
  for (; c + 32 * (kUnroll - 1) < kc; c += 32 * kUnroll) {
    uint4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = load_stream(w[r] + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 xv = __ldg(x + static_cast<int64_t>(m) * kc + c + 32 * u);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = dot8(wv[u][r], xv, acc[m][r]);
      }
  }
  for (; c < kc; c += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = load_stream(w[r] + c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4 xv = __ldg(x + static_cast<int64_t>(m) * kc + c);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = dot8(wv[r], xv, acc[m][r]);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
}

template <int M, GemmOut MODE>
__global__ __launch_bounds__(kGemvWarps * 32) void gemv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                               int n_out, int K, void* __restrict__ y, int64_t ldy) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (n >= n_out) return;
  const int kc = K / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  if constexpr (MODE == GemmOut::kSwiGlu) {
    const uint4* const rows[2] = {reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n) * K),
                                  reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n + n_out) * K)};
    float acc[M][2];
    gemv_rows<M, 2>(rows, xv, kc, lane, acc);
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        // Round gate and up to bf16 first, as the unfused path (bf16 GEMM output) does.
        const float g = __bfloat162float(__float2bfloat16_rn(acc[m][0]));
        const float u = __bfloat162float(__float2bfloat16_rn(acc[m][1]));
        static_cast<bf16*>(y)[m * ldy + n] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
      }
    }
  } else {
    const uint4* const rows[1] = {reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n) * K)};
    float acc[M][1];
    gemv_rows<M, 1>(rows, xv, kc, lane, acc);
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if constexpr (MODE == GemmOut::kStoreF32) static_cast<float*>(y)[m * ldy + n] = acc[m][0];
        else if constexpr (MODE == GemmOut::kAddF32) static_cast<float*>(y)[m * ldy + n] += acc[m][0];
        else static_cast<bf16*>(y)[m * ldy + n] = __float2bfloat16_rn(acc[m][0]);
      }
    }
  }
}

template <int M>
void launch_gemv(const void* x, const void* w, int64_t n_out, int64_t K, void* y, int64_t ldy, GemmOut mode,
                 cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(ceil_div(n_out, kGemvWarps));
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wb = static_cast<const bf16*>(w);
  const int n = static_cast<int>(n_out), k = static_cast<int>(K);
  switch (mode) {
    case GemmOut::kStoreF32: gemv_kernel<M, GemmOut::kStoreF32><<<grid, kGemvWarps * 32, 0, s>>>(xb, wb, n, k, y, ldy); break;
    case GemmOut::kAddF32: gemv_kernel<M, GemmOut::kAddF32><<<grid, kGemvWarps * 32, 0, s>>>(xb, wb, n, k, y, ldy); break;
    case GemmOut::kStoreAct: gemv_kernel<M, GemmOut::kStoreAct><<<grid, kGemvWarps * 32, 0, s>>>(xb, wb, n, k, y, ldy); break;
    case GemmOut::kSwiGlu: gemv_kernel<M, GemmOut::kSwiGlu><<<grid, kGemvWarps * 32, 0, s>>>(xb, wb, n, k, y, ldy); break;
  }
}

// ---- batch-invariant SIMT GEMM ----

constexpr int kTile = 64, kTk = 16;

template <class T, GemmOut MODE>
__global__ __launch_bounds__(256) void gemm_simt_kernel(const T* __restrict__ x, const T* __restrict__ w, int M, int N,
                                                        int K, void* __restrict__ y, int64_t ldy) {
  __shared__ float xs[kTk][kTile + 4];
  __shared__ float ws[kTk][kTile + 4];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + 256 * i;
      const int r = idx / kTk, k = idx % kTk;
      xs[k][r] = (m0 + r < M && k0 + k < K) ? to_f32(x[static_cast<int64_t>(m0 + r) * K + k0 + k]) : 0.0f;
      ws[k][r] = (n0 + r < N && k0 + k < K) ? to_f32(w[static_cast<int64_t>(n0 + r) * K + k0 + k]) : 0.0f;
    }
    __syncthreads();
    const int kn = min(kTk, K - k0);  // padding k would add +0.0f: skip it (keeps -0.0 results exact)
    for (int k = 0; k < kn; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[k][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= N) continue;
      if constexpr (MODE == GemmOut::kStoreF32) static_cast<float*>(y)[m * ldy + n] = acc[i][j];
      else if constexpr (MODE == GemmOut::kAddF32) static_cast<float*>(y)[m * ldy + n] += acc[i][j];
      else static_cast<T*>(y)[m * ldy + n] = from_f32<T>(acc[i][j]);
    }
  }
}

template <class T>
void launch_simt(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
                 cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(ceil_div(N, kTile)), static_cast<unsigned>(ceil_div(M, kTile)));
  const auto* xt = static_cast<const T*>(x);
  const auto* wt = static_cast<const T*>(w);
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  switch (mode) {
    case GemmOut::kStoreF32: gemm_simt_kernel<T, GemmOut::kStoreF32><<<grid, 256, 0, s>>>(xt, wt, m, n, k, y, ldy); break;
    case GemmOut::kAddF32: gemm_simt_kernel<T, GemmOut::kAddF32><<<grid, 256, 0, s>>>(xt, wt, m, n, k, y, ldy); break;
    case GemmOut::kStoreAct: gemm_simt_kernel<T, GemmOut::kStoreAct><<<grid, 256, 0, s>>>(xt, wt, m, n, k, y, ldy); break;
    case GemmOut::kSwiGlu: PAGODA_CUDA_REQUIRE(false, "gemm_simt: no fused SwiGLU");
  }
}

}  // namespace

bool gemv_supported(int64_t M, int64_t K) { return M >= 1 && M <= kGemvMaxM && K % 8 == 0; }

void gemv_bf16(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
               cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(gemv_supported(M, K), "gemv_bf16: 1 <= M <= 4 and K % 8 == 0");
  const int64_t n_out = mode == GemmOut::kSwiGlu ? N / 2 : N;
  switch (M) {
    case 1: launch_gemv<1>(x, w, n_out, K, y, ldy, mode, s); break;
    case 2: launch_gemv<2>(x, w, n_out, K, y, ldy, mode, s); break;
    case 3: launch_gemv<3>(x, w, n_out, K, y, ldy, mode, s); break;
    default: launch_gemv<4>(x, w, n_out, K, y, ldy, mode, s); break;
  }
  CUDA_CHECK_LAUNCH();
}

void gemm_simt(const void* x, const void* w, DType dtype, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy,
               GemmOut mode, cudaStream_t s) {
  if (M <= 0) return;
  if (dtype == DType::kF32) {
    launch_simt<float>(x, w, M, N, K, y, ldy, mode, s);
  } else {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16, "gemm_simt: dtype must be f32 or bf16");
    launch_simt<bf16>(x, w, M, N, K, y, ldy, mode, s);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
