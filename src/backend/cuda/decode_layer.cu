// The persistent one-row decode layer (decode_layer in kernels.h): the o projection, the FFN and
// the next layer's QKV (or the lm_head) of batch-1 decode in one kernel.
//
// Why: at batch 1 every matmul is a GEMV bound by its weight bytes, and the chain of short kernels
// (o, gate/up, down, QKV, each waiting for the last) lost 2-3 us at every boundary to ramp-up and
// drain (docs/cuda.md, knock-outs). Here the weight stream does not stop at a boundary: each warp
// owns fixed rows of every matrix and streams them, in the order it will use them, through a ring
// of kDepth 4 KiB slots in shared memory (cp.async, 16 bytes a lane). It refills a slot as soon as
// it has used it, so while it waits (for the attention before the first stage, at a grid barrier
// between stages) the next kDepth slots of weights are already on their way.
//
// Stages (x is the stage's input vector, in shared memory as bf16):
//   0  x = attn                         residual[n] += x . W_o[n]
//   1  x = rms_norm(residual) * ffn_norm act[n] = silu(x . W_gate[n]) * (x . W_up[n])
//   2  x = act                          residual[n] += x . W_down[n]
//   3  x = rms_norm(residual[tail_row]) * tail_norm    tail_out[n] = x . W_tail[n]   (optional)
// A stage reads what the previous one wrote anywhere in the grid, so a grid-wide barrier
// (an atomic counter in global memory) separates them; the grid is one block an SM, all resident
// at once (shared memory allows one a SM), so the barrier cannot deadlock. Warp w of the grid
// takes rows w, w + W, w + 2W, ... (W warps in the grid) of every stage, and a lane accumulates
// chunks lane, lane + 32, ... of a row with gemv_bf16's FMAs in gemv_bf16's order, and the norms
// are the same block reduction over the same 256 threads: the results are gemv_bf16's bits.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemv_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"

namespace pagoda::cuda {
namespace {

// 16 warps: a warp issues ~200 instructions a 4 KiB slot and, with 2 warps a scheduler (8 warps
// a block), the first version could not consume weights as fast as DRAM delivers them (ncu: 4.6
// cycles between a warp's instructions, 58 % of DRAM bandwidth).
constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
// A ring slot holds the same 2 KiB column range of kSlotRows weight rows (128 chunks of 16 bytes
// a row, 4 a lane): the warp runs kSlotRows independent FMA chains, and each input chunk is read
// from shared memory and unpacked once for both.
constexpr int kSlotRows = 2;
constexpr int kColChunks = 128;
constexpr int kLaneChunks = kColChunks / 32;
constexpr int kSlotChunks = kSlotRows * kColChunks;  // 4 KiB

struct Stage {
  const bf16* w;
  int n_out;  // outputs (SwiGLU: F, each from a gate row n and an up row n_out + n)
  int K;
  int R;      // weight rows an output reads: 2 for SwiGLU
  // Outputs of warp gw (rows gw, gw + W, ...), its groups of kSlotRows / R outputs, column slots
  // of a row, 16-byte chunks of a row.
  __device__ __forceinline__ int outputs(int gw, int W) const { return n_out > gw ? (n_out - gw + W - 1) / W : 0; }
  __device__ __forceinline__ int groups(int outs) const { return (outs * R + kSlotRows - 1) / kSlotRows; }
  __device__ __forceinline__ int cols() const { return (K / 8 + kColChunks - 1) / kColChunks; }
  __device__ __forceinline__ int chunks() const { return K / 8; }
  // Weight row of slot row i of group g, or -1 past the warp's outputs.
  __device__ __forceinline__ int row(int g, int i, int gw, int W, int outs) const {
    const int j = g * (kSlotRows / R) + (R == 2 ? i >> 1 : i);
    return j < outs ? gw + j * W + (R == 2 ? (i & 1) * n_out : 0) : -1;
  }
};

__device__ __forceinline__ Stage stage_of(const DecodeLayerParams& p, int s) {
  if (s == 0) return {static_cast<const bf16*>(p.w_o), static_cast<int>(p.D), static_cast<int>(p.Q), 1};
  if (s == 1) return {static_cast<const bf16*>(p.w_gu), static_cast<int>(p.F), static_cast<int>(p.D), 2};
  if (s == 2) return {static_cast<const bf16*>(p.w_down), static_cast<int>(p.D), static_cast<int>(p.F), 1};
  return {static_cast<const bf16*>(p.w_tail), static_cast<int>(p.n_tail), static_cast<int>(p.D), 1};
}

// The copy side of a warp's ring: walks the warp's sequence of weight slots (stage, output group,
// column slot) in the consumer loop's order, kDepth slots ahead of it. The current stage's
// constants and the current group's row starts are kept, so a slot costs its copies only.
struct Producer {
  int s = 0, g = 0, col = 0;
  int stages, gw, W;
  Stage st{};
  int outs = 0, groups = 0, cols = 0, kc = 0;
  const uint4* rows[kSlotRows] = {};

