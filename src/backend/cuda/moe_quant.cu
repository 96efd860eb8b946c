// Grouped expert matmuls over GGUF block-quantized experts (kernels.h moe_matmul_quant): the
// grouped int8 GEMV of small steps (here) and, for larger ones, moe_gemm.cu's tensor-core GEMM
// with its weight slices dequantized in shared memory.
//
// The GEMV is gemv_quant's arithmetic (quant_unit.cuh unit_dot_q8: the activations quantized per
// 32 inputs, eight dp4a a unit) over the routed pairs: block (x, s) of a grid of
// moe_gemv_blocks(...) x segments; its warps take output rows n = x * kMoeGemvWarps + warp, then
// n + the grid's warps, ... of active segment s, and read a weight row (two: gate and up) once per
// kRows of the segment's rows; lane l takes units l, l + 32, ... (consecutive lanes, consecutive
// bytes). Only the routed experts' weights are read. Launched with PDL; nothing is read before the
// wait (the expert of a segment is known only from the routing).
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_matmul.cuh"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/quant_unit.cuh"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kRows = 4;  // token rows a pass over an expert's weight row serves

template <class Q, GemmOut MODE>
__global__ __launch_bounds__(kMoeGemvWarps * 32) void moe_gemv_quant_kernel(MoeMatmulParams a) {
  pdl_trigger();
  pdl_wait();
  GemvSegment seg;
  if (!gemv_segment(a, seg)) return;
  const int begin = seg.begin, end = seg.end, expert = seg.expert;
  constexpr int R = MODE == GemmOut::kSwiGlu ? 2 : 1;
  const int n_out = R == 2 ? a.N / 2 : a.N;
  const int lane = threadIdx.x & 31, units = a.K / 32;
  const uint8_t* w = static_cast<const uint8_t*>(a.w[expert]);
  for (int n = blockIdx.x * kMoeGemvWarps + (threadIdx.x >> 5); n < n_out; n += gridDim.x * kMoeGemvWarps) {
    const uint8_t* rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = w + static_cast<int64_t>(n + r * n_out) * a.w_row_bytes;
    for (int r0 = begin; r0 < end; r0 += kRows) {
      const int mc = min(kRows, end - r0);
      const int8_t* xq[kRows];
      const float2* xd[kRows];
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int64_t row = input_row(a, r0 + min(m, mc - 1));
        xq[m] = a.xq + row * a.K;
        xd[m] = a.xds + row * units;
      }
      float acc[kRows][R];
#pragma unroll
      for (int m = 0; m < kRows; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
#pragma unroll 2
      for (int u = lane; u < units; u += 32) {
        Unit wu[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wu[r] = Q::decode(rows[r], u, units);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          if (m >= mc) break;
          const int4* xp = reinterpret_cast<const int4*>(xq[m] + 32 * u);
          const int4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
          const float2 xds = __ldg(xd[m] + u);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] += unit_dot_q8(wu[r], x0, x1, xds);
        }
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
      if (lane != 0) continue;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        if (m >= mc) break;
        if constexpr (MODE == GemmOut::kSwiGlu) {
          static_cast<bf16*>(a.y)[static_cast<int64_t>(r0 + m) * a.ldy + n] = swiglu_out(acc[m][0], acc[m][1]);
        } else {
          store_out<bf16, MODE>(a, r0 + m, n, acc[m][0]);
        }
      }
    }
  }
}

template <class Q>
void launch_gemv(const MoeMatmulParams& p, unsigned max_segments, cudaStream_t s) {
  const int n_out = p.mode == GemmOut::kSwiGlu ? p.N / 2 : p.N;
  const dim3 grid(moe_gemv_blocks(n_out, 1, max_segments), max_segments), block(kMoeGemvWarps * 32);
  switch (p.mode) {
    case GemmOut::kSwiGlu: launch_pdl(moe_gemv_quant_kernel<Q, GemmOut::kSwiGlu>, grid, block, 0, s, p); break;
    case GemmOut::kStoreF32: launch_pdl(moe_gemv_quant_kernel<Q, GemmOut::kStoreF32>, grid, block, 0, s, p); break;
    case GemmOut::kStoreAct: launch_pdl(moe_gemv_quant_kernel<Q, GemmOut::kStoreAct>, grid, block, 0, s, p); break;
    default: PAGODA_CUDA_REQUIRE(false, "moe_matmul_quant: mode");
  }
}

}  // namespace

void moe_matmul_quant(const MoeMatmulParams& p, DType format, bool gemv, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(quant_weight_supported(format), "moe_matmul_quant: no kernel for this weight format");
  PAGODA_CUDA_REQUIRE(p.P >= 1 && p.E >= 1 && p.E <= kMoeMaxExperts && p.N >= 1 && p.K >= 1, "moe_matmul_quant: shape");
  PAGODA_CUDA_REQUIRE(p.K % dtype_traits(format).block_size == 0 && p.K % 32 == 0,
                      "moe_matmul_quant: K must be whole blocks");
  PAGODA_CUDA_REQUIRE(p.w_row_bytes == device_row_bytes(format, p.K), "moe_matmul_quant: w_row_bytes");
  PAGODA_CUDA_REQUIRE(p.mode != GemmOut::kAddF32 && (gemv || p.mode != GemmOut::kSwiGlu),
                      "moe_matmul_quant: kSwiGlu (GEMV only), kStoreAct or kStoreF32");
  PAGODA_CUDA_REQUIRE(p.mode != GemmOut::kSwiGlu || p.N % 2 == 0, "moe_matmul_quant: SwiGLU needs [gate; up] rows");
  const unsigned max_segments = static_cast<unsigned>(std::min(p.E, p.P));
  if (gemv) {
    PAGODA_CUDA_REQUIRE(p.xq != nullptr && p.xds != nullptr && aligned16(p.xq),
                        "moe_matmul_quant: the GEMV reads the inputs' q8 codes (16-byte aligned)");
    dispatch_format(format, [&](auto d) { launch_gemv<decltype(d)>(p, max_segments, s); });
  } else {
    PAGODA_CUDA_REQUIRE(p.ldx % 8 == 0 && aligned16(p.x), "moe_matmul_quant: 16-byte aligned bf16 input rows");
    const unsigned max_tiles = static_cast<unsigned>(moe_max_tiles(p.P, p.E));
    PAGODA_CUDA_REQUIRE(max_tiles <= 65535u, "moe_matmul_quant: too many pairs for one launch");
    MoeMatmulParams q = p;
    q.tensor_cores = true;
    launch_moe_gemm(q, DType::kBF16, format, max_tiles, s);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
