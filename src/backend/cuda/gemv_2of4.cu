// 2:4 sparse bf16 weights in Pagoda's own layout (kernels.h "2:4 sparse weights"):
//   - pack_2of4: a dense row-major bf16 [N, K] weight into the layout (values of each group of 4
//     inputs' two kept weights, then their 2-bit positions), counting the groups with more than 2
//     nonzeros (the pattern check: 0 means the layout is exact);
//   - gemv_2of4: y = x W^T for a few rows of bf16 x. Each lane streams one 16-input chunk of its
//     rows at a time (a 16-byte load of 8 values and their 2-byte positions), picks the 8 matching
//     inputs out of the chunk's 16 and accumulates in f32; a warp reads 512 + 64 consecutive bytes
//     of a row an iteration. Rows a warp, SwiGLU and stores as the other weight-format GEMVs
//     (gemv_warp_rows.cuh). 9/16 of the bf16 bytes a step: the point of the layout at batch 1,
//     where the GEMV is bound by the weights' bytes.
// Both launched with PDL (device_utils.cuh); the GEMV reads its first chunk before it waits.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemv_warp_rows.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8;

struct Gemv2of4Args {
  const bf16* x;           // [M, K]
  const uint4* values;     // [N, K / 16] chunks of 8 bf16
  const uint16_t* pos;     // [N, K / 16] positions of a chunk's 4 groups
  int n_out, K;            // n_out: outputs (F for SwiGLU, whose up rows start at row F)
  void* y;
  int64_t ldy;
};

// x[base + i] for i in 0..3 without indexing registers dynamically.
__device__ __forceinline__ float pick4(const float (&x)[16], int base, uint32_t i) {
  const float a = x[base], b = x[base + 1], c = x[base + 2], d = x[base + 3];
  return i == 0 ? a : i == 1 ? b : i == 2 ? c : d;
}

template <int M, GemmOut MODE, int ROWS>
__global__ __launch_bounds__(kWarps * 32) void gemv_2of4_kernel(Gemv2of4Args a) {
  using Rows = GemvWarpRows<MODE, ROWS>;
  constexpr int R = Rows::R;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  int n0, row_of[R];
  if (!Rows::warp_rows(kWarps, a.n_out, n0, row_of)) return;
  const int chunks = a.K / 16;
  const uint4* vrows[R];
  const uint16_t* prows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    vrows[r] = a.values + static_cast<int64_t>(row_of[r]) * chunks;
    prows[r] = a.pos + static_cast<int64_t>(row_of[r]) * chunks;
  }
  uint4 first[R];
  uint32_t first_pos[R];
  if (lane < chunks) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      first[r] = load_stream<true>(vrows[r] + lane);
      first_pos[r] = prows[r][lane];
    }
  }
  pdl_wait();
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  auto accumulate = [&](const uint4 (&wv)[R], const uint32_t (&pv)[R], int c) {
    float wf[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t words[4] = {wv[r].x, wv[r].y, wv[r].z, wv[r].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wf[r][2 * i] = __uint_as_float(words[i] << 16);
        wf[r][2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xf[16];
      load_bf16x16(a.x + static_cast<int64_t>(m) * a.K + 16 * c, xf);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float s = 0.0f;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const uint32_t nib = (pv[r] >> (4 * g)) & 0xFu;
          s = fmaf(wf[r][2 * g], pick4(xf, 4 * g, nib & 3u), s);
          s = fmaf(wf[r][2 * g + 1], pick4(xf, 4 * g, nib >> 2), s);
        }
        acc[m][r] += s;
      }
    }
  };
  if (lane < chunks) accumulate(first, first_pos, lane);
#pragma unroll 2
  for (int c = lane + 32; c < chunks; c += 32) {
    uint4 wv[R];
    uint32_t pv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      wv[r] = load_stream<false>(vrows[r] + c);
      pv[r] = __ldg(prows[r] + c);
    }
    accumulate(wv, pv, c);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
  if (lane != 0) return;
  Rows::store(acc, n0, a.n_out, a.y, a.ldy);
}

