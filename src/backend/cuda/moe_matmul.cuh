// What the grouped expert matmuls share (moe.cu's GEMVs, moe_gemm.cu's GEMMs): the input row of
// a sorted (token, slot) position and the store of an output, both through MoeMatmulParams
// (kernels.h); and the GEMM launcher moe_matmul calls for steps past the GEMV's.
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

// The grouped GEMM (moe_gemm.cu) of MoeMatmulParams p: the bf16 tensor-core kernel where
// p.tensor_cores, else the SIMT kernel (f32 or bf16: `dtype`); kStoreF32 or kStoreAct;
// max_tiles = moe_max_tiles(P, E) block rows. moe_matmul checks the shapes first.
void launch_moe_gemm(const MoeMatmulParams& p, DType dtype, unsigned max_tiles, cudaStream_t s);

}  // namespace pagoda::cuda
