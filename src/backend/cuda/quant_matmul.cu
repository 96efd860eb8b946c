// Matmuls over GGUF block-quantized weights read natively (kernels.h, "quant_matmul.cu").
//
// Every supported format is described by one decoder: unit u of a weight row (its 32 elements
// 32u .. 32u + 31) as eight packed words of signed int8 codes q (elements 4i .. 4i + 3 in word i,
// in order) with w = sa * q + mn for the first 16 elements and sb * q + mn for the last 16 (sa ==
// sb except Q6_K, whose 16-element sub-blocks have their own scales). From it:
//   - gemv_quant: y = x W^T for a few rows. The activations are quantized per 32 inputs to int8
//     (quantize_activations_q8: d = max|x| / 127, s = d * sum(q)), so that a unit's dot product is
//     eight dp4a: x.w = dx * (sa * S_first + sb * S_last) + mn * s. One warp per output row (two
//     rows for the fused gate/up + SwiGLU), lane l takes units l, l + 32, ... (consecutive lanes,
//     consecutive bytes), one warp reduction at the end.
//   - dequantize_weight: rows of W as f32 / bf16 (w = s * q + mn, computed as the CPU's
//     quant::dequantize_row computes it), for the cuBLASLt and batch-invariant paths.
// Unaligned block layouts (Q4_0's 18 bytes, Q6_K's 210, ...) are read with 16-bit loads.
// The activation quantization and the GEMV are launched with PDL (device_utils.cuh), the GEMV
// decoding its first weight unit before it waits for the activations.
#include <cuda_fp16.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

struct Unit {
  int32_t q[8];       // signed int8 codes, 4 a word, element order
  float sa, sb, mn;   // w = (first 16 ? sa : sb) * q + mn
};

__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}
// A 32-bit word at a 2-byte-aligned address.
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
// Bits 0..3 of t to bit 0 of bytes 0..3 (no carries: the partial products do not overlap).
__device__ __forceinline__ uint32_t spread4(uint32_t t) { return (t * 0x00204081u) & 0x01010101u; }

template <DType F>
struct Format;

// x = d * (q - 8); q: nibbles, element j < 16 low of byte j, j >= 16 high of byte j - 16.
template <>
struct Format<DType::kQ4_0> {
  static constexpr int kBytes = 18;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + u * kBytes;
    Unit r;
    r.sa = r.sb = ld_half(b);
    r.mn = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = ld32_a2(b + 2 + 4 * i);
      r.q[i] = static_cast<int32_t>(__vsub4(v & 0x0F0F0F0Fu, 0x08080808u));
      r.q[4 + i] = static_cast<int32_t>(__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u));
    }
    return r;
  }
};
// x = d * q + m.
template <>
struct Format<DType::kQ4_1> {
  static constexpr int kBytes = 20;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + u * kBytes;
    Unit r;
    r.sa = r.sb = ld_half(b);
    r.mn = ld_half(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = ld32(b + 4 + 4 * i);
      r.q[i] = static_cast<int32_t>(v & 0x0F0F0F0Fu);
      r.q[4 + i] = static_cast<int32_t>((v >> 4) & 0x0F0F0F0Fu);
    }
    return r;
  }
};
// x = d * (q - 16); q = nibble (as Q4_0) | bit j of qh << 4.
template <>
struct Format<DType::kQ5_0> {
  static constexpr int kBytes = 22;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + u * kBytes;
    Unit r;
    r.sa = r.sb = ld_half(b);
    r.mn = 0.0f;
    const uint32_t qh = ld32_a2(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = ld32_a2(b + 6 + 4 * i);
      const uint32_t lo = (v & 0x0F0F0F0Fu) | (spread4((qh >> (4 * i)) & 0xF) << 4);
      const uint32_t hi = ((v >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * i)) & 0xF) << 4);
      r.q[i] = static_cast<int32_t>(__vsub4(lo, 0x10101010u));
      r.q[4 + i] = static_cast<int32_t>(__vsub4(hi, 0x10101010u));
    }
    return r;
  }
};
// x = d * q + m; q as Q5_0 (unsigned).
template <>
struct Format<DType::kQ5_1> {
  static constexpr int kBytes = 24;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + u * kBytes;
    Unit r;
    r.sa = r.sb = ld_half(b);
    r.mn = ld_half(b + 2);
    const uint32_t qh = ld32(b + 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = ld32(b + 8 + 4 * i);
      r.q[i] = static_cast<int32_t>((v & 0x0F0F0F0Fu) | (spread4((qh >> (4 * i)) & 0xF) << 4));
      r.q[4 + i] = static_cast<int32_t>(((v >> 4) & 0x0F0F0F0Fu) | (spread4((qh >> (16 + 4 * i)) & 0xF) << 4));
    }
    return r;
  }
};
// x = d * q, q int8.
template <>
struct Format<DType::kQ8_0> {
  static constexpr int kBytes = 34;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + u * kBytes;
    Unit r;
    r.sa = r.sb = ld_half(b);
    r.mn = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = static_cast<int32_t>(ld32_a2(b + 2 + 4 * i));
    return r;
  }
};

