// Row kernels around the matmuls: embedding gather (and its scale), the act-order column gather, RMSNorm (optionally over a
// gathered row subset: the final norm before the logits runs on the last token of each sequence
// only) and the post-norm added into the residual.
//
// One block per row. The residual stream is f32 on the GPU (more accurate than transformers'
// bf16 residual, and the reductions are cheap); the normalised row is written in the activation
// dtype the next matmul reads. Reductions use a fixed order (block_sum), so a row's result does
// not depend on the other rows.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gather_columns.h"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

template <class T>
__global__ void gather_columns_kernel(const T* __restrict__ x, const int32_t* __restrict__ order, int K,
                                      T* __restrict__ out) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const T* xr = x + r * K;
  T* o = out + r * K;
  for (int j = threadIdx.x; j < K; j += blockDim.x) o[j] = xr[order[j]];
}

// Token t's row ids[t] - id_begin of the table, or zeros when that is outside [0, rows) (a
// tensor-parallel rank's vocabulary slice; rows < 0: every id is in the table).
template <class T>
__global__ void embedding_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids, int D,
                                 float* __restrict__ out, int64_t id_begin, int64_t rows) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[t]) - id_begin;
  float* o = out + t * D;
  if (rows >= 0 && (id < 0 || id >= rows)) {
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = 0.0f;
    return;
  }
  const T* row = table + id * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = to_f32(row[i]);
}

// VEC4 (D % 4 == 0, 16-byte aligned: every real model): 16-byte loads, the row kept in registers
// between the reduction and the normalisation (block_rms_norm_row, as the GEMV's fused norm),
// 4-wide stores. Otherwise one value at a time, the row read twice.
template <class TOut, bool VEC4>
__global__ void rms_norm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int D,
                                const float* __restrict__ w, float eps, TOut* __restrict__ out) {
  __shared__ float scratch[33];
  pdl_trigger();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int64_t r = rows ? rows[i] : i;
  const float* xr = x + r * D;
  TOut* o = out + i * D;
  if constexpr (VEC4) {
    block_rms_norm_row<4>(reinterpret_cast<const float4*>(xr), reinterpret_cast<const float4*>(w), D / 4, eps, scratch,
                          [&](int j, const float4& y) { store4(o, int64_t{4} * j, y); });
  } else {
    float ss = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
      const float v = xr[j];
      ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = from_f32<TOut>(xr[j] * inv * w[j]);
  }
}

// rms_norm_kernel<bf16, true>'s rows (the same block_rms_norm_row, the same threads: the same bf16
// values), kept in shared memory, then quantized as quantize_activations_fp8 does: one f32 scale
// max|row| / 448 and e4m3(value / scale) codes, 4 a thread a store.
__global__ void rms_norm_fp8_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int D,
                                    const float* __restrict__ w, float eps, uint8_t* __restrict__ q,
                                    float* __restrict__ scale) {
  extern __shared__ uint2 row_bf16[];  // D / 4 entries of 4 bf16
  __shared__ float scratch[33];
  pdl_trigger();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int64_t r = rows ? rows[i] : i;
  float amax = 0.0f;
  block_rms_norm_row<4>(reinterpret_cast<const float4*>(x + r * D), reinterpret_cast<const float4*>(w), D / 4, eps,
                        scratch, [&](int j, const float4& y) {
                          uint2 u;
                          const __nv_bfloat162 a = __floats2bfloat162_rn(y.x, y.y), b = __floats2bfloat162_rn(y.z, y.w);
                          *reinterpret_cast<__nv_bfloat162*>(&u.x) = a;
                          *reinterpret_cast<__nv_bfloat162*>(&u.y) = b;
                          row_bf16[j] = u;
                          const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
                          amax = fmaxf(amax, fmaxf(fmaxf(fabsf(fa.x), fabsf(fa.y)), fmaxf(fabsf(fb.x), fabsf(fb.y))));
                        });
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  amax = warp_max(amax);
  __syncthreads();  // scratch: block_sum's last read; row_bf16: every thread's writes
  if (lane == 0) scratch[warp] = amax;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? scratch[lane] : 0.0f;
    t = warp_max(t);
    if (lane == 0) scratch[32] = t;
  }
  __syncthreads();
  const float s = scratch[32] / 448.0f;
  uint32_t* qr = reinterpret_cast<uint32_t*>(q + i * D);
  for (int j = threadIdx.x; j < D / 4; j += blockDim.x) {
    uint32_t codes = 0;
    if (s != 0.0f) {
      const uint2 u = row_bf16[j];
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
      const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a.x / s, a.y / s), __NV_SATFINITE, __NV_E4M3);
      const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(b.x / s, b.y / s), __NV_SATFINITE, __NV_E4M3);
      codes = lo | (hi << 16);
    }
    qr[j] = codes;
  }
  if (threadIdx.x == 0) scale[i] = s;
}

