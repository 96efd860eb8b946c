// Mixture-of-experts kernels (kernels.h, "moe.cu"): routing, the sort of (token, slot) pairs by
// expert, the grouped expert GEMVs of small steps (moe_matmul; larger steps take the grouped GEMMs
// of moe_gemm.cu) and the weighted combine into the residual stream. Every
// count that depends on the routing (pairs per expert, active experts, tiles) stays in device
// memory: grids are sized from host-known bounds (T, k, E) and blocks past the device-side counts
// exit, so the whole MoE layer is one fixed launch sequence, capturable in a CUDA graph, with no
// host synchronisation.
//
// Every kernel is launched with programmatic dependent launch (device_utils.cuh): it lets the next
// kernel be scheduled at once and waits for its predecessor before it reads anything that an
// earlier kernel wrote (only moe_norm_route reads something first: its router weights), so the
// launch gaps between the layer's short kernels overlap the predecessor's tail.
#include <algorithm>
#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_matmul.cuh"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kRouteWarps = 4;                    // tokens a block of moe_route
constexpr int kRouteSlots = kMoeMaxExperts / 32;  // experts a lane holds
constexpr int kSortThreads = 256;
constexpr int kRouteSortThreads = 512;  // the fused route + sort's one block
constexpr int kCombineThreads = 128;    // columns a block of moe_combine
constexpr int kRouterWarps = 8;         // router rows (experts) a block of moe_norm_route
constexpr int kRouterPre = 8;           // 16-byte router chunks a lane loads before waiting
constexpr int kGemvWarps = kMoeGemvWarps;
constexpr int kGemvRows = 4;     // token rows a pass over an expert's weight row serves (steps of 2+)
constexpr int kGemvLoads = 8;    // 16-byte weight loads in flight a lane over two weight rows (4 a row)
constexpr int kDownSegs = 4;     // segments (experts) a warp of moe_down_combine streams together

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

// ---- routing ----

// One warp a token: softmax over the E router logits l, the k largest probabilities (ties: the
// lower expert), optionally renormalised to sum 1 (ops/moe.h's moe_route), into id[k] and w[k];
// also into sid[k] when given (shared memory of the fused route + sort).
__device__ __forceinline__ void route_token(const float* l, int E, int k, bool normalize, int lane,
                                            int32_t* __restrict__ id, float* __restrict__ w, int32_t* sid) {
  float p[kRouteSlots];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? __ldcg(l + e) : -INFINITY;  // through L2: other blocks of the launch may have written l
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
  float kept = 0.0f, mine_w = 0.0f;  // lane j < k keeps choice j's probability
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
    if (lane == j) {
      id[j] = be;
      mine_w = pw;
      if (sid != nullptr) sid[j] = be;
    }
  }
  if (lane < k) w[lane] = normalize ? mine_w / kept : mine_w;
}

// One warp a token (route_token).
__global__ __launch_bounds__(kRouteWarps * 32) void moe_route_kernel(const float* __restrict__ logits, int T, int E,
                                                                     int k, bool normalize, int32_t* __restrict__ ids,
                                                                     float* __restrict__ weights) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (t >= T) return;
  route_token(logits + static_cast<int64_t>(t) * E, E, k, normalize, lane, ids + static_cast<int64_t>(t) * k,
              weights + static_cast<int64_t>(t) * k, nullptr);
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
  pdl_trigger();
  const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < E; i += kSortThreads) hist[i] = 0;
  pdl_wait();
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

// ---- fused route + sort (small steps) ----

