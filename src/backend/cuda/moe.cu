// Mixture-of-experts kernels (kernels.h, "moe.cu"): routing, the sort of (token, slot) pairs by
// expert, the grouped expert matmuls and the weighted combine into the residual stream. Every
// count that depends on the routing (pairs per expert, active experts, tiles) stays in device
// memory: grids are sized from host-known bounds (T, k, E) and blocks past the device-side counts
// exit, so the whole MoE layer is one fixed launch sequence, capturable in a CUDA graph, with no
// host synchronisation.
//
// Launched without programmatic dependent launch: each kernel starts once its predecessor has
// completed, and the PDL kernels after them wait for their completion (device_utils.cuh).
#include <algorithm>
#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kRouteWarps = 4;                    // tokens a block of moe_route
constexpr int kRouteSlots = kMoeMaxExperts / 32;  // experts a lane holds
constexpr int kSortThreads = 256;
constexpr int kGemvWarps = 8;    // output rows a block of the grouped GEMV
constexpr int kGemvRows = 4;     // token rows a pass over an expert's weight row serves
constexpr int kGemvUnroll = 4;   // 16-byte weight loads in flight per lane and weight row
constexpr int kTk = 16;          // k slice of the grouped SIMT GEMM

// ---- routing ----

// One warp a token: softmax over the E router logits, the k largest probabilities (ties: the
// lower expert), optionally renormalised to sum 1 (ops/moe.h's moe_route).
__global__ __launch_bounds__(kRouteWarps * 32) void moe_route_kernel(const float* __restrict__ logits, int T, int E,
                                                                     int k, bool normalize, int32_t* __restrict__ ids,
                                                                     float* __restrict__ weights) {
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (t >= T) return;
  const float* l = logits + static_cast<int64_t>(t) * E;
  float p[kRouteSlots];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? l[e] : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? expf(p[i] - mx) : 0.0f;
    sum += p[i];
  }
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  // Selection keys: the probability (NaN as -1, below every probability), -2 once taken, -3 for
  // slots past E. At least one slot of key >= -1 remains while j < k <= E, so the winner is valid.
  float key[kRouteSlots];
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    p[i] *= inv;
    key[i] = lane + 32 * i < E ? (p[i] == p[i] ? p[i] : -1.0f) : -3.0f;
  }
  int32_t* id = ids + static_cast<int64_t>(t) * k;
  float* w = weights + static_cast<int64_t>(t) * k;
  float kept = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bv = -4.0f;
    int be = INT_MAX;
#pragma unroll
    for (int i = 0; i < kRouteSlots; ++i)
      if (key[i] > bv) {  // ascending experts within a lane: a tie keeps the lower one
        bv = key[i];
        be = lane + 32 * i;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (ov > bv || (ov == bv && oe < be)) {
        bv = ov;
        be = oe;
      }
    }
    float mine = 0.0f;
#pragma unroll
    for (int i = 0; i < kRouteSlots; ++i)
      if (lane + 32 * i == be) {
        mine = p[i];
        key[i] = -2.0f;
      }
    const float pw = __shfl_sync(0xffffffffu, mine, be & 31);
    kept += pw;
    if (lane == 0) {
      id[j] = be;
      w[j] = pw;
    }
  }
  if (normalize && lane == 0)
    for (int j = 0; j < k; ++j) w[j] /= kept;
}

// ---- the sort of pairs by expert ----

// Block e: the histogram of all P pairs' experts, from it expert e's first sorted position, its
// index among the active experts and its first SIMT tile; then a stable compaction of the pairs
// routed to e (ascending pair index) into order[begin, begin + count). The last block writes the
// totals (segment count, P, tile count).
__global__ __launch_bounds__(kSortThreads) void moe_sort_kernel(const int32_t* __restrict__ ids, int P, int E,
                                                                int32_t* __restrict__ order, MoeSegments seg) {
  __shared__ int hist[kMoeMaxExperts];
  __shared__ int warp_total[kSortThreads / 32];
  __shared__ int info[3];
  const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < E; i += kSortThreads) hist[i] = 0;
  __syncthreads();
  for (int p = tid; p < P; p += kSortThreads) atomicAdd(&hist[ids[p]], 1);
  __syncthreads();
  if (tid == 0) {
    int begin = 0, s = 0, tile = 0;
    for (int x = 0; x < e; ++x) {
      const int c = hist[x];
      begin += c;
      s += c > 0;
      tile += (c + kMoeTile - 1) / kMoeTile;
    }
    info[0] = begin;
    info[1] = s;
    info[2] = tile;
    if (e == E - 1) {
      const int c = hist[e];
      const int ns = s + (c > 0);
      *seg.count = ns;
      seg.begin[ns] = P;
      seg.tile[ns] = tile + (c + kMoeTile - 1) / kMoeTile;
    }
    if (hist[e] > 0) {
      seg.expert[s] = e;
      seg.begin[s] = begin;
      seg.tile[s] = tile;
    }
  }
  __syncthreads();
  if (hist[e] == 0) return;
  const int begin = info[0];
  int running = 0;
  for (int base = 0; base < P; base += kSortThreads) {
    const int p = base + tid;
    const bool mine = p < P && ids[p] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int off = running, total = 0;
#pragma unroll
    for (int w = 0; w < kSortThreads / 32; ++w) {
      off += w < warp ? warp_total[w] : 0;
      total += warp_total[w];
    }
    if (mine) order[begin + off + __popc(ballot & ((1u << lane) - 1u))] = p;
    running += total;
    __syncthreads();
  }
}

