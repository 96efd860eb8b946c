// What the grouped expert matmuls share (moe.cu's and moe_quant.cu's GEMVs, moe_gemm.cu's GEMMs):
// the input row of a sorted (token, slot) position and the store of an output, both through
// MoeMatmulParams (kernels.h); the GEMVs' grid; and the GEMM launcher moe_matmul and
// moe_matmul_quant call for steps past the GEMV's.
#pragma once

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {

// Input row (element offset) of sorted position `pos`.
__device__ __forceinline__ int64_t input_row(const MoeMatmulParams& a, int pos) {
  return a.gather != nullptr ? a.gather[pos] / a.gather_div : pos;
}

// y (f32 or T) at sorted position pos, column n.
template <class T, GemmOut MODE>
__device__ __forceinline__ void store_out(const MoeMatmulParams& a, int pos, int n, float v) {
  if constexpr (MODE == GemmOut::kStoreF32) {
    const int64_t row = a.scatter != nullptr ? a.scatter[pos] : pos;
    static_cast<float*>(a.y)[row * a.ldy + n] = v;
  } else {
    static_cast<T*>(a.y)[static_cast<int64_t>(pos) * a.ldy + n] = from_f32<T>(v);
  }
}

// Segment blockIdx.y of a grouped GEMV's grid (< min(E, P): the table's entries exist): its sorted
// positions [begin, end) and its expert, read in one round trip with the segment count; false
// for a segment past the count (the block has nothing to do).
struct GemvSegment {
  int begin, end, expert;
};
__device__ __forceinline__ bool gemv_segment(const MoeMatmulParams& a, GemvSegment& g) {
  const int s = blockIdx.y;
  const int nseg = *a.seg.count;
  g = {a.seg.begin[s], a.seg.begin[s + 1], a.seg.expert[s]};
  return s < nseg;
}

// Output rows a block of the grouped GEMVs takes (a warp each).
constexpr int kMoeGemvWarps = 8;
// Blocks a segment of a grouped GEMV: about 4 blocks an SM over the whole grid, at most one a
// kMoeGemvWarps x per_warp outputs (per_warp: the outputs a warp takes in one pass).
unsigned moe_gemv_blocks(int n_out, int per_warp, unsigned max_segments);

// The grouped GEMM (moe_gemm.cu) of MoeMatmulParams p: the bf16 tensor-core kernel where
// p.tensor_cores (its weights bf16, or in the block format wformat: moe_matmul_quant), else the
// SIMT kernel (f32 or bf16: `dtype`, wformat == dtype); kStoreF32 or kStoreAct;
// max_tiles = moe_max_tiles(P, E) block rows. The callers check the shapes first.
void launch_moe_gemm(const MoeMatmulParams& p, DType dtype, DType wformat, unsigned max_tiles, cudaStream_t s);

}  // namespace pagoda::cuda