// By one block of NT threads: every token routed (a warp a token, route_token), its choices kept
// in shared memory sid [T * k]; the histogram of the P = T * k pairs' experts; one warp's scan of
// it (a lane per kRouteSlots consecutive experts) writes the segments; then one warp walks the
// pairs in ascending order, 32 at a time, and places each at its expert's cursor plus its rank
// among the chunk's lanes of the same expert (__match_any_sync), which keeps the order stable.
// The same ids, weights, order and segments as moe_route + moe_sort. cursor: shared [E].
template <int NT>
__device__ __forceinline__ void route_sort_block(const float* logits, int T, int E, int k, bool normalize,
                                                 int32_t* __restrict__ ids, float* __restrict__ weights,
                                                 int32_t* __restrict__ order, const MoeSegments& seg, int32_t* sid,
                                                 int* cursor) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < E; i += NT) cursor[i] = 0;
  for (int t = warp; t < T; t += NT / 32) {
    const int64_t p0 = static_cast<int64_t>(t) * k;
    route_token(logits + static_cast<int64_t>(t) * E, E, k, normalize, lane, ids + p0, weights + p0, sid + p0);
  }
  __syncthreads();
  const int P = T * k;
  for (int p = tid; p < P; p += NT) atomicAdd(&cursor[sid[p]], 1);
  __syncthreads();
  if (warp != 0) return;
  int c[kRouteSlots];
  int pairs = 0, active = 0, tiles = 0;
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    const int e = lane * kRouteSlots + i;
    c[i] = e < E ? cursor[e] : 0;
    pairs += c[i];
    active += c[i] > 0;
    tiles += (c[i] + kMoeTile - 1) / kMoeTile;
  }
  int begin = pairs, s = active, tile = tiles;  // inclusive scans over the lanes, then exclusive
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int b = __shfl_up_sync(0xffffffffu, begin, o), a = __shfl_up_sync(0xffffffffu, s, o),
              ti = __shfl_up_sync(0xffffffffu, tile, o);
    if (lane >= o) {
      begin += b;
      s += a;
      tile += ti;
    }
  }
  begin -= pairs;
  s -= active;
  tile -= tiles;
#pragma unroll
  for (int i = 0; i < kRouteSlots; ++i) {
    const int e = lane * kRouteSlots + i;
    if (c[i] == 0) continue;
    seg.expert[s] = e;
    seg.begin[s] = begin;
    seg.tile[s] = tile;
    cursor[e] = begin;
    ++s;
    begin += c[i];
    tile += (c[i] + kMoeTile - 1) / kMoeTile;
  }
  if (lane == 31) {  // its running values are the totals
    *seg.count = s;
    seg.begin[s] = begin;
    seg.tile[s] = tile;
  }
  __syncwarp();
  for (int base = 0; base < P; base += 32) {
    const int p = base + lane;
    const int e = p < P ? sid[p] : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) order[cursor[e] + rank] = p;
    __syncwarp();
    if (e >= 0 && rank == 0) cursor[e] += __popc(peers);
    __syncwarp();
  }
}

__global__ __launch_bounds__(kRouteSortThreads) void moe_route_sort_kernel(const float* __restrict__ logits, int T,
                                                                           int E, int k, bool normalize,
                                                                           int32_t* __restrict__ ids,
                                                                           float* __restrict__ weights,
                                                                           int32_t* __restrict__ order,
                                                                           MoeSegments seg) {
  __shared__ int32_t sid[kMoeRouteSortMaxPairs];
  __shared__ int cursor[kMoeMaxExperts];  // pairs per expert, then the expert's next sorted position
  pdl_trigger();
  pdl_wait();
  route_sort_block<kRouteSortThreads>(logits, T, E, k, normalize, ids, weights, order, seg, sid, cursor);
}

// ---- fused norm + router + route + sort (decode) ----