// ---- grouped matmuls ----

// acc += dot of 16 bytes of weights and 16 bytes of inputs (8 bf16 or 4 f32), in element order.
template <class T>
__device__ __forceinline__ float dot16(const uint4& w, const uint4& x, float acc) {
  if constexpr (std::is_same_v<T, float>) {
    const float* a = reinterpret_cast<const float*>(&w);
    const float* b = reinterpret_cast<const float*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i) acc = fmaf(a[i], b[i], acc);
  } else {
    const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
    const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
      acc = fmaf(fa.x, fb.x, acc);
      acc = fmaf(fa.y, fb.y, acc);
    }
  }
  return acc;
}

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

// Block (x, s): kGemvWarps output rows of active segment s; a warp reads its weight row(s) once per
// kGemvRows of the segment's token rows. kSwiGlu: rows n (gate) and N/2 + n (up), y = silu(g) * u
// rounded as the dense path rounds it (swiglu.cuh).
template <class T, GemmOut MODE>
__global__ __launch_bounds__(kGemvWarps * 32) void moe_gemv_kernel(MoeMatmulParams a) {
  const int s = blockIdx.y;
  if (s >= *a.seg.count) return;
  constexpr int R = MODE == GemmOut::kSwiGlu ? 2 : 1;
  const int n_out = MODE == GemmOut::kSwiGlu ? a.N / 2 : a.N;
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (n >= n_out) return;
  const int begin = a.seg.begin[s], end = a.seg.begin[s + 1];
  const T* w = static_cast<const T*>(a.w[a.seg.expert[s]]);
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n + r * n_out) * a.K);
  const int kc = a.K / (16 / static_cast<int>(sizeof(T)));
  const T* x = static_cast<const T*>(a.x);
  for (int r0 = begin; r0 < end; r0 += kGemvRows) {
    const int mc = min(kGemvRows, end - r0);
    const uint4* xr[kGemvRows];
#pragma unroll
    for (int m = 0; m < kGemvRows; ++m)
      xr[m] = reinterpret_cast<const uint4*>(x + input_row(a, r0 + min(m, mc - 1)) * a.ldx);
    float acc[kGemvRows][R];
#pragma unroll
    for (int m = 0; m < kGemvRows; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    for (int c0 = lane; c0 < kc; c0 += 32 * kGemvUnroll) {
      uint4 wv[kGemvUnroll][R];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r)
          wv[u][r] = c0 + 32 * u < kc ? load_stream<false>(wr[r] + c0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int c = c0 + 32 * u;
        if (c >= kc) break;
#pragma unroll
        for (int m = 0; m < kGemvRows; ++m) {
          if (m >= mc) break;
          const uint4 xv = __ldg(xr[m] + c);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[m][r] = dot16<T>(wv[u][r], xv, acc[m][r]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kGemvRows; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < kGemvRows; ++m) {
        if (m >= mc) break;
        if constexpr (MODE == GemmOut::kSwiGlu) {
          T* y = static_cast<T*>(a.y) + static_cast<int64_t>(r0 + m) * a.ldy + n;
          if constexpr (std::is_same_v<T, float>) *y = silu_mul(acc[m][0], acc[m][1]);
          else *y = swiglu_out(acc[m][0], acc[m][1]);
        } else {
          store_out<T, MODE>(a, r0 + m, n, acc[m][0]);
        }
      }
    }
  }
}

// Block (x, tile): a kMoeTile x kMoeTile output tile of one segment (the segment whose tiles
// [seg.tile[s], seg.tile[s + 1]) hold blockIdx.y), 4 x 4 outputs a thread, every output one f32
// FMA chain over k in order (gemv.cu's gemm_simt: the same result whatever the other rows are).
template <class T, GemmOut MODE>
__global__ __launch_bounds__(256) void moe_gemm_kernel(MoeMatmulParams a) {
  __shared__ float xs[kTk][kMoeTile + 4];
  __shared__ float ws[kTk][kMoeTile + 4];
  __shared__ int info[3];
  const int tile = blockIdx.y, tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int nseg = *a.seg.count;
  if (tile >= a.seg.tile[nseg]) return;  // the same for the whole block
  if (tid == 0) {
    int s = 0;
    while (a.seg.tile[s + 1] <= tile) ++s;
    const int m0 = a.seg.begin[s] + (tile - a.seg.tile[s]) * kMoeTile;
    info[0] = m0;
    info[1] = min(m0 + kMoeTile, a.seg.begin[s + 1]);
    info[2] = a.seg.expert[s];
  }
  __syncthreads();
  const int m0 = info[0], m_end = info[1];
  const int n0 = blockIdx.x * kMoeTile, N = a.N, K = a.K;
  const T* w = static_cast<const T*>(a.w[info[2]]);
  const T* x = static_cast<const T*>(a.x);
  // The rows this thread loads: r = tid / kTk + 16 i (i < 4) at k offset tid % kTk.
  const int lr = tid / kTk, lk = tid % kTk;
  const T* xrow[4];
  const T* wrow[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = lr + 16 * i;
    xrow[i] = m0 + r < m_end ? x + input_row(a, m0 + r) * a.ldx : nullptr;
    wrow[i] = n0 + r < N ? w + static_cast<int64_t>(n0 + r) * K : nullptr;
  }
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTk) {
    const bool kin = k0 + lk < K;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = lr + 16 * i;
      xs[lk][r] = xrow[i] != nullptr && kin ? to_f32(xrow[i][k0 + lk]) : 0.0f;
      ws[lk][r] = wrow[i] != nullptr && kin ? to_f32(wrow[i][k0 + lk]) : 0.0f;
    }
    __syncthreads();
    const int kn = min(kTk, K - k0);
    for (int k = 0; k < kn; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = xs[k][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = ws[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pos = m0 + ty * 4 + i;
    if (pos >= m_end) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n < N) store_out<T, MODE>(a, pos, n, acc[i][j]);
    }
  }
}

