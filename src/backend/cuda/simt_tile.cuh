// The inner loop of the SIMT tile GEMMs (gemv.cu's gemm_simt, moe's grouped moe_gemm): 256 threads
// a 64 x 64 output tile, thread (tx, ty) = (tid % 16, tid / 16) owning the 4 x 4 outputs of rows
// ty * 4 + i and columns tx * 4 + j; each output one f32 FMA chain over k in order, so a result
// does not depend on the other rows of the launch (the batch-invariant mode), and both kernels
// give the same bits for the same row and weight.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace pagoda::cuda {

// acc[i][j] = fma(xs[k][ty * 4 + i], ws[k][tx * 4 + j], acc[i][j]) for k = 0 .. kn - 1 in order:
// one k slice of the tile in shared memory, xs the input rows' and ws the weight rows' values
// ([TK][LD] f32, k-major, LD >= 64).
template <int TK, int LD>
__device__ __forceinline__ void simt_tile_fma(const float (&xs)[TK][LD], const float (&ws)[TK][LD], int kn, int tx,
                                              int ty, float (&acc)[4][4]) {
  for (int k = 0; k < kn; ++k) {
    float a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = xs[k][ty * 4 + i];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = ws[k][tx * 4 + j];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// f(row, column, acc[i][j]) for each of the thread's outputs inside the matrix: row row0 + ty * 4 + i
// below row_end, column col0 + tx * 4 + j below col_end.
template <class F>
__device__ __forceinline__ void simt_tile_outputs(const float (&acc)[4][4], int tx, int ty, int row0, int row_end, int col0,
                                                  int col_end, F&& f) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty * 4 + i;
    if (r >= row_end) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx * 4 + j;
      if (c < col_end) f(r, c, acc[i][j]);
    }
  }
}

}  // namespace pagoda::cuda