// Block b: router rows (experts) [8 b, 8 b + 8), a warp a row, its first kRouterPre 16-byte
// chunks a lane loaded before waiting (they do not depend on earlier kernels). For each token m
// in turn the block normalises residual row m into shared memory in the compute dtype
// (block_rms_norm_row: the rms_norm kernel's arithmetic; block 0 also writes it to hidden), then
// every warp's dot product with it (a lane's chunks in order, then the warp sum) -> logits f32.
// The last block to finish (a counter, reset by that block for the next launch) routes and sorts
// (route_sort_block) from the logits, read through L2.
template <class T>
__global__ __launch_bounds__(kRouterWarps * 32) void moe_norm_route_kernel(MoeNormRouteParams a) {
  extern __shared__ uint4 xs4[];  // one normalised row: D values of T
  __shared__ float scratch[33];
  __shared__ int32_t sid[kMoeNormRouteMaxTokens * kMoeMaxTopK];
  __shared__ int cursor[kMoeMaxExperts];
  __shared__ bool last;
  pdl_trigger();
  const int lane = threadIdx.x & 31, n = blockIdx.x * kRouterWarps + (threadIdx.x >> 5);
  const int E = static_cast<int>(a.E), D = static_cast<int>(a.D), kc = D / (16 / static_cast<int>(sizeof(T)));
  const bool active = n < E;
  const uint4* wr = reinterpret_cast<const uint4*>(static_cast<const T*>(a.router) + static_cast<int64_t>(active ? n : 0) * D);
  uint4 pre[kRouterPre];
#pragma unroll
  for (int u = 0; u < kRouterPre; ++u)
    pre[u] = active && lane + 32 * u < kc ? load_stream<true>(wr + lane + 32 * u) : make_uint4(0, 0, 0, 0);
  pdl_wait();
  T* xs = reinterpret_cast<T*>(xs4);
  const int T_ = static_cast<int>(a.T);
  for (int m = 0; m < T_; ++m) {
    const float4* xr = reinterpret_cast<const float4*>(a.residual + static_cast<int64_t>(m) * D);
    T* hid = static_cast<T*>(a.hidden) + static_cast<int64_t>(m) * D;
    const bool write = blockIdx.x == 0;
    block_rms_norm_row<4>(xr, reinterpret_cast<const float4*>(a.norm_w), D / 4, a.eps, scratch, [&](int j, const float4& y) {
      store4(xs, int64_t{4} * j, y);
      if (write) store4(hid, int64_t{4} * j, y);
    });
    __syncthreads();
    if (active) {
      float acc = 0.0f;
#pragma unroll
      for (int u = 0; u < kRouterPre; ++u)
        if (lane + 32 * u < kc) acc = dot16<T>(pre[u], xs4[lane + 32 * u], acc);
      for (int c = lane + 32 * kRouterPre; c < kc; c += 32) acc = dot16<T>(load_stream<false>(wr + c), xs4[c], acc);
      acc = warp_sum(acc);
      if (lane == 0) a.logits[static_cast<int64_t>(m) * E + n] = acc;
    }
    __syncthreads();  // xs is rewritten by the next row
  }
  __threadfence();  // this block's logits visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) *a.done = 0;
  route_sort_block<kRouterWarps * 32>(a.logits, T_, E, static_cast<int>(a.k), a.normalize, a.ids, a.weights, a.order,
                                      a.seg, sid, cursor);
}

// ---- grouped GEMVs (steps up to kMoeGemvMaxTokens) ----

// Block (x, s) of a grid of moe_gemv_blocks(...) x segments: its warps take output rows n = x *
// kGemvWarps + warp, then n + the grid's warps, ... of active segment s (fewer, longer-lived blocks:
// each block's dependent reads of the segment table are paid once for several rows); a warp reads
// a weight row (two: gate and up) once per kGemvRows of the segment's token rows. kSwiGlu: rows n (gate) and N/2 + n (up), y = silu(g) * u
// rounded as the dense path rounds it (swiglu.cuh).
template <class T, GemmOut MODE>
__global__ __launch_bounds__(kGemvWarps * 32) void moe_gemv_kernel(MoeMatmulParams a) {
  pdl_trigger();
  pdl_wait();
  GemvSegment seg;
  if (!gemv_segment(a, seg)) return;
  const int begin = seg.begin, end = seg.end, expert = seg.expert;
  constexpr int R = MODE == GemmOut::kSwiGlu ? 2 : 1;
  constexpr int kGemvUnroll = kGemvLoads / 2;  // loads in flight per weight row
  const int n_out = MODE == GemmOut::kSwiGlu ? a.N / 2 : a.N;
  const int lane = threadIdx.x & 31;
  const T* w = static_cast<const T*>(a.w[expert]);
  const int kc = a.K / (16 / static_cast<int>(sizeof(T)));
  const T* x = static_cast<const T*>(a.x);
  for (int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5); n < n_out; n += gridDim.x * kGemvWarps) {
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(n + r * n_out) * a.K);
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
}