// ---- combine ----

// Block t: residual[t] += sigmoid(hidden[t] . shared_gate) * shared_out[t] (optional) + the
// token's k expert outputs weighted, added in ascending expert order (ops/moe.h's order).
template <class T>
__global__ __launch_bounds__(256) void moe_combine_kernel(MoeCombineParams a) {
  __shared__ float scratch[33];
  const int t = blockIdx.x, k = a.top_k, D = a.D;
  int slot[kMoeMaxTopK];
  for (int j = 0; j < k; ++j) {  // insertion sort of the slots by expert
    const int e = a.ids[static_cast<int64_t>(t) * k + j];
    int i = j;
    for (; i > 0 && a.ids[static_cast<int64_t>(t) * k + slot[i - 1]] > e; --i) slot[i] = slot[i - 1];
    slot[i] = j;
  }
  float sg = 0.0f;
  if (a.shared_out != nullptr && a.shared_gate_logits != nullptr) {
    sg = 1.0f / (1.0f + expf(-a.shared_gate_logits[t]));
  } else if (a.shared_out != nullptr) {
    const T* h = static_cast<const T*>(a.hidden) + static_cast<int64_t>(t) * D;
    const T* g = static_cast<const T*>(a.shared_gate);
    float dot = 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) dot = fmaf(to_f32(h[d]), to_f32(g[d]), dot);
    dot = block_sum(dot, scratch);
    sg = 1.0f / (1.0f + expf(-dot));
  }
  float* res = a.residual + static_cast<int64_t>(t) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = a.shared_out != nullptr ? a.shared_out[static_cast<int64_t>(t) * D + d] * sg : 0.0f;
    for (int jj = 0; jj < k; ++jj) {
      const int64_t pair = static_cast<int64_t>(t) * k + slot[jj];
      o += a.weights[pair] * a.expert_out[pair * D + d];
    }
    res[d] += o;
  }
}

