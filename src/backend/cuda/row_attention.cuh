// The outline both split-KV decode kernels share (attention_decode.cu: the SIMT kernel and
// row_attention()'s dispatch; attention_decode_mma.cu: the tensor-core kernel): the splits of a
// row, a block's share of the grid, padding rows, the warps' merge into a split's result and the
// last block's combine of a row's splits. Included by those two files only.
#pragma once

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda::row_attention_detail {

constexpr float kLog2e = 1.4426950408889634f;
// The tensor-core kernel's query heads per block (the n8 columns of its mma) and blocks resident an
// SM at D = 128 with a 16-bit cache (68 KiB of shared memory; 93 registers a thread with per-warp
// loading, 124 without); D = 64 and an FP8 cache (36 KiB, 122 registers: 4 blocks) fit more, the
// grid sizing uses this figure for all.
constexpr int kMmaHeads = 8;
constexpr int kMmaBlocksPerSm = 3;

// A block's share of the grid (row, KV head x head chunk, split): row r (token tok), its KV head,
// its query heads [h0, h0 + nh) (chunks of HPB heads of the GQA group), the row's visible keys
// [lo, ctx) in ns splits of `per` keys.
struct RowBlock {
  int r, kvh, h0, nh, ctx, lo, ns, per;
  int first;  // the first visible key (a window's start); lo: first rounded down to LO_ALIGN, [lo, first) masked
  int64_t tok;
};
// Fills b, reading only the step's inputs (so it may run before the kernel waits for its
// predecessor). False when the block has nothing to do: a padding row (context 0; block z = 0
// writes its zeros, row_pad_zeros) or a split index past the row's splits. LO_ALIGN / PER_ALIGN:
// the keys [lo, ctx) start at a multiple of LO_ALIGN (a window's first keys are then masked, see
// `first`) and the splits are multiples of PER_ALIGN keys (the tensor-core kernel: whole tiles,
// 16-key page chunks).
template <int HPB, int LO_ALIGN = 1, int PER_ALIGN = 1>
__device__ __forceinline__ bool row_block(const RowAttentionParams& p, int D, RowBlock& b) {
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  const int G = static_cast<int>(p.num_heads) / KVH;
  const int chunks = (G + HPB - 1) / HPB;
  b.r = blockIdx.x;
  b.kvh = blockIdx.y / chunks;
  const int hc = blockIdx.y - b.kvh * chunks;
  b.h0 = b.kvh * G + hc * HPB;
  b.nh = min(HPB, G - hc * HPB);
  b.ctx = p.row_ctx[b.r];
  b.first = p.window > 0 ? max(0, b.ctx - static_cast<int>(p.window)) : 0;
  b.lo = b.first - b.first % LO_ALIGN;
  const int keys = b.ctx - b.lo;
  b.ns = row_num_splits(keys, p.target_splits);
  b.tok = p.row_token[b.r];
  if (b.ns == 0) return false;
  b.per = (keys + b.ns - 1) / b.ns;
  if (PER_ALIGN > 1) {
    b.per = (b.per + PER_ALIGN - 1) / PER_ALIGN * PER_ALIGN;
    b.ns = (keys + b.per - 1) / b.per;
  }
  return static_cast<int>(blockIdx.z) < b.ns;
}

// A padding row's output is zeros (written by the blocks z = 0 of the row, after the wait).
__device__ __forceinline__ void row_pad_zeros(const RowAttentionParams& p, int D, const RowBlock& b) {
  if (b.ns == 0 && blockIdx.z == 0)
    for (int i = threadIdx.x; i < b.nh * D; i += blockDim.x)
      store_as(p.out, p.out_dtype, b.tok * p.out_stride + static_cast<int64_t>(b.h0) * D + i, 0.0f);
}

// The warps' partial results (m, l and unnormalised o per warp and head, in shared memory) merged
// in warp order into the split's result: the output itself when the row has one split, else the
// split's slot of the workspace.
template <int WARPS, int HPB>
__device__ __forceinline__ void store_split(const RowAttentionParams& p, const float* o_s, int o_ld, const float* ml_s,
                                            int r, int h0, int nh, int ns, int split, int64_t tok) {
  const int D = static_cast<int>(p.cache.head_dim);
  const int H = static_cast<int>(p.num_heads);
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, ml_s[(w * HPB + h) * 2]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const float mw = ml_s[(w * HPB + h) * 2];
        const float f = mw == -INFINITY ? 0.0f : exp2f(mw - M);
        L += ml_s[(w * HPB + h) * 2 + 1] * f;
        O += o_s[(w * HPB + h) * o_ld + d] * f;
      }
    }
    const float val = L > 0.0f ? O / L : 0.0f;
    if (ns == 1) {
      store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0 + h) * D + d, val);
    } else {
      const int64_t pi = (static_cast<int64_t>(r) * H + h0 + h) * kRowMaxSplits + split;
      p.part_o[pi * D + d] = val;
      if (d == 0) {
        p.part_ml[pi * 2] = M;
        p.part_ml[pi * 2 + 1] = L;
      }
    }
  }
}

// After a block's `done` splits of a row with ns > 1 splits: the block that completes the row's
// last split (an atomic count per row and head chunk) combines all of them in split order.
__device__ __forceinline__ void combine_splits(const RowAttentionParams& p, int r, int h0, int nh, int ns, int64_t tok,
                                               int done, int* last_block) {
  const int D = static_cast<int>(p.cache.head_dim);
  const int H = static_cast<int>(p.num_heads);
  __threadfence();
  __syncthreads();
  const int64_t counter = static_cast<int64_t>(r) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) *last_block = atomicAdd(&p.counters[counter], done) + done == ns;
  __syncthreads();
  if (!*last_block) return;
  __threadfence();
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t pbase = (static_cast<int64_t>(r) * H + h0 + h) * kRowMaxSplits;
    float M = -INFINITY;
    for (int s = 0; s < ns; ++s) M = fmaxf(M, __ldcg(p.part_ml + (pbase + s) * 2));
    float L = 0.0f, O = 0.0f;
    for (int s = 0; s < ns; ++s) {
      const float ms = __ldcg(p.part_ml + (pbase + s) * 2);
      const float w = ms == -INFINITY ? 0.0f : __ldcg(p.part_ml + (pbase + s) * 2 + 1) * exp2f(ms - M);
      L += w;
      O += w * __ldcg(p.part_o + (pbase + s) * D + d);
    }
    store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0 + h) * D + d, L > 0.0f ? O / L : 0.0f);
  }
  if (threadIdx.x == 0) p.counters[counter] = 0;  // ready for the next launch
}

// The tensor-core kernel (attention_decode_mma.cu) for a 16-bit cache, or an FP8 E4M3 one at block
// sizes a multiple of 16, at head_dim 64 / 128.
void launch_mma(const RowAttentionParams& p, dim3 grid, cudaStream_t s);

}  // namespace pagoda::cuda::row_attention_detail