// Batch 1 (every segment one row: MoeMatmulParams::max_rows == 1): block (x, s) of a grid of
// moe_gemv_blocks(...) x segments; its warps take outputs n = x * kGemvWarps + warp, then n + the
// grid's warps, ..., two weight rows at a time (gate and up, or two outputs), kGemvLoads 16-byte
// loads in flight a lane. Fewer, longer-lived blocks than one a row: each block's chain of
// dependent reads (segment count, segment, expert pointer, gathered input row) is paid once for
// several rows. Any segment length is computed correctly (its rows in turn).
template <class T, GemmOut MODE>
__global__ __launch_bounds__(kGemvWarps * 32) void moe_gemv1_kernel(MoeMatmulParams a) {
  pdl_trigger();
  pdl_wait();
  GemvSegment seg;
  if (!gemv_segment(a, seg)) return;
  const int begin = seg.begin, end = seg.end, expert = seg.expert;
  constexpr bool kGlu = MODE == GemmOut::kSwiGlu;
  constexpr int R = 2, U = kGemvLoads / R;
  const int n_out = kGlu ? a.N / 2 : a.N;
  const int lane = threadIdx.x & 31, warps = gridDim.x * kGemvWarps;
  const int step = kGlu ? warps : 2 * warps;  // outputs the grid's warps take per pass
  const T* w = static_cast<const T*>(a.w[expert]);
  const int kc = a.K / (16 / static_cast<int>(sizeof(T)));
  const T* x = static_cast<const T*>(a.x);
  for (int pos = begin; pos < end; ++pos) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + input_row(a, pos) * a.ldx);
    for (int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5); n < n_out; n += step) {
      int row[R];
      bool valid[R];
      row[0] = n;
      valid[0] = true;
      row[1] = kGlu ? n + n_out : n + warps;
      valid[1] = kGlu || n + warps < n_out;
      const uint4* wr[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(valid[r] ? row[r] : n) * a.K);
      float acc[R] = {0.0f, 0.0f};
      for (int c0 = lane; c0 < kc; c0 += 32 * U) {
        uint4 wv[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int r = 0; r < R; ++r)
            wv[u][r] = c0 + 32 * u < kc && valid[r] ? load_stream<false>(wr[r] + c0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = c0 + 32 * u;
          if (c >= kc) break;
          const uint4 xv = __ldg(xr + c);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r] = dot16<T>(wv[u][r], xv, acc[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
      if (lane != 0) continue;
      if constexpr (kGlu) {
        T* y = static_cast<T*>(a.y) + static_cast<int64_t>(pos) * a.ldy + n;
        if constexpr (std::is_same_v<T, float>) *y = silu_mul(acc[0], acc[1]);
        else *y = swiglu_out(acc[0], acc[1]);
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (valid[r]) store_out<T, MODE>(a, pos, row[r], acc[r]);
      }
    }
  }
}

// One token (every segment one row), no shared expert: the down projection and the combine in one
// launch. Warp n: output column n over every active segment in ascending expert order,
// kDownSegs segments' weight rows streamed together (4 loads in flight a row and lane), each
// segment's dot product as moe_gemv1 computes it, then residual[n] += the sum of
// weights[pair] * dot in ascending expert order (moe_combine's order).
template <class T>
__global__ __launch_bounds__(kGemvWarps * 32) void moe_down_combine_kernel(MoeMatmulParams a,
                                                                         const float* __restrict__ weights,
                                                                         float* __restrict__ residual) {
  pdl_trigger();
  pdl_wait();
  const int n = blockIdx.x * kGemvWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (n >= a.N) return;
  constexpr int U = kGemvLoads / 2;
  const int kc = a.K / (16 / static_cast<int>(sizeof(T)));
  const T* x = static_cast<const T*>(a.x);
  const int nseg = *a.seg.count;  // >= 1; read with the first segments' entries (the loop's first pass needs no count)
  const int max_seg = static_cast<int>(min(a.E, a.P));  // entries of the segment table a step may hold
  float o = 0.0f;
  int s0 = 0;
  do {
    const uint4* wr[kDownSegs];
    const uint4* xr[kDownSegs];
    bool valid[kDownSegs];
    int expert[kDownSegs], pos[kDownSegs];
#pragma unroll
    for (int i = 0; i < kDownSegs; ++i) {
      const int sg = min(s0 + i, max_seg - 1);
      expert[i] = a.seg.expert[sg];
      pos[i] = a.seg.begin[sg];
    }
#pragma unroll
    for (int i = 0; i < kDownSegs; ++i) {
      valid[i] = s0 + i < nseg;
      const int e = valid[i] ? expert[i] : expert[0];  // past the count: any valid expert's row, not read
      wr[i] = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w[e]) + static_cast<int64_t>(n) * a.K);
      xr[i] = reinterpret_cast<const uint4*>(x + input_row(a, valid[i] ? pos[i] : pos[0]) * a.ldx);
    }
    float acc[kDownSegs];
#pragma unroll
    for (int i = 0; i < kDownSegs; ++i) acc[i] = 0.0f;
    for (int c0 = lane; c0 < kc; c0 += 32 * U) {
      uint4 wv[U][kDownSegs];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < kDownSegs; ++i)
          wv[u][i] = c0 + 32 * u < kc && valid[i] ? load_stream<false>(wr[i] + c0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        if (c >= kc) break;
#pragma unroll
        for (int i = 0; i < kDownSegs; ++i)
          if (valid[i]) acc[i] = dot16<T>(wv[u][i], __ldg(xr[i] + c), acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kDownSegs; ++i) {
      acc[i] = warp_sum(acc[i]);
      if (valid[i]) o += weights[a.scatter[pos[i]]] * acc[i];
    }
    s0 += kDownSegs;
  } while (s0 < nseg);
  if (lane == 0) residual[n] += o;
}

