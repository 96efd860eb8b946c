// Matmuls over GGUF block-quantized weights read natively (kernels.h, "quant_matmul.cu").
//
// Every supported format is described by one decoder (quant_unit.cuh: a unit of 32 weights as int8
// codes with scales). From it:
//   - gemv_quant: y = x W^T for a few rows. The activations are quantized per 32 inputs to int8
//     (quantize_activations_q8: d = max|x| / 127, s = d * sum(q)), so that a unit's dot product is
//     eight dp4a: x.w = dx * (sa * S_first + sb * S_last) + mn * s. A warp takes one or two
//     rows (below), lane l takes units l, l + 32, ... (consecutive lanes, consecutive bytes), one
//     warp reduction at the end.
//   - dequantize_weight: rows of W as f32 / bf16 (w = s * q + mn, computed as the CPU's
//     quant::dequantize_row computes it), for the cuBLASLt and batch-invariant paths.
// Weights are in the device layout (quant_layout.h: planar rows, 16-byte aligned), so a unit's
// codes are one or two aligned 16-byte loads in every format. In the GEMV a warp computes two
// outputs at once for large weights (two rows; for SwiGLU always, the gate and the up row), so each
// activation load serves two weight rows.
// The activation quantization and the GEMV are launched with PDL (device_utils.cuh), the GEMV
// decoding its first weight unit before it waits for the activations.
#include <cuda_fp16.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemv_warp_rows.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/quant_unit.cuh"
#include "backend/cuda/swiglu.cuh"
#include "runtime/cuda_block_formats.h"

namespace pagoda::cuda {
namespace {

// ---- activations --------------------------------------------------------------------------

// One warp a 32-input block: q = round(x / d), d = max|x| / 127 (0 for an all-zero block).
template <class T>
__global__ void quantize_q8_kernel(const T* __restrict__ x, int64_t blocks, int8_t* __restrict__ q, float2* __restrict__ ds) {
  pdl_trigger();
  pdl_wait();
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (blk >= blocks) return;
  const float v = to_f32(x[blk * 32 + lane]);
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int qi = amax > 0.0f ? __float2int_rn(v / d) : 0;
  q[blk * 32 + lane] = static_cast<int8_t>(qi);
  const float sum = warp_sum(static_cast<float>(qi));
  if (lane == 0) ds[blk] = make_float2(d, d * sum);
}

// ---- GEMV --------------------------------------------------------------------------------

constexpr int kWarps = 8;

struct QGemvArgs {
  const int8_t* xq;  // [M, K]
  const float2* xds; // [M, K / 32]
  const uint8_t* w;  // rows of row_bytes bytes, in the device layout (quant_layout.h)
  int64_t row_bytes;
  int n_out, K;      // n_out: outputs (F for SwiGLU, whose up rows start at row F)
  void* y;
  int64_t ldy;
};

// A warp computes R outputs of rows n0 .. n0 + R - 1 (R = 2 for large weights, where the warps
// are many: each lane's activation loads of a unit then serve two rows), or for SwiGLU one output
// from gate row p and up row n_out + p. Lane l takes units l, l + 32, ... of its rows
// (consecutive lanes, consecutive bytes).
// Launched with PDL: the lane's first weight unit is decoded (plain loads: device_utils.cuh) before
// pdl_wait(), while the kernel that wrote the activations finishes; everything it wrote is read
// after the wait.
template <class D, int M, GemmOut MODE, int ROWS>
__global__ __launch_bounds__(kWarps * 32) void gemv_quant_kernel(QGemvArgs a) {
  using Rows = GemvWarpRows<MODE, ROWS>;
  constexpr int R = Rows::R;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  int n0, row_of[R];
  if (!Rows::warp_rows(kWarps, a.n_out, n0, row_of)) return;
  const int units = a.K / 32;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = a.w + static_cast<int64_t>(row_of[r]) * a.row_bytes;
  Unit first[R];
  if (lane < units) {
#pragma unroll
    for (int r = 0; r < R; ++r) first[r] = D::decode(rows[r], lane, units);
  }
  pdl_wait();
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  auto accumulate = [&](const Unit (&wu)[R], int u) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int4* xp = reinterpret_cast<const int4*>(a.xq + static_cast<int64_t>(m) * a.K + 32 * u);
      const int4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
      const float2 xd = __ldg(a.xds + static_cast<int64_t>(m) * units + u);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] += unit_dot_q8(wu[r], x0, x1, xd);
    }
  };
  if (lane < units) accumulate(first, lane);
