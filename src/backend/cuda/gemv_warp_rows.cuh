// The rows and outputs of one warp of the weight-format GEMVs (fp8_matmul.cu's gemv_fp8,
// quant_matmul.cu's gemv_quant): a warp computes R outputs n0 .. n0 + R - 1 of y [M, n_out]
// (R = ROWS: 2 for large weights, 1 otherwise), or for SwiGLU (R = 2) one output n0 from gate row
// n0 and up row n_out + n0 of the weight [2 n_out, K]. Shared so that both formats map warps to
// rows, and store, alike.
#pragma once

#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {

template <GemmOut MODE, int ROWS>
struct GemvWarpRows {
  static constexpr bool kSwiGlu = MODE == GemmOut::kSwiGlu;
  static constexpr int R = kSwiGlu ? 2 : ROWS;

  // The first output of warp `warp` (>= n_out: the warp has none).
  __device__ __forceinline__ static int first_output(int warp) { return kSwiGlu ? warp : R * warp; }

  // This thread's warp's first output n0 and weight rows (blocks of warps_per_block warps); false,
  // after pdl_wait(), when the warp has no output.
  __device__ __forceinline__ static bool warp_rows(int warps_per_block, int n_out, int& n0, int (&row_of)[R]) {
    n0 = first_output(static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x >> 5));
    if (n0 >= n_out) {
      pdl_wait();
      return false;
    }
    weight_rows(n0, n_out, row_of);
    return true;
  }

  // Weight row r of the warp whose first output is n0; past the end of an n_out that is not a
  // multiple of R, its first row again (read, not stored).
  __device__ __forceinline__ static void weight_rows(int n0, int n_out, int (&row_of)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) row_of[r] = kSwiGlu ? n0 + r * n_out : (n0 + r < n_out ? n0 + r : n0);
  }

  // The warp's reduced sums acc[m][r] into y (row stride ldy): f32 stored or added, or bf16
  // (kStoreAct); SwiGLU: swiglu_out(acc[m][0], acc[m][1]) as bf16. Outputs >= n_out are not
  // stored. One lane calls it.
  template <int M>
  __device__ __forceinline__ static void store(const float (&acc)[M][R], int n0, int n_out, void* y, int64_t ldy) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if constexpr (kSwiGlu) {
        static_cast<bf16*>(y)[m * ldy + n0] = swiglu_out(acc[m][0], acc[m][1]);
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int n = n0 + r;
          if (n >= n_out) break;
          if constexpr (MODE == GemmOut::kStoreF32) {
            static_cast<float*>(y)[m * ldy + n] = acc[m][r];
          } else if constexpr (MODE == GemmOut::kAddF32) {
            static_cast<float*>(y)[m * ldy + n] += acc[m][r];
          } else {
            static_cast<bf16*>(y)[m * ldy + n] = __float2bfloat16_rn(acc[m][r]);
          }
        }
      }
    }
  }
};

// Two rows a warp where that still leaves the GPU many warps (a large N) or each warp a long row
// (a large K); one row otherwise (q/k/v and o of an 8B model: N, K = 4096..6144).
inline bool gemv_row_pairs(int n_out, int K) { return n_out >= 8192 || K >= 8192; }

// The warps of a GEMV launch over n_out outputs, ROWS outputs a warp (SwiGLU: one).
inline int gemv_warps(int n_out, GemmOut mode, int rows) { return mode == GemmOut::kSwiGlu ? n_out : (n_out + rows - 1) / rows; }

// f(std::integral_constant<int, m>{}) for the GEMV kernels' rows a launch: m = M for M in 1..7,
// 8 beyond (the callers bound M by 8).
template <class F>
void with_gemv_m(int64_t M, F&& f) {
  switch (M) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// f(m, r, mode) with m = std::integral_constant<int, M'>, r = std::integral_constant<int, ROWS>,
// mode = std::integral_constant<GemmOut, MODE>: the kernel instantiation a weight-format GEMV
// launches for M rows (M' as with_gemv_m) in `mode` over n_out outputs of K inputs: two rows a warp
// for 1 or 2 rows of a large weight (gemv_row_pairs; not SwiGLU), one otherwise. Two-row kernels
// for batch 1 and 2 only: the instantiations cost compile time.
template <class F>
void with_gemv_kernel(int64_t M, GemmOut mode, int n_out, int K, F&& f) {
  with_gemv_m(M, [&](auto m) {
    auto with_rows = [&](auto r) {
      switch (mode) {
        case GemmOut::kStoreF32: f(m, r, std::integral_constant<GemmOut, GemmOut::kStoreF32>{}); break;
        case GemmOut::kAddF32: f(m, r, std::integral_constant<GemmOut, GemmOut::kAddF32>{}); break;
        case GemmOut::kStoreAct: f(m, r, std::integral_constant<GemmOut, GemmOut::kStoreAct>{}); break;
        case GemmOut::kSwiGlu:
          if constexpr (decltype(r)::value == 1) f(m, r, std::integral_constant<GemmOut, GemmOut::kSwiGlu>{});
          break;
      }
    };
    if constexpr (decltype(m)::value <= 2) {
      if (mode != GemmOut::kSwiGlu && gemv_row_pairs(n_out, K)) return with_rows(std::integral_constant<int, 2>{});
    }
    with_rows(std::integral_constant<int, 1>{});
  });
}

// 16 bf16 values (two 16-byte loads through the read-only path) as f32.
__device__ __forceinline__ void load_bf16x16(const bf16* p, float (&f)[16]) {
  const uint4 a = __ldg(reinterpret_cast<const uint4*>(p)), b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
  const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

}  // namespace pagoda::cuda
