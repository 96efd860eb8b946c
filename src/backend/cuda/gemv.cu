// Matmuls outside cuBLASLt.
//
// gemv_bf16: decode-sized (M <= 4) y = x W^T with bf16 weights, the batch-1 hot path (the
// executor uses it for one row only: from two rows cuBLASLt is faster, docs/decisions.md#d5). Bound by
// reading W once: one warp per output row (two for the fused gate/up + SwiGLU), each lane
// streams 16-byte chunks of the row with four loads in flight (L1-bypassing streaming loads),
// f32 FMAs, one warp reduction per output at the end. Launched with programmatic dependent
// launch: the first weight loads (and a fused norm's weights) are issued before the kernel waits
// for its predecessor, which hides the launch gap and the first DRAM round trip between the many
// short decode kernels; they are plain loads, not read-only ones, so that ptxas keeps them there
// (load_stream<true>). Optionally fuses the preceding RMSNorm: each block normalises the f32 residual
// rows into shared memory (bf16) and reads x from there.
//
// gemm_simt: the batch-invariant matmul. 64x64 output tiles, 16-deep k slices through shared
// memory, 4x4 outputs per thread; every output is a single f32 fmaf chain over k in order, so a
// row's result is bit-identical whatever M is and whatever else is in the batch. Used for every
// linear layer in --batch-invariant mode (tests), never for speed.
#include <cstdio>

#include "backend/cuda/block_trace.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/simt_tile.cuh"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kUnrollLoads = 8;  // 16-byte weight loads in flight per lane (split over the R rows)
constexpr int kGemvMaxSmem = 96 * 1024;
// float4 norm weights a thread of a fused-norm GEMV reads before waiting (all of them up to
// K = 4 * 4 * kGemvWarps * 32 = 4096); also the float4 of the residual row it holds in registers.
constexpr int kNormPreload = 4;

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

