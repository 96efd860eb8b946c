// Grouped expert matmuls over GGUF block-quantized experts (kernels.h moe_matmul_quant,
// moe_down_combine_quant): the grouped int8 GEMVs of small steps (here) and, for larger ones,
// moe_gemm.cu's tensor-core GEMM with its weight slices dequantized in shared memory.
//
// The GEMVs are gemv_quant's arithmetic (quant_unit.cuh unit_dot_q8: the inputs quantized per 32
// values, eight dp4a a unit), with the input quantization inside the kernel: each block quantizes
// the bf16 rows it reads into shared memory (a thread a 32-value block, quantize_activations_q8's
// arithmetic bit for bit), so a MoE layer's matmuls need no quantization launches.
//   - moe_gemv_quant_kernel: block (x, s) of a grid of moe_gemv_blocks(...) x segments; for each
//     chunk of up to kRows of segment s's rows (quantized first), its warps take output rows
//     n = x * kMoeGemvWarps + warp, then n + the grid's warps, ..., each weight row (two: gate and
//     up) read once per chunk; lane l takes units l, l + 32, ... (consecutive lanes, consecutive
//     bytes). Only the routed experts' weights are read.
//   - moe_down_combine_quant_kernel (one token, no shared expert): warp n computes output column
//     n over every active expert at once (a lane takes (segment, unit) pairs l, l + 32, ... of all
//     the segments' units, so every expert's loads are in flight together), each unit's dot
//     product scaled by its pair's routing weight, and adds the sum to the residual.
// Launched with PDL; nothing is read before the wait (the expert of a segment is known only from
// the routing, the inputs from the previous kernels).
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
constexpr int kThreads = kMoeGemvWarps * 32;

// Shared-memory q8 rows: codes [rows, K] then the (d, d * sum q) pairs [rows, K / 32].
struct Q8Rows {
  int8_t* q;
  float2* ds;
  int K;
  __device__ Q8Rows(unsigned char* smem, int rows, int K_) : K(K_) {
    q = reinterpret_cast<int8_t*>(smem);
    ds = reinterpret_cast<float2*>(smem + static_cast<size_t>(rows) * K);
  }
  static size_t bytes(int rows, int K) { return static_cast<size_t>(rows) * K + static_cast<size_t>(rows) * (K / 32) * 8; }
};

// Rows row_of(0 .. rows - 1) of the bf16 matrix x (row stride ldx) quantized into out, a thread a
// 32-value block: d = max|v| / 127, q = round-half-even(v / d), (d, d * sum q) (0 for a zero
// block): quantize_q8_kernel's values. The caller synchronises before reading them.
template <class RowOf>
__device__ __forceinline__ void quantize_rows(const bf16* __restrict__ x, int64_t ldx, int rows, RowOf row_of, Q8Rows out) {
  const int units = out.K / 32;
  for (int b = threadIdx.x; b < rows * units; b += blockDim.x) {
    const int m = b / units, u = b - m * units;
    const uint4* src = reinterpret_cast<const uint4*>(x + row_of(m) * ldx + 32 * u);
    float v[32];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint4 w = __ldg(src + c);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        v[8 * c + 2 * i] = f.x;
        v[8 * c + 2 * i + 1] = f.y;
      }
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float d = amax / 127.0f;
    int sum = 0;
    uint32_t packed[8];
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      uint32_t word = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int q = amax > 0.0f ? __float2int_rn(v[4 * w + i] / d) : 0;
        sum += q;
        word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * i);
      }
      packed[w] = word;
    }
    int4* dst = reinterpret_cast<int4*>(out.q + static_cast<int64_t>(m) * out.K + 32 * u);
    dst[0] = make_int4(static_cast<int>(packed[0]), static_cast<int>(packed[1]), static_cast<int>(packed[2]),
                       static_cast<int>(packed[3]));
    dst[1] = make_int4(static_cast<int>(packed[4]), static_cast<int>(packed[5]), static_cast<int>(packed[6]),
                       static_cast<int>(packed[7]));
    out.ds[static_cast<int64_t>(m) * units + u] = make_float2(d, d * static_cast<float>(sum));
  }
}