// The value the unfused path quantizes: rms_norm's output element as stored in TAct (bf16:
// rounded to nearest even, as store4 rounds; f32: as computed) and read back by quantize_q8_kernel.
template <class TAct>
__device__ __forceinline__ float act_value(float v) {
  if constexpr (std::is_same_v<TAct, bf16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return v;
}

// rms_norm_kernel<TAct, true>'s rows (the same block_rms_norm_row arithmetic and threads: the same
// values), quantized as quantize_activations_q8 does, straight from the registers: per 32 outputs
// d = max|v| / 127, q = round(v / d) (0 where d is 0), ds = (d, d * sum q). D % 32 == 0 and
// blockDim.x % 32 == 0, so thread t's float4 j (j % 32 == t % 32) and the 7 others of its 32-block
// (j / 8) are the 8 lanes of t's lane group 8 (t % 32 / 8) .. + 7, all calling put for the block or
// none of them: the block's max and sum are shuffles within the group. The norm weights of the
// first 4 float4 a thread are read before the wait (NormWeightPreload; the same values).
template <class TAct>
__global__ void rms_norm_q8_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int D,
                                   const float* __restrict__ w, float eps, int8_t* __restrict__ q,
                                   float2* __restrict__ ds) {
  __shared__ float scratch[33];
  pdl_trigger();
  const int d4 = D / 4;
  NormWeightPreload<4> weight;
  weight.load(reinterpret_cast<const float4*>(w), d4);
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int64_t r = rows ? rows[i] : i;
  const int lane = threadIdx.x & 31;
  const unsigned group = 0xFFu << (lane & 24);
  uint32_t* qr = reinterpret_cast<uint32_t*>(q + i * D);
  float2* dr = ds + i * (D / 32);
  block_rms_norm_row_with<4>(reinterpret_cast<const float4*>(x + r * D), d4, eps, scratch, weight,
                             [&](int j, const float4& y) {
                               const float v[4] = {act_value<TAct>(y.x), act_value<TAct>(y.y), act_value<TAct>(y.z),
                                                   act_value<TAct>(y.w)};
                               float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
                               for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(group, amax, o));
                               const float d = amax / 127.0f;
                               uint32_t codes = 0;
                               int sum = 0;
#pragma unroll
                               for (int k = 0; k < 4; ++k) {
                                 const int qi = amax > 0.0f ? __float2int_rn(v[k] / d) : 0;
                                 codes |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(qi))) << (8 * k);
                                 sum += qi;
                               }
#pragma unroll
                               for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(group, sum, o);
                               qr[j] = codes;
                               // sum: an exact integer (|sum| <= 32 * 127), as the unfused f32 warp sum of the codes.
                               if ((lane & 7) == 0) dr[j >> 3] = make_float2(d, d * static_cast<float>(sum));
                             });
}

// One block per row: residual[t] += rms_norm(x[t]) * w, the row read twice (Gemma's post-norms;
// the rows are short).
__global__ void rms_norm_add_kernel(const float* __restrict__ x, int D, const float* __restrict__ w, float eps,
                                    float* __restrict__ residual) {
  __shared__ float scratch[33];
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const float* xr = x + t * D;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) ss = fmaf(xr[j], xr[j], ss);
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  float* r = residual + t * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) r[j] += xr[j] * inv * w[j];
}