// R = weight rows per warp (2 for SwiGLU: gate row n and up row F + n). `pre` holds the lane's
// first kUnroll chunks, loaded before the kernel waited for its predecessor (PDL prologue).
template <int M, int R, bool SMEM_X, int kUnroll = kUnrollLoads / R>
__device__ __forceinline__ void gemv_rows(const uint4* const (&w)[R], const uint4* x, int kc, int lane,
                                          const uint4 (&pre)[kUnroll][R], float (&acc)[M][R]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  auto load_x = [&](int64_t i) -> uint4 {
    if constexpr (SMEM_X) return x[i];
    else return __ldg(x + i);
  };
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int c = lane + 32 * u;
    if (c < kc) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 xv = load_x(static_cast<int64_t>(m) * kc + c);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = dot8(pre[u][r], xv, acc[m][r]);
      }
    }
  }
  int c = lane + 32 * kUnroll;
  for (; c + 32 * (kUnroll - 1) < kc; c += 32 * kUnroll) {
    uint4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = load_stream<false>(w[r] + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 xv = load_x(static_cast<int64_t>(m) * kc + c + 32 * u);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = dot8(wv[u][r], xv, acc[m][r]);
      }
  }
  for (; c < kc; c += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = load_stream<false>(w[r] + c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4 xv = load_x(static_cast<int64_t>(m) * kc + c);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = dot8(wv[r], xv, acc[m][r]);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
}

struct GemvArgs {
  const bf16* x;           // [M, K] bf16 (plain) ...
  const float* residual;   // ... or, NORM: f32 rows normalised in the prologue
  const int32_t* rows;     // NORM: optional row index per m into residual
  const float* norm_w;     // NORM: [K]
  float eps;
  const bf16* w;
  int n_out, K;
  void* y;
  int64_t ldy;
  TraceSlots trace;  // block trace (block_trace.h); records == nullptr: off
};

// NORM: the block first computes rms_norm(residual[row m]) * norm_w as bf16 into shared memory
// (the same rounding as the rms_norm kernel's bf16 output), fusing the norm into the matmul. Its
// weights are read before the wait (NormWeightPreload): read after the reduction they would be a
// DRAM miss on the critical path of the first wave. With kNormPreload float4 a thread in registers
// the one-row fused-norm kernels take 80 registers: 3 blocks an SM (8 float4: 108, 2 blocks).
// PAIR (kStoreF32 only): a warp computes two outputs, n and n + n_out (n_out = N / 2), so that a
// matrix whose one-row-a-warp grid needs a second wave of blocks fits in one (gemv_pairs_rows).
template <GemmOut MODE, bool PAIR>
constexpr int kRowsPerWarp = MODE == GemmOut::kSwiGlu || PAIR ? 2 : 1;  // gate and up, or two outputs

template <int M, GemmOut MODE, bool NORM, bool PAIR = false>
__global__ __launch_bounds__(kGemvWarps * 32) void gemv_kernel(GemvArgs a) {
  static_assert(!PAIR || MODE == GemmOut::kStoreF32);
  constexpr int R = kRowsPerWarp<MODE, PAIR>;
  constexpr int kUnroll = kUnrollLoads / R;
  extern __shared__ uint4 xs[];
  __shared__ float scratch[33];
  warp_trace(a.trace, TracePoint::kStart);
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  const bool active = n < a.n_out;
  const int K = a.K, kc = K / 8;
  const uint4* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    rows[r] = reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(active ? n + r * a.n_out : 0) * K);
  // Weights do not depend on earlier kernels: start streaming them before waiting.
  uint4 pre[kUnroll][R];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int r = 0; r < R; ++r)
      pre[u][r] = (active && lane + 32 * u < kc) ? load_stream<true>(rows[r] + lane + 32 * u) : uint4{0, 0, 0, 0};
  [[maybe_unused]] NormWeightPreload<NORM ? kNormPreload : 0> norm_w;
  if constexpr (NORM) norm_w.load(reinterpret_cast<const float4*>(a.norm_w), K / 4);
  pdl_wait();
  warp_trace(a.trace, TracePoint::kWaited);
  const uint4* x;
  if constexpr (NORM) {
    // The row is read once into registers (up to kNormPreload float4 a thread, the rest again),
    // reduced, then normalised from the registers into shared memory as bf16.
    __nv_bfloat162* xh = reinterpret_cast<__nv_bfloat162*>(xs);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float4* xr = reinterpret_cast<const float4*>(a.residual + static_cast<int64_t>(a.rows ? a.rows[m] : m) * K);
      auto put = [&](int j, const float4& y) {
        xh[m * (K / 2) + 2 * j] = __floats2bfloat162_rn(y.x, y.y);
        xh[m * (K / 2) + 2 * j + 1] = __floats2bfloat162_rn(y.z, y.w);
      };
      block_rms_norm_row_with<kNormPreload>(xr, K / 4, a.eps, scratch, norm_w, put);
    }
    __syncthreads();
    x = xs;
  } else {
    x = reinterpret_cast<const uint4*>(a.x);
  }
  if (!active) return warp_trace(a.trace, TracePoint::kEnd);
  float acc[M][R];
  gemv_rows<M, R, NORM>(rows, x, kc, lane, pre, acc);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if constexpr (MODE == GemmOut::kSwiGlu) {
      static_cast<bf16*>(a.y)[m * a.ldy + n] = swiglu_out(acc[m][0], acc[m][1]);
    } else if constexpr (MODE == GemmOut::kStoreF32) {
#pragma unroll
      for (int r = 0; r < R; ++r) static_cast<float*>(a.y)[m * a.ldy + n + r * a.n_out] = acc[m][r];
    } else if constexpr (MODE == GemmOut::kAddF32) {
      static_cast<float*>(a.y)[m * a.ldy + n] += acc[m][0];
    } else {
      static_cast<bf16*>(a.y)[m * a.ldy + n] = __float2bfloat16_rn(acc[m][0]);
    }
  }
  warp_trace(a.trace, TracePoint::kEnd);
}

template <int M, GemmOut MODE, bool NORM, bool PAIR = false>
void launch_gemv_mode(const GemvArgs& a, cudaStream_t s) {
  const auto kernel = gemv_kernel<M, MODE, NORM, PAIR>;
  const size_t smem = NORM ? static_cast<size_t>(M) * a.K * 2 : 0;
  if (smem > 47 * 1024) {  // the default 48 KiB a block also hold the static scratch[33] (a KiB of margin)
    static bool configured = false;
    if (!configured) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kGemvMaxSmem));
      configured = true;
    }
  }
  const unsigned grid = static_cast<unsigned>(ceil_div(a.n_out, kGemvWarps));
  GemvArgs args = a;
  if (block_trace_enabled()) {
    char label[64];
    std::snprintf(label, sizeof label, "gemv:m%d:n%d:k%d:mode%d%s%s", M, a.n_out, a.K, static_cast<int>(MODE), NORM ? ":norm" : "",
                  PAIR ? ":pair" : "");
    args.trace = block_trace_reserve(label, dim3(grid), kGemvWarps, int64_t{kRowsPerWarp<MODE, PAIR>} * a.K * 2);
  }
  launch_pdl(kernel, dim3(grid), dim3(kGemvWarps * 32), smem, s, args);
}