// One thread a 16-input chunk: its 4 groups' nonzeros (at most 2 kept, in input order; fewer
// padded with zero weights at free positions), a group with more counted in *violations.
__global__ void pack_2of4_kernel(const uint16_t* __restrict__ dense, int64_t chunks_total, uint4* __restrict__ values,
                                 uint16_t* __restrict__ pos, int* __restrict__ violations) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks_total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 a = reinterpret_cast<const uint4*>(dense)[2 * c], b = reinterpret_cast<const uint4*>(dense)[2 * c + 1];
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint16_t v[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[2 * i] = static_cast<uint16_t>(words[i] & 0xFFFFu);
      v[2 * i + 1] = static_cast<uint16_t>(words[i] >> 16);
    }
    uint32_t kept[4];  // two bf16 a group, low half first
    uint32_t p = 0;
    int bad = 0;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      int idx[2] = {-1, -1}, n = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if ((v[4 * g + i] & 0x7FFFu) == 0) continue;  // +0 and -0
        if (n < 2) idx[n] = i;
        ++n;
      }
      bad += n > 2;
      // Fewer than two nonzeros: the free positions, lowest first, carry zero weights.
      for (int i = 0; n < 2 && i < 4; ++i)
        if (i != idx[0]) idx[n++] = i;
      const int i0 = min(idx[0], idx[1]), i1 = max(idx[0], idx[1]);
      kept[g] = static_cast<uint32_t>(v[4 * g + i0]) | (static_cast<uint32_t>(v[4 * g + i1]) << 16);
      p |= static_cast<uint32_t>(i0 | (i1 << 2)) << (4 * g);
    }
    values[c] = make_uint4(kept[0], kept[1], kept[2], kept[3]);
    pos[c] = static_cast<uint16_t>(p);
    if (bad > 0) atomicAdd(violations, bad);
  }
}

}  // namespace

void pack_2of4(const void* dense, int64_t N, int64_t K, void* out, int* violations, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(K % 16 == 0, "pack_2of4: K must be a multiple of 16");
  const int64_t chunks = N * K / 16;
  if (chunks == 0) return;
  auto* values = static_cast<uint4*>(out);
  auto* pos = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(out) + N * K);
  const int grid = static_cast<int>(std::min<int64_t>(ceil_div(chunks, int64_t{256}), 65535));
  pack_2of4_kernel<<<grid, 256, 0, s>>>(static_cast<const uint16_t*>(dense), chunks, values, pos, violations);
  CUDA_CHECK_LAUNCH();
}

void gemv_2of4(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
               cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(M >= 1 && M <= kGemv2of4MaxM, "gemv_2of4: 1 <= M <= kGemv2of4MaxM");
  PAGODA_CUDA_REQUIRE(K % 16 == 0, "gemv_2of4: K must be a multiple of 16");
  PAGODA_CUDA_REQUIRE(mode != GemmOut::kSwiGlu || N % 2 == 0, "gemv_2of4: SwiGLU needs gate and up rows");
  Gemv2of4Args a;
  a.x = static_cast<const bf16*>(x);
  a.values = static_cast<const uint4*>(w);
  a.pos = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w) + N * K);
  a.n_out = static_cast<int>(mode == GemmOut::kSwiGlu ? N / 2 : N);
  a.K = static_cast<int>(K);
  a.y = y;
  a.ldy = ldy;
  with_gemv_kernel(M, mode, a.n_out, a.K, [&](auto m, auto r, auto md) {
    const dim3 grid(static_cast<unsigned>(ceil_div(gemv_warps(a.n_out, mode, r), kWarps)));
    launch_pdl(gemv_2of4_kernel<decltype(m)::value, decltype(md)::value, decltype(r)::value>, grid, dim3(kWarps * 32), 0,
               s, a);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
