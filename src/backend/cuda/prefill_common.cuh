// What the two prefill attention kernels (attention_prefill.cu: mma.sync; attention_prefill_wgmma.cu:
// wgmma) share: the work of a block (PrefillBlock), the score tile's mask and soft-cap, the online-
// softmax step and the epilogue, all on accumulators in mma.sync's C-fragment layout (wgmma's is the
// same per warp).
#pragma once

#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"

namespace pagoda::cuda {

// The work of a block of a prefill kernel launched on the grid (query heads, items): up to kBM
// queries of one sequence and one query head, and where their keys are in the paged cache.
struct PrefillBlock {
  PrefillItem item;
  PrefillSeq sq;
  int h, kvh, num_kv_heads;
  int nq;         // the block's queries (rows past nq are padding)
  int first_pos;  // position of query 0
  int kv_end;     // keys [kv_begin, kv_end) can be visible to some row
  int window, kv_begin;
  int bs, bs_shift;
  bool bs_pow2;
  const int32_t* table;  // the sequence's block-table row

  __device__ __forceinline__ PrefillBlock(const PrefillAttentionParams& p, int kBM)
      : item(p.items[blockIdx.y]), sq(p.seqs[item.seq]) {
    h = blockIdx.x;
    num_kv_heads = static_cast<int>(p.cache.num_kv_heads);
    kvh = h / (static_cast<int>(p.num_heads) / num_kv_heads);
    nq = min(kBM, sq.num_queries - item.q0);
    first_pos = sq.context_len - sq.num_queries + item.q0;
    kv_end = first_pos + nq;
    window = static_cast<int>(p.window);
    kv_begin = window > 0 ? max(0, first_pos - window + 1) : 0;
    bs = static_cast<int>(p.cache.block_size);
    bs_pow2 = (bs & (bs - 1)) == 0;
    bs_shift = __ffs(bs) - 1;
    table = p.block_tables + static_cast<int64_t>(sq.bt_row) * p.bt_stride;
  }
  // Query row `row` of the block (head h), columns col .. col + 3 of its D, from the f32 rotated
  // queries, as four 16-bit values of the mma's type (tag); zeros past nq.
  template <class MT>
  __device__ __forceinline__ uint2 query4(const PrefillAttentionParams& p, int row, int col, int D, MT tag) const {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < nq)
      v = *reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(sq.query_begin + item.q0 + row) * p.q_stride +
                                           static_cast<int64_t>(h) * D + col);
    uint2 packed;
    packed.x = pack2(v.x, v.y, tag);
    packed.y = pack2(v.z, v.w, tag);
    return packed;
  }
  // The cache block holding `key` and the key's slot in it.
  __device__ __forceinline__ int block_of(int key) const { return bs_pow2 ? key >> bs_shift : key / bs; }
  __device__ __forceinline__ int slot_of(int key) const { return bs_pow2 ? key & (bs - 1) : key % bs; }
};

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
      if constexpr (CAP) v = softcap_log2_on(v * sl2, cap_l2);
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

// The prefill kernels' epilogue: a warp's O accumulators (DN n8 tiles in C-fragment layout, this
// thread's rows r0 and r0 + 8 of the tile, columns 8 dn + 2 t4, +1) divided by the rows' sums
// (lrow: this thread's partial sums, reduced over the quad here; an empty row stores zeros) and
// stored for the rows below nq: tile row r is output row first_row + r, head h's 8 DN columns,
// f32 or bf16 (out_dtype), rows out_stride elements apart.
template <int DN>
__device__ __forceinline__ void store_attention_rows(const float (&o)[DN][4], float (&lrow)[2], int r0, int nq,
                                                     int first_row, int h, int t4, void* out, DType out_dtype,
                                                     int64_t out_stride) {
  constexpr int D = DN * 8;
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 1);
    lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 2);
    inv[i] = lrow[i] > 0.0f ? 1.0f / lrow[i] : 0.0f;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r0 + half * 8;
    if (row >= nq) continue;
    const int64_t base = static_cast<int64_t>(first_row + row) * out_stride + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
      const int col = dn * 8 + t4 * 2;
      const float v0 = o[dn][half * 2] * inv[half], v1 = o[dn][half * 2 + 1] * inv[half];
      if (out_dtype == DType::kBF16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<bf16*>(out) + base + col) = __floats2bfloat162_rn(v0, v1);
      } else {
        *reinterpret_cast<float2*>(static_cast<float*>(out) + base + col) = make_float2(v0, v1);
      }
    }
  }
}

}  // namespace pagoda::cuda