// ---- combine ----

// Block (t, y): columns [y * kCombineThreads, ...) of token t, a thread a column:
// residual[t] += sigmoid(hidden[t] . shared_gate) * shared_out[t] (optional) + the token's k expert
// outputs weighted, added in ascending expert order (ops/moe.h's order). The k loads of a column are
// issued together; the slot order (a token's experts are distinct: the rank of each by expert) is
// computed once a block.
template <class T>
__global__ __launch_bounds__(kCombineThreads) void moe_combine_kernel(MoeCombineParams a) {
  __shared__ float scratch[33];
  __shared__ int slot[kMoeMaxTopK];
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, k = a.top_k, D = a.D;
  const int64_t p0 = static_cast<int64_t>(t) * k;
  if (static_cast<int>(threadIdx.x) < k) {
    const int j = threadIdx.x, e = a.ids[p0 + j];
    int r = 0;
    for (int i = 0; i < k; ++i) {
      const int o = a.ids[p0 + i];
      r += o < e || (o == e && i < j);
    }
    slot[r] = j;
  }
  float sg = 0.0f;
  if (a.shared_out != nullptr && a.shared_gate_logits != nullptr) {
    sg = 1.0f / (1.0f + expf(-a.shared_gate_logits[t]));
  } else if (a.shared_out != nullptr) {
    const T* h = static_cast<const T*>(a.hidden) + static_cast<int64_t>(t) * D;
    const T* g = static_cast<const T*>(a.shared_gate);
    float dot = 0.0f;
    for (int d = threadIdx.x; d < D; d += kCombineThreads) dot = fmaf(to_f32(h[d]), to_f32(g[d]), dot);
    dot = block_sum(dot, scratch);
    sg = 1.0f / (1.0f + expf(-dot));
  }
  __syncthreads();
  const int d = blockIdx.y * kCombineThreads + threadIdx.x;
  if (d >= D) return;
  float v[kMoeMaxTopK];
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    const int64_t pair = p0 + slot[j < k ? j : 0];
    v[j] = j < k ? a.weights[pair] * a.expert_out[pair * D + d] : 0.0f;
  }
  float o = a.shared_out != nullptr ? a.shared_out[static_cast<int64_t>(t) * D + d] * sg : 0.0f;
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j)
    if (j < k) o += v[j];
  a.residual[static_cast<int64_t>(t) * D + d] += o;
}