// GemvPairs::kAuto: a one-row fused-norm kStoreF32 GEMV of N outputs takes two a warp when one a
// warp needs more than one wave of blocks and two a warp fit in one (QKV of the 8B shape: 768 ->
// 384 blocks at 3 an SM on 132 SMs; not the lm_head, which needs many waves either way). Measured
// on the H200 (docs/decisions.md#d6): +0.7 % at tg128 batch 1 (the QKV span 15.4 -> 13.5 us a layer).
bool gemv_pairs_rows(int64_t N) {
  static const int resident = [] {
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // Registers set the limit (3 an SM); the shared memory of any K up to 32768 would allow more.
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<1, GemmOut::kStoreF32, true>, kGemvWarps * 32,
                                                             4096 * 2));
    return sms * per_sm;
  }();
  return ceil_div(N, kGemvWarps) > resident && ceil_div(N / 2, kGemvWarps) <= resident;
}

template <int M>
void launch_gemv(const GemvArgs& a, GemmOut mode, bool norm, cudaStream_t s) {
  if (norm) {
    if (mode == GemmOut::kSwiGlu) launch_gemv_mode<M, GemmOut::kSwiGlu, true>(a, s);
    else if (mode == GemmOut::kStoreF32) launch_gemv_mode<M, GemmOut::kStoreF32, true>(a, s);
    else PAGODA_CUDA_REQUIRE(false, "gemv: the fused norm goes with kStoreF32 or kSwiGlu");
    return;
  }
  switch (mode) {
    case GemmOut::kStoreF32: launch_gemv_mode<M, GemmOut::kStoreF32, false>(a, s); break;
    case GemmOut::kAddF32: launch_gemv_mode<M, GemmOut::kAddF32, false>(a, s); break;
    case GemmOut::kStoreAct: launch_gemv_mode<M, GemmOut::kStoreAct, false>(a, s); break;
    case GemmOut::kSwiGlu: launch_gemv_mode<M, GemmOut::kSwiGlu, false>(a, s); break;
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
    simt_tile_fma(xs, ws, kn, tx, ty, acc);
    __syncthreads();
  }
  simt_tile_outputs(acc, tx, ty, m0, M, n0, N, [&](int m, int n, float v) {
    if constexpr (MODE == GemmOut::kStoreF32) static_cast<float*>(y)[m * ldy + n] = v;
    else if constexpr (MODE == GemmOut::kAddF32) static_cast<float*>(y)[m * ldy + n] += v;
    else static_cast<T*>(y)[m * ldy + n] = from_f32<T>(v);
  });
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
bool gemv_takes_pairs(int64_t M, int64_t N, GemmOut mode, const GemvNorm* norm) {
  return M == 1 && norm && mode == GemmOut::kStoreF32 && N % 2 == 0 &&
         (norm->pairs == GemvPairs::kAlways || (norm->pairs == GemvPairs::kAuto && gemv_pairs_rows(N)));
}

bool gemv_norm_supported(int64_t M, int64_t K) { return gemv_supported(M, K) && M * K * 2 <= kGemvMaxSmem; }

void gemv_bf16(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
               cudaStream_t s, const GemvNorm* norm) {
  PAGODA_CUDA_REQUIRE(gemv_supported(M, K), "gemv_bf16: 1 <= M <= 4 and K % 8 == 0");
  PAGODA_CUDA_REQUIRE(!norm || gemv_norm_supported(M, K), "gemv_bf16: fused norm needs M * K * 2 <= 96 KiB");
  GemvArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.w = static_cast<const bf16*>(w);
  const bool pair = gemv_takes_pairs(M, N, mode, norm);
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu || pair ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.y = y;
  a.ldy = ldy;
  if (norm) {
    a.residual = norm->residual;
    a.rows = norm->rows;
    a.norm_w = norm->weight;
    a.eps = norm->eps;
  }
  switch (M) {
    case 1:
      if (pair) launch_gemv_mode<1, GemmOut::kStoreF32, true, true>(a, s);
      else launch_gemv<1>(a, mode, norm != nullptr, s);
      break;
    case 2: launch_gemv<2>(a, mode, norm != nullptr, s); break;
    case 3: launch_gemv<3>(a, mode, norm != nullptr, s); break;
    default: launch_gemv<4>(a, mode, norm != nullptr, s); break;
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