template <class T>
void launch_matmul(const MoeMatmulParams& p, bool gemv, unsigned max_segments, unsigned max_tiles, cudaStream_t s) {
  if (gemv) {
    const int n_out = p.mode == GemmOut::kSwiGlu ? p.N / 2 : p.N;
    const dim3 grid(static_cast<unsigned>(ceil_div(n_out, kGemvWarps)), max_segments);
    switch (p.mode) {
      case GemmOut::kSwiGlu: moe_gemv_kernel<T, GemmOut::kSwiGlu><<<grid, kGemvWarps * 32, 0, s>>>(p); break;
      case GemmOut::kStoreF32: moe_gemv_kernel<T, GemmOut::kStoreF32><<<grid, kGemvWarps * 32, 0, s>>>(p); break;
      case GemmOut::kStoreAct: moe_gemv_kernel<T, GemmOut::kStoreAct><<<grid, kGemvWarps * 32, 0, s>>>(p); break;
      default: PAGODA_CUDA_REQUIRE(false, "moe_matmul: mode");
    }
  } else {
    const dim3 grid(static_cast<unsigned>(ceil_div(p.N, kMoeTile)), max_tiles);
    switch (p.mode) {
      case GemmOut::kStoreF32: moe_gemm_kernel<T, GemmOut::kStoreF32><<<grid, 256, 0, s>>>(p); break;
      case GemmOut::kStoreAct: moe_gemm_kernel<T, GemmOut::kStoreAct><<<grid, 256, 0, s>>>(p); break;
      default: PAGODA_CUDA_REQUIRE(false, "moe_matmul: the SIMT path stores f32 or act (SwiGLU is a separate kernel)");
    }
  }
}

}  // namespace

void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize, int32_t* ids, float* weights,
               cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(E >= 1 && E <= kMoeMaxExperts && k >= 1 && k <= E && k <= kMoeMaxTopK,
                      "moe_route: 1 <= k <= E <= 256, k <= 16");
  if (T <= 0) return;
  moe_route_kernel<<<static_cast<unsigned>(ceil_div(T, kRouteWarps)), kRouteWarps * 32, 0, s>>>(
      logits, static_cast<int>(T), static_cast<int>(E), static_cast<int>(k), normalize, ids, weights);
  CUDA_CHECK_LAUNCH();
}

void moe_sort(const int32_t* ids, int64_t P, int64_t E, int32_t* order, const MoeSegments& seg, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(E >= 1 && E <= kMoeMaxExperts && P >= 1 && P < (int64_t{1} << 30), "moe_sort: 1 <= E <= 256, P >= 1");
  moe_sort_kernel<<<static_cast<unsigned>(E), kSortThreads, 0, s>>>(ids, static_cast<int>(P), static_cast<int>(E), order,
                                                                     seg);
  CUDA_CHECK_LAUNCH();
}

int64_t moe_max_tiles(int64_t P, int64_t E) { return ceil_div(P, kMoeTile) + std::min(E, P); }

void moe_matmul(const MoeMatmulParams& p, DType dtype, bool gemv, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16, "moe_matmul: f32 or bf16");
  PAGODA_CUDA_REQUIRE(p.P >= 1 && p.E >= 1 && p.E <= kMoeMaxExperts && p.N >= 1 && p.K >= 1, "moe_matmul: shape");
  PAGODA_CUDA_REQUIRE(gemv || p.mode != GemmOut::kSwiGlu, "moe_matmul: the SIMT GEMM has no fused SwiGLU");
  PAGODA_CUDA_REQUIRE(p.mode != GemmOut::kAddF32, "moe_matmul: kAddF32 is not a grouped mode");
  const int64_t per16 = dtype == DType::kF32 ? 4 : 8;  // elements in 16 bytes
  PAGODA_CUDA_REQUIRE(!gemv || (p.K % per16 == 0 && p.ldx % per16 == 0 && aligned16(p.x)),
                      "moe_matmul: the GEMV reads 16-byte aligned rows (K and the input stride multiples of 16 bytes)");
  const unsigned max_segments = static_cast<unsigned>(std::min(p.E, p.P));
  const unsigned max_tiles = static_cast<unsigned>(moe_max_tiles(p.P, p.E));
  PAGODA_CUDA_REQUIRE(max_tiles <= 65535u, "moe_matmul: too many pairs for one launch");
  if (dtype == DType::kF32) launch_matmul<float>(p, gemv, max_segments, max_tiles, s);
  else launch_matmul<bf16>(p, gemv, max_segments, max_tiles, s);
  CUDA_CHECK_LAUNCH();
}

void moe_combine(const MoeCombineParams& p, DType dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(p.top_k >= 1 && p.top_k <= kMoeMaxTopK && p.D >= 1, "moe_combine: 1 <= k <= 16");
  PAGODA_CUDA_REQUIRE(p.shared_out == nullptr || p.shared_gate_logits != nullptr ||
                          (p.hidden != nullptr && p.shared_gate != nullptr),
                      "moe_combine: the shared expert needs its gate and the normalised input");
  if (p.T <= 0) return;
  if (dtype == DType::kF32) moe_combine_kernel<float><<<static_cast<unsigned>(p.T), 256, 0, s>>>(p);
  else moe_combine_kernel<bf16><<<static_cast<unsigned>(p.T), 256, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