#pragma unroll 4
  for (int u = lane + 32; u < units; u += 32) {
    Unit wu[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wu[r] = D::decode(rows[r], u, units);
    accumulate(wu, u);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if (lane != 0) return;
  Rows::store(acc, n0, a.n_out, a.y, a.ldy);
}

template <class D>
void launch_gemv(const QGemvArgs& a, int64_t M, GemmOut mode, cudaStream_t s) {
  with_gemv_kernel(M, mode, a.n_out, a.K, [&](auto m, auto r, auto md) {
    const dim3 grid(static_cast<unsigned>(ceil_div(gemv_warps(a.n_out, mode, r), kWarps)));
    launch_pdl(gemv_quant_kernel<D, decltype(m)::value, decltype(md)::value, decltype(r)::value>, grid,
               dim3(kWarps * 32), 0, s, a);
  });
}

// ---- tensor-core matmul over bf16 activations ---------------------------------------------
//
// gemm_quant_mma: y = x W^T for up to 64 rows of bf16 x. Each weight unit is dequantized in
// registers to the bf16 values dequantize_weight writes (w = s * q + mn in f32, rounded) and
// multiplied on tensor cores (m16n8k16, f32 accumulators), so no activation quantization runs
// and a row's result is the dequantized matmul's up to the summation order.
// A warp computes an 8-column tile (two for SwiGLU: gate columns n0.. and up columns F + n0..) for
// every m tile of 16 rows, over the rounds r = w, w + 8, ... of its block's K (a round: 4 units,
// 128 inputs); the 8 warps' partial sums are added in warp order through shared memory, so
// results do not depend on M or on the other rows.
// The k order inside a round is permuted, identically for x and W (a dot product does not depend
// on it): in mma step j (0..7) lane (g, t) holds, as its k slots {2t, 2t+1, 2t+8, 2t+9}, elements
// 4j .. 4j + 3 of unit 4r + t, so each lane decodes one whole unit a round (consecutive lanes,
// consecutive units of a row: 64-byte runs) and reads that unit's 32 inputs of rows g and g + 8.

constexpr int kMmaWarps = 8;

struct QMmaArgs {
  const bf16* x;     // [M, K]
  const uint8_t* w;  // rows of row_bytes bytes, in the device layout (quant_layout.h)
  int64_t row_bytes;
  int n_out, K, M;   // n_out: outputs (F for SwiGLU, whose up rows start at row F)
  void* y;
  int64_t ldy;
};


// MT m tiles (M <= 16 MT).
template <class D, int MT, GemmOut MODE>
__global__ __launch_bounds__(kMmaWarps * 32) void gemm_quant_mma_kernel(QMmaArgs a) {
  constexpr int NT = MODE == GemmOut::kSwiGlu ? 2 : 1;
  constexpr int kVals = MT * NT * 4;
  __shared__ float partial[kMmaWarps][kVals][32];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 8;
  const int units = a.K / 32, rounds = (units + 3) / 4;
  // Column n0 + g; past n_out, the last row again (read, not stored).
  const int col = min(n0 + g, a.n_out - 1);
  const uint8_t* rows[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) rows[nt] = a.w + static_cast<int64_t>(col + nt * a.n_out) * a.row_bytes;
  auto decode = [&](int r, Unit (&wu)[NT]) {
    const int u = 4 * r + t;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (u < units) {
        wu[nt] = D::decode(rows[nt], u, units);
      } else {  // past K: zero weights (the inputs there are zero too)
#pragma unroll
        for (int i = 0; i < 8; ++i) wu[nt].q[i] = 0;
        wu[nt].sa = wu[nt].sb = wu[nt].mn = 0.0f;
      }
    }
  };
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;
  Unit cur[NT];
  if (warp < rounds) decode(warp, cur);  // weights only: before the wait
  pdl_wait();
  for (int r = warp; r < rounds; r += kMmaWarps) {
    Unit next[NT];
    if (r + kMmaWarps < rounds) decode(r + kMmaWarps, next);
    const int u = 4 * r + t;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {  // inputs 8 jj .. 8 jj + 7 of unit u: mma steps 2 jj, 2 jj + 1
      uint4 xv[MT][2];                // rows 16 mt + g and 16 mt + g + 8
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * mt + g + 8 * h;
          xv[mt][h] = (m < a.M && u < units)
                          ? __ldg(reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(m) * a.K + 32 * u + 8 * jj))
                          : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * jj + half;
        uint32_t b[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) unit_quad_bf16(cur[nt], j, b[nt][0], b[nt][1]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint32_t af[4] = {half ? xv[mt][0].z : xv[mt][0].x, half ? xv[mt][1].z : xv[mt][1].x,
                                  half ? xv[mt][0].w : xv[mt][0].y, half ? xv[mt][1].w : xv[mt][1].y};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma16816(acc[mt][nt], af, b[nt][0], b[nt][1], bf16{});
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) cur[nt] = next[nt];
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) partial[warp][(mt * NT + nt) * 4 + c][lane] = acc[mt][nt][c];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      // C fragment: value c of lane (g, t) is row g (c < 2) or g + 8, column 2t + (c & 1).
      const int m = 16 * mt + g + (c >= 2 ? 8 : 0), n = n0 + 2 * t + (c & 1);
      float v[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        v[nt] = 0.0f;
#pragma unroll
        for (int w = 0; w < kMmaWarps; ++w) v[nt] += partial[w][(mt * NT + nt) * 4 + c][lane];
      }
      if (m >= a.M || n >= a.n_out) continue;
      const int64_t at = static_cast<int64_t>(m) * a.ldy + n;
      if constexpr (MODE == GemmOut::kSwiGlu) {
        static_cast<bf16*>(a.y)[at] = swiglu_out(v[0], v[1]);
      } else if constexpr (MODE == GemmOut::kStoreF32) {
        static_cast<float*>(a.y)[at] = v[0];
      } else if constexpr (MODE == GemmOut::kAddF32) {
        static_cast<float*>(a.y)[at] += v[0];
      } else {
        static_cast<bf16*>(a.y)[at] = __float2bfloat16_rn(v[0]);
      }
    }
}

