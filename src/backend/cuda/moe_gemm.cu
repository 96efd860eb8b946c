// The grouped expert GEMMs of the mixture-of-experts layers (kernels.h moe_matmul, for steps past
// the grouped GEMV's kMoeGemvMaxTokens): y = x W_e^T over the pairs sorted by expert, tiled
// kMoeTile x kMoeTile per segment (moe.cu's sort gives each segment its first tile), so one launch
// covers every expert with no host-side count. Block (x, tile) takes output columns
// [x kMoeTile, ...) of the tile's rows; blocks past the device-side tile count exit.
//   - moe_gemm_mma_kernel (bf16, the default): tensor cores, m16n8k16 with f32 accumulators,
//     cp.async k slices one ahead; also over block-quantized experts (moe_matmul_quant), their
//     units dequantized to bf16 in shared memory.
//   - moe_gemm_kernel (f32, and bf16 in the batch-invariant mode): SIMT, every output one f32 FMA
//     chain over k in order (simt_tile.cuh, as gemv.cu's gemm_simt), so a row's result does not
//     depend on the other rows of the step.
// Both launched with PDL (device_utils.cuh); they read nothing before the wait.
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/moe_matmul.cuh"
#include "backend/cuda/quant_unit.cuh"
#include "backend/cuda/simt_tile.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kMmaThreads = 128;    // the tensor-core GEMM: 4 warps of 32 x 32 outputs
constexpr int kMmaBK = 32;          // its k slice
constexpr int kMmaLd = kMmaBK + 8;  // its shared-memory row stride (elements): 80 bytes
constexpr int kTk = 16;             // k slice of the SIMT GEMM

// The rows of a grouped GEMM's tile: sorted positions [m0, m_end) of one segment, and its expert.
struct SegmentTile {
  int m0, m_end, expert;
};

// Tile `tile` of the segment table (the segment s with seg.tile[s] <= tile < seg.tile[s + 1]; at
// most kMoeTile rows from seg.begin[s] + (tile - seg.tile[s]) kMoeTile); false for a tile past the
// device-side count (the same answer for the whole block). Thread 0 searches and publishes through
// `info` (shared memory); every thread of the block must call it (it synchronises the block).
__device__ __forceinline__ bool segment_tile(const MoeMatmulParams& a, int tile, int (&info)[3], SegmentTile& out) {
  const int nseg = *a.seg.count;
  if (tile >= a.seg.tile[nseg]) return false;
  if (threadIdx.x == 0) {
    int s = 0;
    while (a.seg.tile[s + 1] <= tile) ++s;
    const int m0 = a.seg.begin[s] + (tile - a.seg.tile[s]) * kMoeTile;
    info[0] = m0;
    info[1] = min(m0 + kMoeTile, a.seg.begin[s + 1]);
    info[2] = a.seg.expert[s];
  }
  __syncthreads();
  out = {info[0], info[1], info[2]};
  return true;
}

// Block (x, tile): a kMoeTile x kMoeTile output tile of one segment (the segment whose tiles
// [seg.tile[s], seg.tile[s + 1]) hold blockIdx.y), 4 x 4 outputs a thread, every output one f32
// FMA chain over k in order (gemv.cu's gemm_simt: the same result whatever the other rows are).
template <class T, GemmOut MODE>
__global__ __launch_bounds__(256) void moe_gemm_kernel(MoeMatmulParams a) {
  __shared__ float xs[kTk][kMoeTile + 4];
  __shared__ float ws[kTk][kMoeTile + 4];
  __shared__ int info[3];
  pdl_trigger();
  pdl_wait();
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  SegmentTile st;
  if (!segment_tile(a, blockIdx.y, info, st)) return;  // the same for the whole block
  const int m0 = st.m0, m_end = st.m_end;
  const int n0 = blockIdx.x * kMoeTile, N = a.N, K = a.K;
  const T* w = static_cast<const T*>(a.w[st.expert]);
  const T* x = static_cast<const T*>(a.x);
  // The rows this thread loads: r = tid / kTk + 16 i (i < 4) at k offset tid % kTk.
  const int lr = tid / kTk, lk = tid % kTk;
  const T* xrow[4];
  const T* wrow[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = lr + 16 * i;
    xrow[i] = m0 + r < m_end ? x + input_row(a, m0 + r) * a.ldx : nullptr;
    wrow[i] = n0 + r < N ? w + static_cast<int64_t>(n0 + r) * K : nullptr;
  }
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTk) {
    const bool kin = k0 + lk < K;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = lr + 16 * i;
      xs[lk][r] = xrow[i] != nullptr && kin ? to_f32(xrow[i][k0 + lk]) : 0.0f;
      ws[lk][r] = wrow[i] != nullptr && kin ? to_f32(wrow[i][k0 + lk]) : 0.0f;
    }
    __syncthreads();
    simt_tile_fma(xs, ws, min(kTk, K - k0), tx, ty, acc);
    __syncthreads();
  }
  simt_tile_outputs(acc, tx, ty, m0, m_end, n0, N, [&](int pos, int n, float v) { store_out<T, MODE>(a, pos, n, v); });
}