// Block (t, part): part 0 the q columns [0, nq) of row t, part 1 the k columns [nq, nq + nk),
// each normalised over its whole width in place (OLMoE's q/k norms); rows of stride ld. A thread
// writes only the elements it read.
__global__ void qk_rms_norm_kernel(float* __restrict__ x, int ld, int nq, int nk, const float* __restrict__ wq,
                                   const float* __restrict__ wk, float eps) {
  __shared__ float scratch[33];
  pdl_trigger();
  pdl_wait();
  const bool is_k = blockIdx.y == 1;
  float* xr = x + static_cast<int64_t>(blockIdx.x) * ld + (is_k ? nq : 0);
  const int n = is_k ? nk : nq;
  const float* w = is_k ? wk : wq;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) ss = fmaf(xr[j], xr[j], ss);
  ss = block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int j = threadIdx.x; j < n; j += blockDim.x) xr[j] = xr[j] * inv * w[j];
}

__global__ void scale_kernel(float* __restrict__ x, int64_t n, float scale) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= scale;
}

}  // namespace

void rms_norm_add(const float* x, int64_t n, int64_t D, const float* w, float eps, float* residual, cudaStream_t s) {
  if (n <= 0) return;
  const int threads = D >= 2048 ? 512 : (D >= 256 ? 256 : 64);
  launch_pdl(rms_norm_add_kernel, dim3(n), dim3(threads), 0, s, x, static_cast<int>(D), w, eps, residual);
  CUDA_CHECK_LAUNCH();
}

void qk_rms_norm(float* qkv, int64_t T, int64_t ld, int64_t nq, int64_t nk, const float* wq, const float* wk, float eps,
                 cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(nq + nk <= ld && wq != nullptr && wk != nullptr, "qk_rms_norm: q and k columns within the row");
  if (T <= 0) return;
  launch_pdl(qk_rms_norm_kernel, dim3(static_cast<unsigned>(T), 2), dim3(256), 0, s, qkv, static_cast<int>(ld),
             static_cast<int>(nq), static_cast<int>(nk), wq, wk, eps);
  CUDA_CHECK_LAUNCH();
}

void scale_f32(float* x, int64_t n, float scale, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>(ceil_div(n, 256), 65535);
  launch_pdl(scale_kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, s, x, n, scale);
  CUDA_CHECK_LAUNCH();
}

void gather_columns(const void* x, DType dtype, int64_t M, int64_t K, const int32_t* order, void* out, cudaStream_t s) {
  if (M <= 0) return;
  const int threads = K >= 1024 ? 256 : 128;
  if (dtype == DType::kF32) {
    launch_pdl(gather_columns_kernel<float>, dim3(M), dim3(threads), 0, s, static_cast<const float*>(x), order,
               static_cast<int>(K), static_cast<float*>(out));
  } else {
    PAGODA_CUDA_REQUIRE(dtype == DType::kBF16 || dtype == DType::kF16, "gather_columns: dtype must be f32, f16 or bf16");
    launch_pdl(gather_columns_kernel<uint16_t>, dim3(M), dim3(threads), 0, s, static_cast<const uint16_t*>(x), order,
               static_cast<int>(K), static_cast<uint16_t*>(out));
  }
  CUDA_CHECK_LAUNCH();
}

