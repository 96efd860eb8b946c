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

constexpr int kWarps = 8;  // 256 threads, as gemv_bf16's blocks: the fused norms reduce alike
constexpr int kThreads = kWarps * 32;
// A ring slot holds the same 1 KiB column range of kSlotRows weight rows (64 chunks of 16 bytes a
// row, 2 a lane): the warp runs kSlotRows independent FMA chains, and each input chunk is read
// from shared memory and unpacked once for all of them.
constexpr int kSlotRows = 4;
constexpr int kColChunks = 64;
constexpr int kLaneChunks = kColChunks / 32;
constexpr int kSlotChunks = kSlotRows * kColChunks;  // 4 KiB

struct Stage {
  const bf16* w;
  int n_out;  // outputs (SwiGLU: F, each from a gate row n and an up row n_out + n)
  int K;
  int R;      // weight rows an output reads: 2 for SwiGLU
  // Outputs of warp gw (rows gw, gw + W, ...), output groups of kSlotRows / R, column slots a row.
  __device__ __forceinline__ int outputs(int gw, int W) const { return n_out > gw ? (n_out - gw + W - 1) / W : 0; }
  __device__ __forceinline__ int groups(int gw, int W) const {
    return (outputs(gw, W) * R + kSlotRows - 1) / kSlotRows;
  }
  __device__ __forceinline__ int cols() const { return (K / 8 + kColChunks - 1) / kColChunks; }
  // Weight row of slot row i (0 .. kSlotRows-1) of group g, or -1 past the warp's outputs.
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

// A warp's position in its sequence of weight slots: stage, output group, column slot. The
// producer side walks the same sequence as the consumer loop, kDepth slots ahead.
struct Cursor {
  int s, g, col;
};
__device__ __forceinline__ void settle(Cursor& c, const DecodeLayerParams& p, int stages, int gw, int W) {
  while (c.s < stages && c.g >= stage_of(p, c.s).groups(gw, W)) {
    ++c.s;
    c.g = 0;
  }
}
__device__ __forceinline__ void advance(Cursor& c, const DecodeLayerParams& p, int stages, int gw, int W) {
  if (c.s >= stages) return;
  if (++c.col < stage_of(p, c.s).cols()) return;
  c.col = 0;
  ++c.g;
  settle(c, p, stages, gw, W);
}
// Starts the copy of the cursor's slot of weights into `ring_slot` (the lane's chunks of each
// row) and commits it as one group; past the end, an empty group (the wait counts stay uniform).
__device__ __forceinline__ void issue(const Cursor& c, const DecodeLayerParams& p, int stages, int gw, int W,
                                      uint4* ring_slot, int lane) {
  if (c.s < stages) {
    const Stage st = stage_of(p, c.s);
    const int kc = st.K / 8, outs = st.outputs(gw, W);
#pragma unroll
    for (int i = 0; i < kSlotRows; ++i) {
      const int r = st.row(c.g, i, gw, W, outs);
      if (r < 0) continue;
      const uint4* src = reinterpret_cast<const uint4*>(st.w + static_cast<int64_t>(r) * st.K);
#pragma unroll
      for (int u = 0; u < kLaneChunks; ++u) {
        const int ch = c.col * kColChunks + u * 32 + lane;
        if (ch < kc) cp_async16(ring_slot + (i * kLaneChunks + u) * 32 + lane, src + ch, true);
      }
    }
  }
  cp_async_commit();
}

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
    block_rms_norm_row<8>(reinterpret_cast<const float4*>(p.residual + static_cast<int64_t>(row) * D),
                          reinterpret_cast<const float4*>(norm_w), D / 4, p.eps, scratch,
                          [&](int j, const float4& y) {
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
  Cursor pc{0, 0, 0};
  settle(pc, p, stages, gw, W);
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    issue(pc, p, stages, gw, W, ring + i * kSlotChunks, lane);
    advance(pc, p, stages, gw, W);
  }
  pdl_wait();

  int slot = 0;
  for (int s = 0; s < stages; ++s) {
    if (s > 0) grid_barrier(p.barrier);
    load_stage_input(p, s, xs, scratch);
    const Stage st = stage_of(p, s);
    const int kc = st.K / 8, cols = st.cols(), outs = st.outputs(gw, W), groups = st.groups(gw, W);
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
            // All kSlotRows chains, also past the group's rows (their slot rows hold stale bytes,
            // their sums are never used): no branches in the loop.
#pragma unroll
            for (int i = 0; i < kSlotRows; ++i) acc[i] = dot8(ld_shared16(ws + (i * kLaneChunks + u) * 32 + lane), xf, acc[i]);
          }
        }
        // The lane read only the chunks it copied: refill the slot with the next weights.
        issue(pc, p, stages, gw, W, ring + slot * kSlotChunks, lane);
        advance(pc, p, stages, gw, W);
        slot = slot + 1 == kDepth ? 0 : slot + 1;
      }
#pragma unroll
      for (int i = 0; i < kSlotRows; ++i) acc[i] = warp_sum(acc[i]);
      if (lane < per_group && g * per_group + lane < outs) {
        // Lane o writes output o of the group: acc[o], or gate acc[2o] and up acc[2o + 1].
        static_assert(kSlotRows == 4, "the selection below");
        const int n = gw + (g * per_group + lane) * W;
        float a0, a1 = 0.0f;
        if (st.R == 1) {
          a0 = lane == 0 ? acc[0] : lane == 1 ? acc[1] : lane == 2 ? acc[2] : acc[3];
        } else {
          a0 = lane == 0 ? acc[0] : acc[2];
          a1 = lane == 0 ? acc[1] : acc[3];
        }
        if (s == 0 || s == 2) __stcg(p.residual + n, __ldcg(p.residual + n) + a0);
        else if (s == 1) static_cast<bf16*>(p.act)[n] = swiglu_out(a0, a1);
        else p.tail_out[n] = a0;
      }
    }
  }
  cp_async_wait<0>();
}

constexpr int kDepths[] = {6, 4, 2};

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
    case 6: launch_depth<6>(p, s); break;
    case 4: launch_depth<4>(p, s); break;
    default: launch_depth<2>(p, s); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