// Q4_K / Q5_K sub-block j's 6-bit scale and min (quant/blocks.h get_scale_min_k4) from the 12
// scale bytes as three words.
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* scales, float d, float dmin, float* s, float* mn) {
  const uint32_t w0 = ld32(scales), w1 = ld32(scales + 4), w2 = ld32(scales + 8);
  auto byte = [&](int i) -> uint32_t {
    const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
    return (w >> (8 * (i & 3))) & 0xFF;
  };
  uint32_t sc, m;
  if (j < 4) {
    sc = byte(j) & 63;
    m = byte(j + 4) & 63;
  } else {
    sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
  *s = d * static_cast<float>(sc);
  *mn = -(dmin * static_cast<float>(m));
}

// Unit u = sub-block j = u % 8 of super-block u / 8: x = d * sc[j] * q - dmin * m[j]; q the low
// (j even) or high nibble of qs[32 (j / 2) + l].
template <>
struct Format<DType::kQ4_K> {
  static constexpr int kBytes = 144;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int j = u & 7;
    Unit r;
    scale_min_k4(j, b + 4, ld_half(b), ld_half(b + 2), &r.sa, &r.mn);
    r.sb = r.sa;
    const uint8_t* qs = b + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = static_cast<int32_t>((ld32(qs + 4 * i) >> shift) & 0x0F0F0F0Fu);
    return r;
  }
};
// As Q4_K with bit j of qh[l] as the 5th bit of element l of sub-block j.
template <>
struct Format<DType::kQ5_K> {
  static constexpr int kBytes = 176;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int j = u & 7;
    Unit r;
    scale_min_k4(j, b + 4, ld_half(b), ld_half(b + 2), &r.sa, &r.mn);
    r.sb = r.sa;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      r.q[i] = static_cast<int32_t>(((ld32(qs + 4 * i) >> shift) & 0x0F0F0F0Fu) | (((ld32(qh + 4 * i) >> j) & 0x01010101u) << 4));
    return r;
  }
};
// Unit u: half h = (u % 8) / 4 of super-block u / 8, quarter c = u % 4: element 128h + 32c + l has
// the nibble c / 2 of ql[64h + 32 (c % 2) + l] and bits 2c, 2c + 1 of qh[32h + l] as its 6 bits,
// q - 32, scale scales[8h + 2c + l / 16] (quant/blocks.h BlockQ6_K).
template <>
struct Format<DType::kQ6_K> {
  static constexpr int kBytes = 210;
  __device__ static Unit decode(const uint8_t* row, int u) {
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int h = (u >> 2) & 1, c = u & 3;
    const uint8_t* ql = b + 64 * h + 32 * (c & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * c;
    const float d = ld_half(b + 208);
    Unit r;
    r.sa = d * static_cast<float>(sc[0]);
    r.sb = d * static_cast<float>(sc[1]);
    r.mn = 0.0f;
    const int ls = 4 * (c >> 1), hs = 2 * c;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t v = ((ld32_a2(ql + 4 * i) >> ls) & 0x0F0F0F0Fu) | (((ld32_a2(qh + 4 * i) >> hs) & 0x03030303u) << 4);
      r.q[i] = static_cast<int32_t>(__vsub4(v, 0x20202020u));
    }
    return r;
  }
};

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
  const uint8_t* w;  // rows of row_bytes bytes
  int64_t row_bytes;
  int n_out, K;      // n_out: outputs (F for SwiGLU, whose up rows start at row F)
  void* y;
  int64_t ldy;
};