// The grouped GEMV of one mode: moe_gemv1 where every segment is one row, moe_gemv otherwise.
template <class T, GemmOut MODE>
void launch_gemv_mode(const MoeMatmulParams& p, const dim3& grid, cudaStream_t s) {
  const dim3 block(kGemvWarps * 32);
  if (p.max_rows == 1) launch_pdl(moe_gemv1_kernel<T, MODE>, grid, block, 0, s, p);
  else launch_pdl(moe_gemv_kernel<T, MODE>, grid, block, 0, s, p);
}

template <class T>
void launch_gemv(const MoeMatmulParams& p, unsigned max_segments, cudaStream_t s) {
  const int n_out = p.mode == GemmOut::kSwiGlu ? p.N / 2 : p.N;
  const int per_warp = p.max_rows == 1 ? 2 : 1;  // moe_gemv1: two weight rows at a time
  const dim3 grid(moe_gemv_blocks(n_out, per_warp, max_segments), max_segments);
  switch (p.mode) {
    case GemmOut::kSwiGlu: launch_gemv_mode<T, GemmOut::kSwiGlu>(p, grid, s); break;
    case GemmOut::kStoreF32: launch_gemv_mode<T, GemmOut::kStoreF32>(p, grid, s); break;
    case GemmOut::kStoreAct: launch_gemv_mode<T, GemmOut::kStoreAct>(p, grid, s); break;
    default: PAGODA_CUDA_REQUIRE(false, "moe_matmul: mode");
  }
}

}  // namespace

unsigned moe_gemv_blocks(int n_out, int per_warp, unsigned max_segments) {
  static const int sms = [] {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  const int64_t want = ceil_div(int64_t{4} * sms, static_cast<int64_t>(max_segments));
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, ceil_div(n_out, per_warp * kGemvWarps))));
}

void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize, int32_t* ids, float* weights,
               cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(E >= 1 && E <= kMoeMaxExperts && k >= 1 && k <= E && k <= kMoeMaxTopK,
                      "moe_route: 1 <= k <= E <= 256, k <= 16");
  if (T <= 0) return;
  launch_pdl(moe_route_kernel, dim3(static_cast<unsigned>(ceil_div(T, kRouteWarps))), dim3(kRouteWarps * 32), 0, s,
             logits, static_cast<int>(T), static_cast<int>(E), static_cast<int>(k), normalize, ids, weights);
  CUDA_CHECK_LAUNCH();
}

void moe_sort(const int32_t* ids, int64_t P, int64_t E, int32_t* order, const MoeSegments& seg, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(E >= 1 && E <= kMoeMaxExperts && P >= 1 && P < (int64_t{1} << 30), "moe_sort: 1 <= E <= 256, P >= 1");
  launch_pdl(moe_sort_kernel, dim3(static_cast<unsigned>(E)), dim3(kSortThreads), 0, s, ids, static_cast<int>(P),
             static_cast<int>(E), order, seg);
  CUDA_CHECK_LAUNCH();
}

void moe_route_sort(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize, int32_t* ids, float* weights,
                    int32_t* order, const MoeSegments& seg, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(E >= 1 && E <= kMoeMaxExperts && k >= 1 && k <= E && k <= kMoeMaxTopK,
                      "moe_route_sort: 1 <= k <= E <= 256, k <= 16");
  PAGODA_CUDA_REQUIRE(T >= 1 && T * k <= kMoeRouteSortMaxPairs, "moe_route_sort: 1 <= T * k <= 4096");
  launch_pdl(moe_route_sort_kernel, dim3(1), dim3(kRouteSortThreads), 0, s, logits, static_cast<int>(T),
             static_cast<int>(E), static_cast<int>(k), normalize, ids, weights, order, seg);
  CUDA_CHECK_LAUNCH();
}

bool moe_norm_route_supported(int64_t T, int64_t D, DType dtype) {
  // The row in dynamic shared memory: at most 40 KiB, so that with the ~1.5 KiB of static shared
  // memory the block stays under the 48 KiB default.
  return T >= 1 && T <= kMoeNormRouteMaxTokens && D % 8 == 0 && D * (dtype == DType::kF32 ? 4 : 2) <= 40 * 1024 &&
         (dtype == DType::kF32 || dtype == DType::kBF16);
}