  __device__ __forceinline__ void set_group() {
#pragma unroll
    for (int i = 0; i < kSlotRows; ++i) {
      const int r = st.row(g, i, gw, W, outs);
      rows[i] = r < 0 ? nullptr : reinterpret_cast<const uint4*>(st.w + static_cast<int64_t>(r) * st.K);
    }
  }
  // From stage s on, the first stage where the warp has outputs (s == stages: done).
  __device__ __forceinline__ void enter(const DecodeLayerParams& p) {
    for (; s < stages; ++s) {
      st = stage_of(p, s);
      outs = st.outputs(gw, W);
      groups = st.groups(outs);
      if (groups > 0) {
        cols = st.cols();
        kc = st.chunks();
        g = col = 0;
        set_group();
        return;
      }
    }
  }
  __device__ __forceinline__ void advance(const DecodeLayerParams& p) {
    if (s >= stages) return;
    if (++col < cols) return;
    col = 0;
    if (++g < groups) {
      set_group();
      return;
    }
    ++s;
    enter(p);
  }
  // Starts the copies of the current slot into `slot` (the lane's chunks of each row) as one
  // commit group; past the end, an empty group (the wait counts stay uniform).
  __device__ __forceinline__ void issue(uint4* slot, int lane) const {
    if (s < stages) {
#pragma unroll
      for (int i = 0; i < kSlotRows; ++i) {
        if (!rows[i]) continue;
#pragma unroll
        for (int u = 0; u < kLaneChunks; ++u) {
          const int ch = col * kColChunks + u * 32 + lane;
          if (ch < kc) cp_async16(slot + (i * kLaneChunks + u) * 32 + lane, rows[i] + ch, true);
        }
      }
    }
    cp_async_commit();
  }
};

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Every block of the grid arrives, then waits for all: writes before it are visible to every
// block after it. The counter only counts up; the arrivals of one barrier are the values
// [k G, (k + 1) G), so a block's own arrival tells it the count to wait for.
__device__ __forceinline__ void grid_barrier(unsigned long long* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long G = gridDim.x;
    __threadfence();
    const unsigned long long old = atomicAdd(counter, 1ull);
    const unsigned long long target = (old / G + 1) * G;
    while (load_acquire(counter) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

// block_rms_norm_row<8> as a block of 256 threads computes it (gemv_bf16's fused norm, bit for
// bit), in this block of kThreads: threads 0-255 form the sum of squares exactly as those 256
// would, then every thread writes outputs.
template <class Put>
__device__ __forceinline__ void norm_row_as_gemv(const float4* xr, const float4* w4, int d4, float eps, float* scratch,
                                                 Put&& put) {
  constexpr int kN = 8, kT = 256;
  static_assert(kThreads % kT == 0, "whole warps");
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  float ss = 0.0f;
  if (t < kT) {
    float4 v[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int j = t + i * kT;
      v[i] = j < d4 ? __ldcg(xr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      ss = fmaf(v[i].x, v[i].x, ss);
      ss = fmaf(v[i].y, v[i].y, ss);
      ss = fmaf(v[i].z, v[i].z, ss);
      ss = fmaf(v[i].w, v[i].w, ss);
    }
    for (int j = t + kN * kT; j < d4; j += kT) {
      const float4 u = __ldcg(xr + j);
      ss = fmaf(u.x, u.x, fmaf(u.y, u.y, fmaf(u.z, u.z, fmaf(u.w, u.w, ss))));
    }
    ss = warp_sum(ss);
    if (lane == 0) scratch[warp] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    float a = lane < kT / 32 ? scratch[lane] : 0.0f;
    a = warp_sum(a);
    if (lane == 0) scratch[32] = a;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(scratch[32] / static_cast<float>(4 * d4) + eps);
  for (int j = t; j < d4; j += kThreads) {
    const float4 u = __ldcg(xr + j), g = w4[j];
    put(j, make_float4(u.x * inv * g.x, u.y * inv * g.y, u.z * inv * g.z, u.w * inv * g.w));
  }
}

// The stage's input vector into xs (bf16), by the whole block; ends with a barrier.
__device__ __forceinline__ void load_stage_input(const DecodeLayerParams& p, int s, uint4* xs, float* scratch) {
  if (s == 0 || s == 2) {
    // The attention output (an earlier kernel's) or act (this kernel's, other blocks: read from L2).
    const uint4* src = static_cast<const uint4*>(s == 0 ? p.attn : p.act);
    const int n = static_cast<int>((s == 0 ? p.Q : p.F) / 8);
    for (int i = threadIdx.x; i < n; i += kThreads) xs[i] = __ldcg(src + i);
  } else {
    const float* norm_w = s == 1 ? p.ffn_norm : p.tail_norm;
    const int row = s == 3 && p.tail_row ? p.tail_row[0] : 0;
    const int D = static_cast<int>(p.D);
    __nv_bfloat162* xh = reinterpret_cast<__nv_bfloat162*>(xs);
    norm_row_as_gemv(reinterpret_cast<const float4*>(p.residual + static_cast<int64_t>(row) * D),
                     reinterpret_cast<const float4*>(norm_w), D / 4, p.eps, scratch, [&](int j, const float4& y) {
                       xh[2 * j] = __floats2bfloat162_rn(y.x, y.y);
                       xh[2 * j + 1] = __floats2bfloat162_rn(y.z, y.w);
                     });
  }
  __syncthreads();
}

template <int kDepth>
__global__ __launch_bounds__(kThreads, 1) void decode_layer_kernel(const __grid_constant__ DecodeLayerParams p) {
  extern __shared__ uint4 smem[];
  __shared__ float scratch[33];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int W = static_cast<int>(gridDim.x) * kWarps, gw = static_cast<int>(blockIdx.x) * kWarps + warp;
  const int stages = p.w_tail ? 4 : 3;
  uint4* ring = smem + warp * kDepth * kSlotChunks;
  uint4* xs = smem + kWarps * kDepth * kSlotChunks;

  // Weights depend on nothing: fill the ring before waiting for the attention.
  Producer prod;
  prod.stages = stages;
  prod.gw = gw;
  prod.W = W;
  prod.enter(p);
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    prod.issue(ring + i * kSlotChunks, lane);
    prod.advance(p);
  }
  pdl_wait();

  int slot = 0;
  for (int s = 0; s < stages; ++s) {
    if (s > 0) grid_barrier(p.barrier);
    load_stage_input(p, s, xs, scratch);
    const Stage st = stage_of(p, s);
    const int kc = st.chunks(), cols = st.cols(), outs = st.outputs(gw, W), groups = st.groups(outs);
    const int per_group = kSlotRows / st.R;
    for (int g = 0; g < groups; ++g) {
      float acc[kSlotRows] = {};
      for (int col = 0; col < cols; ++col) {
        cp_async_wait<kDepth - 1>();  // this slot's group (the oldest) has landed
        const uint4* ws = ring + slot * kSlotChunks;
#pragma unroll
        for (int u = 0; u < kLaneChunks; ++u) {
          const int ch = col * kColChunks + u * 32 + lane;
          if (ch < kc) {
            float xf[8];
            unpack8(ld_shared16(xs + ch), xf);
            // Every chain, also past the group's rows (their slot rows hold stale bytes, their
            // sums are never used): no branches in the loop.
#pragma unroll
            for (int i = 0; i < kSlotRows; ++i) acc[i] = dot8(ld_shared16(ws + (i * kLaneChunks + u) * 32 + lane), xf, acc[i]);
          }
        }
        // The lane read only the chunks it copied: refill the slot with the next weights.
        prod.issue(ring + slot * kSlotChunks, lane);
        prod.advance(p);
        slot = slot + 1 == kDepth ? 0 : slot + 1;
      }
#pragma unroll
      for (int i = 0; i < kSlotRows; ++i) acc[i] = warp_sum(acc[i]);
      if (lane < per_group && g * per_group + lane < outs) {
        // Lane o writes output o of the group: acc[o], or gate acc[0] and up acc[1].
        static_assert(kSlotRows == 2, "the selection below");
        const int n = gw + (g * per_group + lane) * W;
        const float a0 = lane == 0 ? acc[0] : acc[1];
        if (s == 0 || s == 2) __stcg(p.residual + n, __ldcg(p.residual + n) + a0);
        else if (s == 1) static_cast<bf16*>(p.act)[n] = swiglu_out(acc[0], acc[1]);
        else p.tail_out[n] = a0;
      }
    }
  }
  cp_async_wait<0>();
}

constexpr int kDepths[] = {3, 2};

size_t smem_bytes(const DecodeLayerParams& p, int depth) {
  const int64_t x_elems = std::max({p.D, p.Q, p.F});
  return static_cast<size_t>(kWarps) * depth * kSlotChunks * 16 + static_cast<size_t>(x_elems) * 2;
}
int max_smem_optin() {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return v - 1024;  // static shared memory (scratch) and slack
}
// Deepest ring that fits; 0: none.
int choose_depth(const DecodeLayerParams& p) {
  const size_t limit = static_cast<size_t>(max_smem_optin());
  for (int d : kDepths)
    if ((p.depth == 0 || d <= p.depth) && smem_bytes(p, d) <= limit) return d;
  return 0;
}

template <int kDepth>
void launch_depth(const DecodeLayerParams& p, cudaStream_t s) {
  const size_t smem = smem_bytes(p, kDepth);
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(decode_layer_kernel<kDepth>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    max_smem_optin()));
    configured = true;
  }
  // One block an SM at most (the ring takes more than half an SM's shared memory), so a grid of
  // at most num_sms blocks is resident at once once earlier kernels leave.
  const int blocks = p.blocks > 0 ? std::min(p.blocks, p.num_sms) : p.num_sms;
  launch_pdl(decode_layer_kernel<kDepth>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, s, p);
}

}  // namespace

bool decode_layer_supported(const DecodeLayerParams& p) {
  const bool tail_ok = !p.w_tail || (p.n_tail > 0 && p.tail_norm && p.tail_out);
  return p.D > 0 && p.Q > 0 && p.F > 0 && p.D % 8 == 0 && p.Q % 8 == 0 && p.F % 8 == 0 && tail_ok &&
         p.barrier && choose_depth(p) > 0;
}

void decode_layer(const DecodeLayerParams& p, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(decode_layer_supported(p), "decode_layer: shapes or shared memory not supported");
  for (const void* ptr : {p.attn, p.w_o, p.w_gu, p.w_down, p.w_tail, static_cast<const void*>(p.act),
                          static_cast<const void*>(p.residual), static_cast<const void*>(p.tail_out)})
    PAGODA_CUDA_REQUIRE(aligned16(ptr), "decode_layer: operands must be 16-byte aligned");
  switch (choose_depth(p)) {
    case 3: launch_depth<3>(p, s); break;
    default: launch_depth<2>(p, s); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