// Launched with PDL: the lane's first weight unit is decoded (plain loads: device_utils.cuh) before
// pdl_wait(), while the kernel that wrote the activations finishes; everything it wrote is read
// after the wait.
template <DType FMT, int M, GemmOut MODE>
__global__ __launch_bounds__(kWarps * 32) void gemv_quant_kernel(QGemvArgs a) {
  constexpr int R = MODE == GemmOut::kSwiGlu ? 2 : 1;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= a.n_out) {
    pdl_wait();
    return;
  }
  const int units = a.K / 32;
  const uint8_t* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = a.w + static_cast<int64_t>(n + r * a.n_out) * a.row_bytes;
  Unit first[R];
  if (lane < units) {
#pragma unroll
    for (int r = 0; r < R; ++r) first[r] = Format<FMT>::decode(rows[r], lane);
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
      const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int r = 0; r < R; ++r) {
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s0 = __dp4a(wu[r].q[i], xs[i], s0);
          s1 = __dp4a(wu[r].q[4 + i], xs[4 + i], s1);
        }
        acc[m][r] += xd.x * (wu[r].sa * static_cast<float>(s0) + wu[r].sb * static_cast<float>(s1)) + wu[r].mn * xd.y;
      }
    }
  };
  if (lane < units) accumulate(first, lane);
#pragma unroll 2
  for (int u = lane + 32; u < units; u += 32) {
    Unit wu[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wu[r] = Format<FMT>::decode(rows[r], u);
    accumulate(wu, u);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if constexpr (MODE == GemmOut::kSwiGlu) {
      static_cast<bf16*>(a.y)[m * a.ldy + n] = swiglu_out(acc[m][0], acc[m][1]);
    } else if constexpr (MODE == GemmOut::kStoreF32) {
      static_cast<float*>(a.y)[m * a.ldy + n] = acc[m][0];
    } else if constexpr (MODE == GemmOut::kAddF32) {
      static_cast<float*>(a.y)[m * a.ldy + n] += acc[m][0];
    } else {
      static_cast<bf16*>(a.y)[m * a.ldy + n] = __float2bfloat16_rn(acc[m][0]);
    }
  }
}

template <DType FMT, int M>
void launch_gemv_m(const QGemvArgs& a, GemmOut mode, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(ceil_div(a.n_out, kWarps)));
  const dim3 block(kWarps * 32);
  switch (mode) {
    case GemmOut::kStoreF32: launch_pdl(gemv_quant_kernel<FMT, M, GemmOut::kStoreF32>, grid, block, 0, s, a); break;
    case GemmOut::kAddF32: launch_pdl(gemv_quant_kernel<FMT, M, GemmOut::kAddF32>, grid, block, 0, s, a); break;
    case GemmOut::kStoreAct: launch_pdl(gemv_quant_kernel<FMT, M, GemmOut::kStoreAct>, grid, block, 0, s, a); break;
    case GemmOut::kSwiGlu: launch_pdl(gemv_quant_kernel<FMT, M, GemmOut::kSwiGlu>, grid, block, 0, s, a); break;
  }
}