template <class D, int MT>
void launch_mma_mt(const QMmaArgs& a, GemmOut mode, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(ceil_div(a.n_out, 8))), block(kMmaWarps * 32);
  switch (mode) {
    case GemmOut::kStoreF32: launch_pdl(gemm_quant_mma_kernel<D, MT, GemmOut::kStoreF32>, grid, block, 0, s, a); break;
    case GemmOut::kAddF32: launch_pdl(gemm_quant_mma_kernel<D, MT, GemmOut::kAddF32>, grid, block, 0, s, a); break;
    case GemmOut::kStoreAct: launch_pdl(gemm_quant_mma_kernel<D, MT, GemmOut::kStoreAct>, grid, block, 0, s, a); break;
    case GemmOut::kSwiGlu: launch_pdl(gemm_quant_mma_kernel<D, MT, GemmOut::kSwiGlu>, grid, block, 0, s, a); break;
  }
}

// One m tile up to 16 rows, four (rows 17 .. 64: the mma's zero rows cost no memory traffic).
template <class D>
void launch_mma(const QMmaArgs& a, GemmOut mode, cudaStream_t s) {
  if (a.M <= 16) launch_mma_mt<D, 1>(a, mode, s);
  else launch_mma_mt<D, 4>(a, mode, s);
}

// ---- dequantize -------------------------------------------------------------------------

// One thread a unit: 32 outputs, written as 16-byte stores (4 for bf16, 8 for f32).
template <class D, class T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t rows, int K, T* __restrict__ out) {
  const int units = K / 32;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * units) return;
  const int64_t row = idx / units;
  const int u = static_cast<int>(idx % units);
  const Unit x = D::decode(w + row * row_bytes, u, units);
  float v[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float s = i < 4 ? x.sa : x.sb;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int8_t q = static_cast<int8_t>((static_cast<uint32_t>(x.q[i]) >> (8 * e)) & 0xFF);
      v[4 * i + e] = s * static_cast<float>(q) + x.mn;
    }
  }
  T* o = out + row * K + 32 * u;
#pragma unroll
  for (int i = 0; i < 32; i += 4) store4(o, i, make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
}


}  // namespace

// One list (runtime/cuda_block_formats.h); a format on it without a decoder fails at its first
// launch ("no kernel for this weight format").
bool quant_weight_supported(DType format) { return cuda_block_format(format); }

