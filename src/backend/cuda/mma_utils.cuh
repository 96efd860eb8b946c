// Warp-level tensor-core and asynchronous-copy primitives (sm_80+ PTX) shared by the attention
// kernels: cp.async 16-byte copies with zero-fill, a 16-byte chunk of FP8 E4M3 to f16,
// ldmatrix (plain and transposed), the m16n8k16 bf16 / f16 mma with f32 accumulators, packing
// two floats into a 16-bit pair, and the score preparation and online-softmax step of the prefill
// kernels.
#pragma once

#include <cmath>

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// The attention kernels' cache element types: an FP8 E4M3 cache reaches the mma as f16 (exact),
// a 16-bit one as itself; a 16-byte chunk holds kChunkElems<KVT> elements.
template <class KVT>
inline constexpr bool kIsFp8 = std::is_same_v<KVT, f8>;
template <class KVT>
using mma_type_t = std::conditional_t<kIsFp8<KVT>, f16, KVT>;
template <class KVT>
inline constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KVT));

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two FP8 E4M3 values (the low 16 bits of w16, the lower byte first) as an f16 pair (exact: every
// E4M3 value is an f16 value).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t w16) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w16 & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16);
}
// 16 FP8 E4M3 values (one 16-byte chunk of shared memory) to 16 f16 values at dst (32 bytes,
// 16-byte aligned).
__device__ __forceinline__ void fp8x16_to_f16(const void* src, void* dst) {
  const uint4 q = *static_cast<const uint4*>(src);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  uint4 h[2];
  uint32_t* hw = reinterpret_cast<uint32_t*>(h);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    hw[2 * e] = e4m3x2_to_f16x2(w[e]);
    hw[2 * e + 1] = e4m3x2_to_f16x2(w[e] >> 16);
  }
  static_cast<uint4*>(dst)[0] = h[0];
  static_cast<uint4*>(dst)[1] = h[1];
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// d += a (16x16, row) * b (16x8, col); f32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bf16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, f16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> two 16-bit values in one register (first in the low half).
__device__ __forceinline__ uint32_t pack2(float a, float b, bf16) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, f16) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x in one MUFU.EX2 (ex2.approx.ftz: results below 2^-126 flush to zero, where exp2f adds a
// four-instruction fix-up an element for that range).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A warp's m16 x (8 NT) score tile in mma C-fragment layout (this thread: rows at positions
// pos_r[0] and pos_r[1], keys kbase + 8 n + 2 t4 + (e & 1)), made ready for online_softmax_tile:
// with MASK the causal / sliding-window mask (masked scores -inf); with CAP (Gemma 2's soft-cap,
// cap_l2 > 0: softcap_log2) the scores become log2 units (s x sl2, capped), without it they stay
// q.k and the softmax folds the scale sl2 (the attention scale times log2(e)) into its exponent.
// Returns that exponent scale (sl2, or 1 with CAP); mx: the maxima of the thread's two rows in the
// scores' units. Template choices: no per-element branch is left in the unrolled loop.
template <bool MASK, bool CAP, int NT>
__device__ __forceinline__ float prepare_scores(float (&s)[NT][4], float sl2, float cap_l2, int kbase, int t4,
                                                const int (&pos_r)[2], int window, float (&mx)[2]) {
  // Four partial maxima a row (n mod 2, e & 1): dependency chains a quarter as long.
  float m4[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) m4[i][0] = m4[i][1] = m4[i][2] = m4[i][3] = -INFINITY;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = s[n][e];
      if constexpr (CAP) v = cap_l2 * tanhf(v * sl2 / cap_l2);
      if constexpr (MASK) {
        const int key = kbase + n * 8 + t4 * 2 + (e & 1);
        const int pos = pos_r[e >> 1];
        const bool ok = key <= pos && (window <= 0 || key > pos - window);
        v = ok ? v : -INFINITY;
      }
      s[n][e] = v;
      float& m = m4[e >> 1][(n & 1) * 2 + (e & 1)];
      m = fmaxf(m, v);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) mx[i] = fmaxf(fmaxf(m4[i][0], m4[i][1]), fmaxf(m4[i][2], m4[i][3]));
  return CAP ? 1.0f : sl2;
}
// prepare_scores with the run-time choices (one uniform branch a tile).
template <int NT>
__device__ __forceinline__ float prepare_scores(bool mask, float (&s)[NT][4], float sl2, float cap_l2, int kbase,
                                                int t4, const int (&pos_r)[2], int window, float (&mx)[2]) {
  if (cap_l2 > 0.0f) {
    return mask ? prepare_scores<true, true>(s, sl2, cap_l2, kbase, t4, pos_r, window, mx)
                : prepare_scores<false, true>(s, sl2, cap_l2, kbase, t4, pos_r, window, mx);
  }
  return mask ? prepare_scores<true, false>(s, sl2, cap_l2, kbase, t4, pos_r, window, mx)
              : prepare_scores<false, false>(s, sl2, cap_l2, kbase, t4, pos_r, window, mx);
}

// One online-softmax step of a warp's m16 x (8 NT) score tile in mma C-fragment layout (this
// thread: rows g and g + 8 in s[n][0..1] and s[n][2..3]; masked scores -inf; k: the exponent
// scale prepare_scores returned, so p = 2^(s k - m k); mx: this thread's maxima of its two rows).
// Reduces the maxima over the quad, turns s into probabilities, updates the running maxima mrow
// (in the scores' units) and the thread's partial row sums lrow (summed over the quad at the end),
// and returns in alpha the factors the two rows' O accumulators take (rescale_rows).
template <int NT>
__device__ __forceinline__ void online_softmax_tile(float (&s)[NT][4], float k, float (&mx)[2], float (&mrow)[2],
                                                    float (&lrow)[2], float (&alpha)[2]) {
  float mu[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    const float mn = fmaxf(mrow[i], mx[i]);
    mu[i] = mn == -INFINITY ? 0.0f : mn * k;  // the row's maximum in log2 units
    alpha[i] = exp2_approx(mrow[i] * k - mu[i]);
    mrow[i] = mn;
  }
  float rs[2][4] = {};  // four partial sums a row, as prepare_scores' maxima
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2_approx(fmaf(s[n][e], k, -mu[e >> 1]));
      rs[e >> 1][(n & 1) * 2 + (e & 1)] += s[n][e];
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) lrow[i] = lrow[i] * alpha[i] + ((rs[i][0] + rs[i][1]) + (rs[i][2] + rs[i][3]));
}
// O accumulators (DN n8 tiles in C-fragment layout: rows g and g + 8) times the rows' factors.
template <int DN>
__device__ __forceinline__ void rescale_rows(float (&o)[DN][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dn = 0; dn < DN; ++dn) {
    o[dn][0] *= alpha[0];
    o[dn][1] *= alpha[0];
    o[dn][2] *= alpha[1];
    o[dn][3] *= alpha[1];
  }
}

}  // namespace pagoda::cuda