void embedding(const void* table, DType table_dtype, const int32_t* ids, int64_t T, int64_t D, float* out,
               cudaStream_t s, int64_t id_begin, int64_t rows) {
  if (T <= 0) return;
  const int threads = D >= 1024 ? 256 : 128;
  switch (table_dtype) {
    case DType::kF32:
      launch_pdl(embedding_kernel<float>, dim3(T), dim3(threads), 0, s, static_cast<const float*>(table), ids, static_cast<int>(D), out,
                 id_begin, rows);
      break;
    case DType::kBF16:
      launch_pdl(embedding_kernel<bf16>, dim3(T), dim3(threads), 0, s, static_cast<const bf16*>(table), ids, static_cast<int>(D), out,
                 id_begin, rows);
      break;
    case DType::kF16:
      launch_pdl(embedding_kernel<f16>, dim3(T), dim3(threads), 0, s, static_cast<const f16*>(table), ids, static_cast<int>(D), out,
                 id_begin, rows);
      break;
    default: PAGODA_CUDA_REQUIRE(false, "embedding: table dtype must be f32, f16 or bf16");
  }
  CUDA_CHECK_LAUNCH();
}

// Vectorised rms_norm: threads for about 4 float4 each (whole warps, 32..256).
static int rms_norm_vec4_threads(int64_t D) {
  return static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, ceil_div(ceil_div(D / 4, 4), 32) * 32)));
}

bool rms_norm_fp8(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, uint8_t* q,
                  float* scale, cudaStream_t s) {
  constexpr size_t kMaxSmem = 96 * 1024;  // opted into past the default 48 KiB (Hopper: up to 227 KiB a block)
  const size_t smem = static_cast<size_t>(D) * 2;
  if (D % 4 != 0 || !aligned16(x) || !aligned16(w) || !aligned16(q) || smem > kMaxSmem) return false;
  if (n <= 0) return true;
  if (smem > 47 * 1024) {  // the default 48 KiB a block also hold the static shared memory (a KiB of margin)
    static const bool opted = [] {
      CUDA_CHECK(cudaFuncSetAttribute(rms_norm_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kMaxSmem)));
      return true;
    }();
    (void)opted;
  }
  launch_pdl(rms_norm_fp8_kernel, dim3(static_cast<unsigned>(n)), dim3(rms_norm_vec4_threads(D)), smem, s, x, rows,
             static_cast<int>(D), w, eps, q, scale);
  CUDA_CHECK_LAUNCH();
  return true;
}

bool rms_norm_q8(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, DType act,
                 int8_t* q, float2* ds, cudaStream_t s) {
  if (D % 32 != 0 || !aligned16(x) || !aligned16(w) || !aligned16(q) || !aligned16(ds)) return false;
  if (act != DType::kBF16 && act != DType::kF32) return false;
  if (n <= 0) return true;
  const dim3 grid(static_cast<unsigned>(n)), block(rms_norm_vec4_threads(D));
  const int d = static_cast<int>(D);
  if (act == DType::kBF16) launch_pdl(rms_norm_q8_kernel<bf16>, grid, block, 0, s, x, rows, d, w, eps, q, ds);
  else launch_pdl(rms_norm_q8_kernel<float>, grid, block, 0, s, x, rows, d, w, eps, q, ds);
  CUDA_CHECK_LAUNCH();
  return true;
}

void rms_norm(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, void* out,
              DType out_dtype, cudaStream_t s) {
  if (n <= 0) return;
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "rms_norm: out dtype must be f32 or bf16");
  const bool vec4 = D % 4 == 0 && aligned16(x) && aligned16(w) && aligned16(out);
  const int threads = vec4 ? rms_norm_vec4_threads(D) : (D >= 2048 ? 512 : (D >= 256 ? 256 : 64));
  const int d = static_cast<int>(D);
  if (out_dtype == DType::kF32) {
    auto* o = static_cast<float*>(out);
    vec4 ? launch_pdl(rms_norm_kernel<float, true>, dim3(n), dim3(threads), 0, s, x, rows, d, w, eps, o)
         : launch_pdl(rms_norm_kernel<float, false>, dim3(n), dim3(threads), 0, s, x, rows, d, w, eps, o);
  } else {
    auto* o = static_cast<bf16*>(out);
    vec4 ? launch_pdl(rms_norm_kernel<bf16, true>, dim3(n), dim3(threads), 0, s, x, rows, d, w, eps, o)
         : launch_pdl(rms_norm_kernel<bf16, false>, dim3(n), dim3(threads), 0, s, x, rows, d, w, eps, o);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