void quantize_activations_q8(const void* x, DType x_dtype, int64_t M, int64_t K, int8_t* q, float2* ds, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(K % 32 == 0, "quantize_activations_q8: K must be a multiple of 32");
  const int64_t blocks = M * K / 32;
  if (blocks <= 0) return;
  const unsigned grid = static_cast<unsigned>(ceil_div(blocks * 32, 256));
  if (x_dtype == DType::kBF16) launch_pdl(quantize_q8_kernel<bf16>, grid, dim3(256), 0, s, static_cast<const bf16*>(x), blocks, q, ds);
  else if (x_dtype == DType::kF32) launch_pdl(quantize_q8_kernel<float>, grid, dim3(256), 0, s, static_cast<const float*>(x), blocks, q, ds);
  else PAGODA_CUDA_REQUIRE(false, "quantize_activations_q8: x must be bf16 or f32");
  CUDA_CHECK_LAUNCH();
}

void gemv_quant(const int8_t* xq, const float2* xds, const void* w, DType format, int64_t M, int64_t N, int64_t K,
                void* y, int64_t ldy, GemmOut mode, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(M >= 1 && M <= kQuantGemvMaxM, "gemv_quant: 1 <= M <= kQuantGemvMaxM");
  PAGODA_CUDA_REQUIRE(K % dtype_traits(format).block_size == 0 && K % 32 == 0, "gemv_quant: K must be whole blocks");
  PAGODA_CUDA_REQUIRE(mode != GemmOut::kSwiGlu || N % 2 == 0, "gemv_quant: SwiGLU needs [gate; up] rows");
  QGemvArgs a{};
  a.xq = xq;
  a.xds = xds;
  a.w = static_cast<const uint8_t*>(w);
  a.row_bytes = device_row_bytes(format, K);
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.y = y;
  a.ldy = ldy;
  const bool ok = dispatch_format(format, [&](auto d) { launch_gemv<decltype(d)>(a, M, mode, s); });
  PAGODA_CUDA_REQUIRE(ok, "gemv_quant: no kernel for this weight format");
  CUDA_CHECK_LAUNCH();
}

void gemm_quant_mma(const void* x, const void* w, DType format, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy,
                    GemmOut mode, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(M >= 1 && M <= kQuantMmaMaxM, "gemm_quant_mma: 1 <= M <= kQuantMmaMaxM");
  PAGODA_CUDA_REQUIRE(K % dtype_traits(format).block_size == 0 && K % 32 == 0, "gemm_quant_mma: K must be whole blocks");
  PAGODA_CUDA_REQUIRE(mode != GemmOut::kSwiGlu || N % 2 == 0, "gemm_quant_mma: SwiGLU needs [gate; up] rows");
  QMmaArgs a{};
  a.x = static_cast<const bf16*>(x);
  a.w = static_cast<const uint8_t*>(w);
  a.row_bytes = device_row_bytes(format, K);
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.M = static_cast<int>(M);
  a.y = y;
  a.ldy = ldy;
  if (a.n_out <= 0) return;
  const bool ok = dispatch_format(format, [&](auto d) { launch_mma<decltype(d)>(a, mode, s); });
  PAGODA_CUDA_REQUIRE(ok, "gemm_quant_mma: no kernel for this weight format");
  CUDA_CHECK_LAUNCH();
}

void dequantize_weight(const void* w, DType format, int64_t rows, int64_t K, void* out, DType out_dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(K % dtype_traits(format).block_size == 0 && K % 32 == 0, "dequantize_weight: K must be whole blocks");
  const int64_t units = rows * (K / 32);
  if (units <= 0) return;
  const unsigned grid = static_cast<unsigned>(ceil_div(units, 128));
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = device_row_bytes(format, K);
  const int k = static_cast<int>(K);
  const bool ok = dispatch_format(format, [&](auto d) {
    using D = decltype(d);
    if (out_dtype == DType::kBF16) dequantize_kernel<D, bf16><<<grid, 128, 0, s>>>(wb, rb, rows, k, static_cast<bf16*>(out));
    else dequantize_kernel<D, float><<<grid, 128, 0, s>>>(wb, rb, rows, k, static_cast<float*>(out));
  });
  PAGODA_CUDA_REQUIRE(ok, "dequantize_weight: no kernel for this weight format");
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kBF16 || out_dtype == DType::kF32, "dequantize_weight: out must be bf16 or f32");
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