// x . w over unit u of a weight row, the inputs from q8 row m of `rows` (shared memory).
__device__ __forceinline__ float unit_dot_smem(const Unit& w, const Q8Rows& rows, int m, int u) {
  const int4* xp = reinterpret_cast<const int4*>(rows.q + static_cast<int64_t>(m) * rows.K + 32 * u);
  return unit_dot_q8(w, xp[0], xp[1], rows.ds[static_cast<int64_t>(m) * (rows.K / 32) + u]);
}

template <class Q, GemmOut MODE>
__global__ __launch_bounds__(kThreads) void moe_gemv_quant_kernel(MoeMatmulParams a, int pass_rows) {
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_trigger();
  pdl_wait();
  GemvSegment seg;
  if (!gemv_segment(a, seg)) return;  // the same for the whole block
  constexpr int R = MODE == GemmOut::kSwiGlu ? 2 : 1;
  const int n_out = R == 2 ? a.N / 2 : a.N;
  const int lane = threadIdx.x & 31, units = a.K / 32;
  const uint8_t* w = static_cast<const uint8_t*>(a.w[seg.expert]);
  const Q8Rows xs(smem, pass_rows, a.K);
  const bf16* x = static_cast<const bf16*>(a.x);
  for (int r0 = seg.begin; r0 < seg.end; r0 += pass_rows) {
    const int mc = min(pass_rows, seg.end - r0);
    __syncthreads();  // the previous chunk's rows are read
    quantize_rows(x, a.ldx, mc, [&](int m) { return input_row(a, r0 + m); }, xs);
    __syncthreads();
    for (int n = blockIdx.x * kMoeGemvWarps + (threadIdx.x >> 5); n < n_out; n += gridDim.x * kMoeGemvWarps) {
      const uint8_t* rows[R];
#pragma unroll
      for (int r = 0; r < R; ++r) rows[r] = w + static_cast<int64_t>(n + r * n_out) * a.w_row_bytes;
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
#pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] += unit_dot_smem(wu[r], xs, m, u);
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
__global__ __launch_bounds__(kThreads) void moe_down_combine_quant_kernel(MoeMatmulParams a,
                                                                         const float* __restrict__ weights,
                                                                         float* __restrict__ residual) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int seg_expert[kMoeMaxTopK], seg_pos[kMoeMaxTopK];
  __shared__ float seg_weight[kMoeMaxTopK];
  pdl_trigger();
  pdl_wait();
  const int P = static_cast<int>(a.P);  // one token: the k pairs, one a segment
  const int nseg = *a.seg.count;
  if (threadIdx.x < nseg) {
    const int pos = a.seg.begin[threadIdx.x];
    seg_expert[threadIdx.x] = a.seg.expert[threadIdx.x];
    seg_pos[threadIdx.x] = pos;
    seg_weight[threadIdx.x] = weights[a.scatter[pos]];
  }
  const Q8Rows xs(smem, P, a.K);
  quantize_rows(static_cast<const bf16*>(a.x), a.ldx, P, [](int m) { return static_cast<int64_t>(m); }, xs);
  __syncthreads();
  const int n = blockIdx.x * kMoeGemvWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (n >= a.N) return;
  const int units = a.K / 32;
  float o = 0.0f;
#pragma unroll 4
  for (int j = lane; j < nseg * units; j += 32) {
    const int s = j / units, u = j - s * units;
    const uint8_t* row = static_cast<const uint8_t*>(a.w[seg_expert[s]]) + static_cast<int64_t>(n) * a.w_row_bytes;
    o += seg_weight[s] * unit_dot_smem(Q::decode(row, u, units), xs, seg_pos[s], u);
  }
  o = warp_sum(o);
  if (lane == 0) residual[n] += o;
}

// Dynamic shared memory above the 48 KiB default needs the kernel's opt-in (a host-side attribute).
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <class Q, GemmOut MODE>
void launch_gemv_mode(const MoeMatmulParams& p, dim3 grid, int pass_rows, cudaStream_t s) {
  const size_t smem = Q8Rows::bytes(pass_rows, p.K);
  allow_smem(moe_gemv_quant_kernel<Q, MODE>, smem);
  launch_pdl(moe_gemv_quant_kernel<Q, MODE>, grid, dim3(kThreads), smem, s, p, pass_rows);
}

template <class Q>
void launch_gemv(const MoeMatmulParams& p, unsigned max_segments, cudaStream_t s) {
  const int n_out = p.mode == GemmOut::kSwiGlu ? p.N / 2 : p.N;
  const dim3 grid(moe_gemv_blocks(n_out, 1, max_segments), max_segments);
  const int pass_rows = static_cast<int>(std::clamp<int64_t>(p.max_rows > 0 ? p.max_rows : kRows, 1, kRows));
  switch (p.mode) {
    case GemmOut::kSwiGlu: launch_gemv_mode<Q, GemmOut::kSwiGlu>(p, grid, pass_rows, s); break;
    case GemmOut::kStoreF32: launch_gemv_mode<Q, GemmOut::kStoreF32>(p, grid, pass_rows, s); break;
    case GemmOut::kStoreAct: launch_gemv_mode<Q, GemmOut::kStoreAct>(p, grid, pass_rows, s); break;
    default: PAGODA_CUDA_REQUIRE(false, "moe_matmul_quant: mode");
  }
}

void require_quant_shapes(const MoeMatmulParams& p, DType format) {
  PAGODA_CUDA_REQUIRE(quant_weight_supported(format), "quantized experts: no kernel for this weight format");
  PAGODA_CUDA_REQUIRE(p.P >= 1 && p.E >= 1 && p.E <= kMoeMaxExperts && p.N >= 1 && p.K >= 1, "quantized experts: shape");
  PAGODA_CUDA_REQUIRE(p.K % dtype_traits(format).block_size == 0 && p.K % 32 == 0, "quantized experts: K must be whole blocks");
  PAGODA_CUDA_REQUIRE(p.w_row_bytes == device_row_bytes(format, p.K), "quantized experts: w_row_bytes");
  PAGODA_CUDA_REQUIRE(p.ldx % 8 == 0 && aligned16(p.x), "quantized experts: 16-byte aligned bf16 input rows");
}

}  // namespace

void moe_matmul_quant(const MoeMatmulParams& p, DType format, bool gemv, cudaStream_t s) {
  require_quant_shapes(p, format);
  PAGODA_CUDA_REQUIRE(p.mode != GemmOut::kAddF32 && (gemv || p.mode != GemmOut::kSwiGlu),
                      "moe_matmul_quant: kSwiGlu (GEMV only), kStoreAct or kStoreF32");
  PAGODA_CUDA_REQUIRE(p.mode != GemmOut::kSwiGlu || p.N % 2 == 0, "moe_matmul_quant: SwiGLU needs [gate; up] rows");
  const unsigned max_segments = static_cast<unsigned>(std::min(p.E, p.P));
  if (gemv) {
    dispatch_format(format, [&](auto d) { launch_gemv<decltype(d)>(p, max_segments, s); });
  } else {
    const unsigned max_tiles = static_cast<unsigned>(moe_max_tiles(p.P, p.E));
    PAGODA_CUDA_REQUIRE(max_tiles <= 65535u, "moe_matmul_quant: too many pairs for one launch");
    MoeMatmulParams q = p;
    q.tensor_cores = true;
    launch_moe_gemm(q, DType::kBF16, format, max_tiles, s);
  }
  CUDA_CHECK_LAUNCH();
}

void moe_down_combine_quant(const MoeMatmulParams& p, DType format, const float* weights, float* residual,
                            cudaStream_t s) {
  require_quant_shapes(p, format);
  PAGODA_CUDA_REQUIRE(p.max_rows == 1 && p.P <= kMoeMaxTopK && p.scatter != nullptr && p.gather == nullptr,
                      "moe_down_combine_quant: one token (max_rows 1, P <= 16), the pairs' order as scatter");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.N, kMoeGemvWarps)));
  const size_t smem = Q8Rows::bytes(static_cast<int>(p.P), p.K);
  dispatch_format(format, [&](auto d) {
    using Q = decltype(d);
    allow_smem(moe_down_combine_quant_kernel<Q>, smem);
    launch_pdl(moe_down_combine_quant_kernel<Q>, grid, dim3(kThreads), smem, s, p, weights, residual);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