// Block (x, tile): the SIMT kernel's kMoeTile x kMoeTile output tile, on tensor cores (bf16):
// 4 warps of 32 x 32 outputs, m16n8k16 mma with f32 accumulators. A (the segment's gathered input
// rows) and B (the expert's weight rows, [N, K] row-major: the mma's column-major operand) pass
// through shared memory in k slices of kMmaBK, read with ldmatrix; rows padded to kMmaLd elements
// so that ldmatrix's 8 row reads hit distinct banks. A is copied with cp.async one slice ahead (two
// stages). B, for bf16 weights (Q = void), the same way; for a block format (Q = its Format
// decoder, quant_unit.cuh) a slice is one unit of each weight row: threads 0..63 decode their
// row's unit two slices ahead into registers (its loads in flight during a slice's mma) and store
// it one slice ahead as the bf16 values dequantize_weight writes. Rows past the segment or N and
// k past K are zero-filled (K a multiple of 8; of 32 for a block format).
template <GemmOut MODE, class Q>
__global__ __launch_bounds__(kMmaThreads) void moe_gemm_mma_kernel(MoeMatmulParams a) {
  constexpr bool kQuant = !std::is_void_v<Q>;
  static_assert(!kQuant || kMmaBK == 32, "a k slice is one quantized unit");
  __shared__ __align__(16) bf16 as[2][kMoeTile][kMmaLd];
  __shared__ __align__(16) bf16 bs[2][kMoeTile][kMmaLd];
  __shared__ int info[3];
  pdl_trigger();
  pdl_wait();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  SegmentTile st;
  if (!segment_tile(a, blockIdx.y, info, st)) return;  // the same for the whole block
  const int m0 = st.m0, m_end = st.m_end;
  const int n0 = blockIdx.x * kMoeTile, N = a.N, K = a.K;
  const bf16* w = static_cast<const bf16*>(a.w[st.expert]);
  const bf16* x = static_cast<const bf16*>(a.x);
  // This thread's 16-byte chunks of a slice: rows lr + 32 i (i < 2) of each tile, k offset lc.
  constexpr int kRowsPerPass = kMmaThreads / (kMmaBK / 8);
  static_assert(kMoeTile % kRowsPerPass == 0);
  constexpr int kPasses = kMoeTile / kRowsPerPass;
  const int lr = tid / (kMmaBK / 8), lc = (tid % (kMmaBK / 8)) * 8;
  const bf16* arow[kPasses];
  const bf16* brow[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int r = lr + kRowsPerPass * i;
    arow[i] = m0 + r < m_end ? x + input_row(a, m0 + r) * a.ldx : nullptr;
    brow[i] = !kQuant && n0 + r < N ? w + static_cast<int64_t>(n0 + r) * K : nullptr;
  }
  // The quantized weights: thread tid < kMoeTile holds row n0 + tid (null past N or for tid >= 64).
  const uint8_t* qrow = nullptr;
  if constexpr (kQuant)
    if (tid < kMoeTile && n0 + tid < N) qrow = static_cast<const uint8_t*>(a.w[st.expert]) + (n0 + tid) * a.w_row_bytes;
  const int units = K / 32;
  auto decode = [&](int kt, Unit& u) {
    if constexpr (kQuant) {
      if (qrow != nullptr) u = Q::decode(qrow, kt, units);
    }
  };
  auto store_unit = [&](int stage, const Unit& u) {
    if (tid >= kMoeTile) return;
    uint4* dst = reinterpret_cast<uint4*>(&bs[stage][tid][0]);
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (qrow != nullptr) {
        unit_quad_bf16(u, j, v.x, v.y);
        unit_quad_bf16(u, j + 1, v.z, v.w);
      }
      dst[j / 2] = v;
    }
  };
  auto load = [&](int stage, int k0) {
    const int k = k0 + lc;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = lr + kRowsPerPass * i;
      const bool va = arow[i] != nullptr && k < K;
      cp_async16(&as[stage][r][lc], va ? arow[i] + k : x, va);
      if constexpr (!kQuant) {
        const bool vb = brow[i] != nullptr && k < K;
        cp_async16(&bs[stage][r][lc], vb ? brow[i] + k : w, vb);
      }
    }
    cp_async_commit();
  };
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
  const int nk = (K + kMmaBK - 1) / kMmaBK;
  Unit next{};  // the quantized weights of slice kt + 1, decoded in iteration kt - 1
  if constexpr (kQuant) {
    Unit first{};
    decode(0, first);
    store_unit(0, first);
    if (nk > 1) decode(1, next);
  }
  load(0, 0);
  for (int kt = 0; kt < nk; ++kt) {
    if (kt + 1 < nk) {
      load((kt + 1) & 1, (kt + 1) * kMmaBK);
      if constexpr (kQuant) store_unit((kt + 1) & 1, next);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kQuant)
      if (kt + 2 < nk) decode(kt + 2, next);
    const int st = kt & 1;
#pragma unroll
    for (int kk = 0; kk < kMmaBK; kk += 16) {
      uint32_t af[2][4], bfr[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(af[mi], &as[st][wm + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
      // B: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) of each 16 columns
#pragma unroll
      for (int nj = 0; nj < 2; ++nj)
        ldmatrix_x4(bfr[nj], &bs[st][wn + nj * 16 + (lane & 7) + (lane >> 4) * 8][kk + ((lane >> 3) & 1) * 8]);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          mma16816(acc[mi][ni], af[mi], bfr[ni >> 1][(ni & 1) * 2], bfr[ni >> 1][(ni & 1) * 2 + 1], bf16{});
    }
    __syncthreads();  // this stage is refilled by the next iteration's copy
  }
  // C fragment: rows g and g + 8 of each m16 tile, columns 2 (lane % 4) + {0, 1} of each n8 tile.
  const int g = lane >> 2, q = (lane & 3) * 2;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int pos = m0 + wm + mi * 16 + g + h * 8;
      if (pos >= m_end) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int n = n0 + wn + ni * 8 + q;
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (n + e < N) store_out<bf16, MODE>(a, pos, n + e, acc[mi][ni][h * 2 + e]);
      }
    }
}