template <DType FMT>
void launch_gemv(const QGemvArgs& a, int64_t M, GemmOut mode, cudaStream_t s) {
  switch (M) {
    case 1: launch_gemv_m<FMT, 1>(a, mode, s); break;
    case 2: launch_gemv_m<FMT, 2>(a, mode, s); break;
    case 3: launch_gemv_m<FMT, 3>(a, mode, s); break;
    case 4: launch_gemv_m<FMT, 4>(a, mode, s); break;
    case 5: launch_gemv_m<FMT, 5>(a, mode, s); break;
    case 6: launch_gemv_m<FMT, 6>(a, mode, s); break;
    case 7: launch_gemv_m<FMT, 7>(a, mode, s); break;
    default: launch_gemv_m<FMT, 8>(a, mode, s); break;
  }
}

// ---- dequantize -------------------------------------------------------------------------

// One thread a unit: 32 outputs, written as 16-byte stores (4 for bf16, 8 for f32).
template <DType FMT, class T>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t rows, int K, T* __restrict__ out) {
  const int units = K / 32;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * units) return;
  const int64_t row = idx / units;
  const int u = static_cast<int>(idx % units);
  const Unit x = Format<FMT>::decode(w + row * row_bytes, u);
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

template <class Fn>
bool dispatch_format(DType f, Fn&& fn) {
  switch (f) {
    case DType::kQ4_0: fn(std::integral_constant<DType, DType::kQ4_0>{}); return true;
    case DType::kQ4_1: fn(std::integral_constant<DType, DType::kQ4_1>{}); return true;
    case DType::kQ5_0: fn(std::integral_constant<DType, DType::kQ5_0>{}); return true;
    case DType::kQ5_1: fn(std::integral_constant<DType, DType::kQ5_1>{}); return true;
    case DType::kQ8_0: fn(std::integral_constant<DType, DType::kQ8_0>{}); return true;
    case DType::kQ4_K: fn(std::integral_constant<DType, DType::kQ4_K>{}); return true;
    case DType::kQ5_K: fn(std::integral_constant<DType, DType::kQ5_K>{}); return true;
    case DType::kQ6_K: fn(std::integral_constant<DType, DType::kQ6_K>{}); return true;
    default: return false;
  }
}

}  // namespace

bool quant_weight_supported(DType format) {
  return dispatch_format(format, [](auto) {});
}

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
  a.row_bytes = row_bytes(format, K);
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.y = y;
  a.ldy = ldy;
  const bool ok = dispatch_format(format, [&](auto f) { launch_gemv<decltype(f)::value>(a, M, mode, s); });
  PAGODA_CUDA_REQUIRE(ok, "gemv_quant: no kernel for this weight format");
  CUDA_CHECK_LAUNCH();
}

void dequantize_weight(const void* w, DType format, int64_t rows, int64_t K, void* out, DType out_dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(K % dtype_traits(format).block_size == 0 && K % 32 == 0, "dequantize_weight: K must be whole blocks");
  const int64_t units = rows * (K / 32);
  if (units <= 0) return;
  const unsigned grid = static_cast<unsigned>(ceil_div(units, 128));
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t rb = row_bytes(format, K);
  const int k = static_cast<int>(K);
  const bool ok = dispatch_format(format, [&](auto f) {
    constexpr DType F = decltype(f)::value;
    if (out_dtype == DType::kBF16) dequantize_kernel<F, bf16><<<grid, 128, 0, s>>>(wb, rb, rows, k, static_cast<bf16*>(out));
    else dequantize_kernel<F, float><<<grid, 128, 0, s>>>(wb, rb, rows, k, static_cast<float*>(out));
  });
  PAGODA_CUDA_REQUIRE(ok, "dequantize_weight: no kernel for this weight format");
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kBF16 || out_dtype == DType::kF32, "dequantize_weight: out must be bf16 or f32");
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