void moe_norm_route(const MoeNormRouteParams& p, DType dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(moe_norm_route_supported(p.T, p.D, dtype), "moe_norm_route: 1 <= T <= 4, D % 8 == 0, f32 | bf16");
  PAGODA_CUDA_REQUIRE(p.E >= 1 && p.E <= kMoeMaxExperts && p.k >= 1 && p.k <= p.E && p.k <= kMoeMaxTopK,
                      "moe_norm_route: 1 <= k <= E <= 256, k <= 16");
  PAGODA_CUDA_REQUIRE(aligned16(p.residual) && aligned16(p.norm_w) && aligned16(p.router) && aligned16(p.hidden),
                      "moe_norm_route: 16-byte aligned rows");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.E, kRouterWarps)));
  const size_t smem = static_cast<size_t>(p.D * (dtype == DType::kF32 ? 4 : 2));
  if (dtype == DType::kF32) launch_pdl(moe_norm_route_kernel<float>, grid, dim3(kRouterWarps * 32), smem, s, p);
  else launch_pdl(moe_norm_route_kernel<bf16>, grid, dim3(kRouterWarps * 32), smem, s, p);
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
  PAGODA_CUDA_REQUIRE(gemv || !p.tensor_cores ||
                          (dtype == DType::kBF16 && p.K % 8 == 0 && p.ldx % 8 == 0 && aligned16(p.x)),
                      "moe_matmul: the tensor-core GEMM takes bf16 with 16-byte aligned rows (K, ldx multiples of 8)");
  const unsigned max_segments = static_cast<unsigned>(std::min(p.E, p.P));
  const unsigned max_tiles = static_cast<unsigned>(moe_max_tiles(p.P, p.E));
  PAGODA_CUDA_REQUIRE(max_tiles <= 65535u, "moe_matmul: too many pairs for one launch");
  if (!gemv) launch_moe_gemm(p, dtype, dtype, max_tiles, s);
  else if (dtype == DType::kF32) launch_gemv<float>(p, max_segments, s);
  else launch_gemv<bf16>(p, max_segments, s);
  CUDA_CHECK_LAUNCH();
}

void moe_down_combine(const MoeMatmulParams& p, const float* weights, float* residual, DType dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16, "moe_down_combine: f32 or bf16");
  PAGODA_CUDA_REQUIRE(p.max_rows == 1 && p.scatter != nullptr && p.N >= 1 && p.K >= 1,
                      "moe_down_combine: one token (max_rows 1), the pairs' order as scatter");
  const int64_t per16 = dtype == DType::kF32 ? 4 : 8;
  PAGODA_CUDA_REQUIRE(p.K % per16 == 0 && p.ldx % per16 == 0 && aligned16(p.x),
                      "moe_down_combine: 16-byte aligned rows (K and the input stride multiples of 16 bytes)");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.N, kGemvWarps))), block(kGemvWarps * 32);
  if (dtype == DType::kF32) launch_pdl(moe_down_combine_kernel<float>, grid, block, 0, s, p, weights, residual);
  else launch_pdl(moe_down_combine_kernel<bf16>, grid, block, 0, s, p, weights, residual);
  CUDA_CHECK_LAUNCH();
}

void moe_combine(const MoeCombineParams& p, DType dtype, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(p.top_k >= 1 && p.top_k <= kMoeMaxTopK && p.D >= 1, "moe_combine: 1 <= k <= 16");
  PAGODA_CUDA_REQUIRE(p.shared_out == nullptr || p.shared_gate_logits != nullptr ||
                          (p.hidden != nullptr && p.shared_gate != nullptr),
                      "moe_combine: the shared expert needs its gate and the normalised input");
  if (p.T <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.T), static_cast<unsigned>(ceil_div(p.D, kCombineThreads)));
  if (dtype == DType::kF32) launch_pdl(moe_combine_kernel<float>, grid, dim3(kCombineThreads), 0, s, p);
  else launch_pdl(moe_combine_kernel<bf16>, grid, dim3(kCombineThreads), 0, s, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