template <class T>
void launch_simt(const MoeMatmulParams& p, unsigned max_tiles, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(ceil_div(p.N, kMoeTile)), max_tiles);
  switch (p.mode) {
    case GemmOut::kStoreF32: launch_pdl(moe_gemm_kernel<T, GemmOut::kStoreF32>, grid, dim3(256), 0, s, p); break;
    case GemmOut::kStoreAct: launch_pdl(moe_gemm_kernel<T, GemmOut::kStoreAct>, grid, dim3(256), 0, s, p); break;
    default: PAGODA_CUDA_REQUIRE(false, "moe_matmul: the SIMT path stores f32 or act (SwiGLU is a separate kernel)");
  }
}

template <class Q>
void launch_mma(const MoeMatmulParams& p, unsigned max_tiles, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(ceil_div(p.N, kMoeTile)), max_tiles);
  switch (p.mode) {
    case GemmOut::kStoreF32: launch_pdl(moe_gemm_mma_kernel<GemmOut::kStoreF32, Q>, grid, dim3(kMmaThreads), 0, s, p); break;
    case GemmOut::kStoreAct: launch_pdl(moe_gemm_mma_kernel<GemmOut::kStoreAct, Q>, grid, dim3(kMmaThreads), 0, s, p); break;
    default: PAGODA_CUDA_REQUIRE(false, "moe_matmul: the tensor-core GEMM stores f32 or act");
  }
}

}  // namespace

void launch_moe_gemm(const MoeMatmulParams& p, DType dtype, DType wformat, unsigned max_tiles, cudaStream_t s) {
  if (wformat != dtype) {
    PAGODA_CUDA_REQUIRE(p.tensor_cores && dtype == DType::kBF16 && p.K % 32 == 0 && p.w_row_bytes > 0,
                        "moe_matmul_quant: the tensor-core GEMM over bf16 activations, K a multiple of 32");
    const bool ok = dispatch_format(wformat, [&](auto d) { launch_mma<decltype(d)>(p, max_tiles, s); });
    PAGODA_CUDA_REQUIRE(ok, "moe_matmul_quant: no kernel for this weight format");
  } else if (p.tensor_cores) {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16, "moe_matmul: the tensor-core GEMM is bf16");
    launch_mma<void>(p, max_tiles, s);
  } else if (dtype == DType::kF32) {
    launch_simt<float>(p, max_tiles, s);
  } else {
    launch_simt<bf16>(p, max_tiles, s);
  }
}

}  // namespace pagoda::cuda
