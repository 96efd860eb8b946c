// The persistent one-row decode layer (decode_layer in kernels.h): the o projection, the FFN and
// the next layer's QKV (or the lm_head) of batch-1 decode in one kernel.
//
// Why: at batch 1 every matmul is a GEMV bound by its weight bytes, and the chain of short kernels
// (o, gate/up, down, QKV, each waiting for the last) loses 2-3 us at every boundary to ramp-up and
// drain (docs/cuda.md, knock-outs). Here the weight stream does not stop at a boundary: each warp
// owns fixed outputs of every matrix and streams their weight rows, in the order it will use
// them, through a ring of kDepth 4 KiB slots in shared memory. It refills a slot as soon as it has
// used it, so while it waits (for the attention before the first stage, at a grid barrier between
// stages) the next kDepth slots are on their way.
//
// Stages (x is the stage's input vector, in shared memory as bf16, zero-padded to whole slots):
//   0  x = attn                         residual[n] += x . W_o[n]
//   1  x = rms_norm(residual) * ffn_norm act[n] = silu(x . W_gate[n]) * (x . W_up[n])
//   2  x = act                          residual[n] += x . W_down[n]
//   3  x = rms_norm(residual[tail_row]) * tail_norm    tail_out[n] = x . W_tail[n]   (optional)
// A stage reads what the previous one wrote anywhere in the grid, so a grid-wide barrier (an
// atomic counter in global memory) separates them; the grid is one block an SM, all resident at
// once (shared memory allows one a SM), so the barrier cannot deadlock.
//
// Row slots: a slot is 2048 contiguous k-values (4 KiB) of one weight row, so a warp streams whole
// rows, as the GEMV does, one output at a time (SwiGLU: its gate row, then its up row); a block's
// warps take consecutive outputs, the blocks the next ones in turn. The copy is Hopper's bulk copy
// (TMA: one instruction a slot) where the device and the shapes allow it, else cp.async (16 bytes
// a lane, zero-filled past K). The dot products run on tensor cores: the slot's 16-byte chunks
// are dealt round-robin to the m16n8k16 mma's 8 columns (column n of k-step i is chunks 16 i + n,
// k 0-7, and 16 i + 8 + n, k 8-15), so one ldmatrix 8x8 matrix is 8 consecutive chunks (128
// bytes: no bank conflicts, and the slot is a plain copy). Row m < 8 of A holds x at the chunks of
// column m, so C[m][n] = x(column m) . w(column n), and the row's dot product is the sum of the
// diagonal C[n][n] (rows 8-15 of A repeat rows 0-7 and are ignored). A slot is 8 ldmatrix, 16 mma
// and 32 shared loads of x, four accumulator chains. The norms are gemv_bf16's (same 256-thread
// arithmetic); the dot products differ from the GEMV's FMA chains in rounding only (the op test
// bounds the difference).
//
// Status (H200, docs/cuda.md ninth and tenth sessions): correct, but slower than the GEMV chain it
// replaces, so the executor runs it only when asked (PAGODA_LAYER_KERNEL=1). tg128 8B: 219.9 vs
// 239.7 tok/s (0.92), 229.4 even without its grid barriers; the first layout (8 rows x 256 k a
// slot, cp.async into XOR-swizzled slots) reached 204, its TMA and linear-copy variants 194 / 204.
// Deeper rings, bigger slots and L2 prefetch ahead of the ring did not help (the prefetch lost
// 12-34 %).
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/swiglu.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8;  // 256 threads
constexpr int kThreads = kWarps * 32;
constexpr int kSlotK = 2048;              // k-values of a slot (x is zero-padded to a multiple)
constexpr int kSlotChunks = kSlotK / 8;   // 16-byte chunks: 256, 4 KiB

struct Stage {
  const bf16* w;
  int n_out;  // outputs (SwiGLU: F, each from a gate row n and an up row n_out + n)
  int K;
  int R;      // weight rows an output reads: 2 for SwiGLU
  __device__ __forceinline__ int chunks() const { return K / 8; }
  __device__ __forceinline__ int slots() const { return (K + kSlotK - 1) / kSlotK; }
};

__device__ __forceinline__ Stage stage_of(const DecodeLayerParams& p, int s) {
  if (s == 0) return {static_cast<const bf16*>(p.w_o), static_cast<int>(p.D), static_cast<int>(p.Q), 1};
  if (s == 1) return {static_cast<const bf16*>(p.w_gu), static_cast<int>(p.F), static_cast<int>(p.D), 2};
  if (s == 2) return {static_cast<const bf16*>(p.w_down), static_cast<int>(p.D), static_cast<int>(p.F), 1};
  return {static_cast<const bf16*>(p.w_tail), static_cast<int>(p.n_tail), static_cast<int>(p.D), 1};
}

// Outputs of a stage go round-robin over the grid's warps, a block's warps consecutive (output n
// to the warp of rank n mod TW, rank = block * kWarps + warp).
struct WarpRank {
  int rank, total;
  __device__ __forceinline__ int count(int outputs) const {
    return outputs > rank ? (outputs - rank + total - 1) / total : 0;
  }
  __device__ __forceinline__ int output(int j) const { return rank + j * total; }
};

// Hopper's bulk copies (TMA, 1-D) and the shared-memory barriers that count their bytes.
// sm_90 only: the host launches the TMA ring only on compute capability 9.0 and up.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// This thread arrives on the barrier and announces `bytes` of copies that will complete on it.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
// Waits until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}
// bytes (a multiple of 16) from global src to shared dst, completing on bar.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}
// Orders this thread's (and, after a warp barrier, its warp's) earlier shared-memory accesses
// before its later bulk copies into shared memory.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The copy side of a warp's ring: walks the warp's sequence of slots (stage, output, row of the
// output, slot of the row) in the consumer loop's order, kDepth slots ahead of it.
template <bool kTma>
struct Producer {
  int s = 0, j = 0, r = 0, k = 0;  // stage, the warp's output index in the stage, row of the output, slot
  int stages;
  WarpRank wr;
  Stage st{};
  int count = 0, slots = 0, kc = 0;
  const uint4* row = nullptr;

  __device__ __forceinline__ void set_row() {
    row = reinterpret_cast<const uint4*>(st.w + (static_cast<int64_t>(wr.output(j)) + r * st.n_out) * st.K);
  }
  // From stage s on, the first stage where the warp has outputs (s == stages: done).
  __device__ __forceinline__ void enter(const DecodeLayerParams& p) {
    for (; s < stages; ++s) {
      st = stage_of(p, s);
      count = wr.count(st.n_out);
      if (count > 0) {
        slots = st.slots();
        kc = st.chunks();
        j = r = k = 0;
        set_row();
        return;
      }
    }
  }
  __device__ __forceinline__ void advance(const DecodeLayerParams& p) {
    if (s >= stages) return;
    if (++k < slots) return;
    k = 0;
    if (++r < st.R) {
      set_row();
      return;
    }
    r = 0;
    if (++j < count) {
      set_row();
      return;
    }
    ++s;
    enter(p);
  }
  // Starts the copies of the current slot into `slot`.
  // TMA: lane 0 arrives on the slot's barrier with the byte count and copies the slot whole (every
  // K is a multiple of 2048). Past the end, nothing.
  // cp.async: one commit group; lane l copies chunks l, l + 32, ... (each copy instruction of the
  // warp moves 512 contiguous bytes); chunks past K are zero-filled, nothing read. Past the end,
  // an empty group (the wait counts stay uniform).
  __device__ __forceinline__ void issue(uint4* slot, int lane, uint64_t* bar) const {
    if constexpr (kTma) {
      if (lane != 0 || s >= stages) return;
      mbar_arrive_expect_tx(bar, kSlotChunks * 16);
      bulk_copy_to_shared(slot, row + k * kSlotChunks, kSlotChunks * 16, bar);
      return;
    }
    if (s < stages) {
#pragma unroll
      for (int u = 0; u < kSlotChunks / 32; ++u) {
        const int cr = u * 32 + lane, c = k * kSlotChunks + cr;
        const bool valid = c < kc;
        cp_async16(slot + cr, valid ? row + c : row, valid);
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

// The stage's input vector into xs as bf16, zero-padded to whole slots (the padding
// meets zero-filled weights); by the whole block, ends with a barrier. The norms are
// block_rms_norm_row over 256 threads: gemv_bf16's fused norm, bit for bit (the summation order
// does not depend on how many float4 a thread holds in registers).
__device__ __forceinline__ void load_stage_input(const DecodeLayerParams& p, int s, uint4* xs, float* scratch) {
  const int K = static_cast<int>(s == 0 ? p.Q : s == 2 ? p.F : p.D);
  const int padded = (K + kSlotK - 1) / kSlotK * kSlotK;
  for (int i = K / 8 + threadIdx.x; i < padded / 8; i += kThreads) xs[i] = uint4{0, 0, 0, 0};
  if (s == 0 || s == 2) {
    // The attention output (an earlier kernel's) or act (this kernel's, other blocks: read from L2).
    const uint4* src = static_cast<const uint4*>(s == 0 ? p.attn : p.act);
    for (int i = threadIdx.x; i < K / 8; i += kThreads) xs[i] = __ldcg(src + i);
  } else {
    static_assert(kThreads == 256, "the fused norms reduce over gemv_bf16's 256 threads");
    const float* norm_w = s == 1 ? p.ffn_norm : p.tail_norm;
    const int row = s == 3 && p.tail_row ? p.tail_row[0] : 0;
    __nv_bfloat162* xh = reinterpret_cast<__nv_bfloat162*>(xs);
    block_rms_norm_row<8>(reinterpret_cast<const float4*>(p.residual + static_cast<int64_t>(row) * K),
                          reinterpret_cast<const float4*>(norm_w), K / 4, p.eps, scratch,
                          [&](int j, const float4& y) {
                            xh[2 * j] = __floats2bfloat162_rn(y.x, y.y);
                            xh[2 * j + 1] = __floats2bfloat162_rn(y.z, y.w);
                          });
  }
  __syncthreads();
}

template <int kDepth, bool kTma>
__global__ __launch_bounds__(kThreads, 1) void decode_layer_kernel(const __grid_constant__ DecodeLayerParams p) {
  extern __shared__ uint4 smem[];
  __shared__ float scratch[33];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stages = p.w_tail ? 4 : 3;
  const WarpRank wr{static_cast<int>(blockIdx.x) * kWarps + warp, kWarps * static_cast<int>(gridDim.x)};
  uint4* ring = smem + warp * kDepth * kSlotChunks;
  uint4* xs = smem + kWarps * kDepth * kSlotChunks;
  const uint32_t* x32 = reinterpret_cast<const uint32_t*>(xs);
  // TMA: one barrier a slot, after x.
  const int x_chunks = static_cast<int>((std::max({p.D, p.Q, p.F}) + kSlotK - 1) / kSlotK * kSlotChunks);
  uint64_t* bars = reinterpret_cast<uint64_t*>(xs + x_chunks) + warp * kDepth;
  if constexpr (kTma) {
    if (lane == 0) {
      for (int i = 0; i < kDepth; ++i) mbar_init(bars + i, 1);
      fence_proxy_async_shared();  // the initialised barriers visible to the async proxy (complete_tx)
    }
    __syncwarp();
  }

  // Weights depend on nothing: fill the ring before waiting for the attention.
  Producer<kTma> prod;
  prod.stages = stages;
  prod.wr = wr;
  prod.enter(p);
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    prod.issue(ring + i * kSlotChunks, lane, bars + i);
    prod.advance(p);
  }
  pdl_wait();

  const int g = lane >> 2, t = lane & 3;  // mma: A / C row g (and g + 8), k pair / C column pair t
  int slot = 0;
  uint32_t phase = 0;  // TMA: parity of the slots' current barrier phase (flips as the ring wraps)
  for (int s = 0; s < stages; ++s) {
    if (s > 0 && !p.timing_no_barriers) grid_barrier(p.barrier);
    load_stage_input(p, s, xs, scratch);
    const Stage st = stage_of(p, s);
    const int count = wr.count(st.n_out), slots = st.slots();
    for (int j = 0; j < count; ++j) {
      float sum0 = 0.0f, sum1 = 0.0f;  // the output's rows (SwiGLU: gate, up)
      for (int r = 0; r < st.R; ++r) {
        float c[4][4] = {};  // k-step i accumulates into chain i % 4
        for (int k = 0; k < slots; ++k) {
          if constexpr (kTma) {
            mbar_wait(bars + slot, phase);  // the slot's bytes have landed
            __syncwarp();                   // reconverged before the .sync.aligned ldmatrix / mma
          } else {
            cp_async_wait<kDepth - 1>();  // this slot's copies (the oldest group) have landed...
            __syncwarp();                 // ... for every lane: ldmatrix reads other lanes' chunks
          }
          const uint4* ws = ring + slot * kSlotChunks;
          const uint32_t* xk = x32 + k * (kSlotK / 2);
          uint32_t b[8][4], x[8][4];
#pragma unroll
          for (int h = 0; h < 8; ++h) {  // ldmatrix h: k-steps 2h, 2h + 1 = chunks 32 h .. 32 h + 31
            ldmatrix_x4(b[h], ws + 32 * h + lane);
#pragma unroll
            for (int e = 0; e < 4; ++e) x[h][e] = xk[4 * (32 * h + 8 * e + g) + t];
          }
#pragma unroll
          for (int h = 0; h < 8; ++h) {
            const uint32_t a0[4] = {x[h][0], x[h][0], x[h][1], x[h][1]};
            const uint32_t a1[4] = {x[h][2], x[h][2], x[h][3], x[h][3]};
            mma16816(c[(2 * h) & 3], a0, b[h][0], b[h][1], bf16{});
            mma16816(c[(2 * h + 1) & 3], a1, b[h][2], b[h][3], bf16{});
          }
          // Every lane's ldmatrix reads ordered before the async proxy's writes (each lane fences
          // its own reads), then the warp barrier before the slot is refilled.
          if constexpr (kTma) fence_proxy_async_shared();
          __syncwarp();
          prod.issue(ring + slot * kSlotChunks, lane, bars + slot);
          prod.advance(p);
          if (++slot == kDepth) {
            slot = 0;
            phase ^= 1u;
          }
        }
        // The diagonal: C[n][n] is element n % 2 of the thread with g = n, t = n / 2.
        const float v0 = (c[0][0] + c[1][0]) + (c[2][0] + c[3][0]);
        const float v1 = (c[0][1] + c[1][1]) + (c[2][1] + c[3][1]);
        const float d = warp_sum(t == (g >> 1) ? ((g & 1) ? v1 : v0) : 0.0f);
        if (r == 0) sum0 = d;
        else sum1 = d;
      }
      if (lane == 0) {
        const int n = wr.output(j);
        if (st.R == 2) static_cast<bf16*>(p.act)[n] = swiglu_out(sum0, sum1);
        else if (s == 3) p.tail_out[n] = sum0;
        else __stcg(p.residual + n, __ldcg(p.residual + n) + sum0);
      }
    }
  }
  cp_async_wait<0>();
}

// The ring variants: (slots a warp, bulk copies), deepest first per kind.
struct Variant {
  int depth;
  bool tma;
};
constexpr Variant kVariants[] = {{6, true}, {4, true}, {6, false}, {4, false}, {2, false}};

size_t smem_bytes(const DecodeLayerParams& p, const Variant& v) {
  const int64_t x_elems = (std::max({p.D, p.Q, p.F}) + kSlotK - 1) / kSlotK * kSlotK;
  const int64_t bars = v.tma ? int64_t{kWarps} * v.depth * 8 : 0;
  return static_cast<size_t>(int64_t{kWarps} * v.depth * kSlotChunks * 16 + x_elems * 2 + bars);
}
int device_attr(cudaDeviceAttr a) {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev));
  return v;
}
int max_smem_optin() {
  return device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) - 1024;  // static shared memory and slack
}
// Bulk copies need Hopper, and whole slots: every K a multiple of 2048.
bool tma_ok(const DecodeLayerParams& p) {
  return device_attr(cudaDevAttrComputeCapabilityMajor) >= 9 && p.D % kSlotK == 0 && p.Q % kSlotK == 0 &&
         p.F % kSlotK == 0;
}
// The deepest ring of the copy kind (bulk copies where p.bulk_copies and tma_ok, else cp.async)
// that fits, at most p.depth slots when set; depth 0: none.
Variant choose_variant(const DecodeLayerParams& p) {
  const size_t limit = static_cast<size_t>(max_smem_optin());
  const bool tma = p.bulk_copies && tma_ok(p);
  for (const Variant& v : kVariants)
    if (v.tma == tma && (p.depth == 0 || v.depth <= p.depth) && smem_bytes(p, v) <= limit) return v;
  return {0, false};
}

template <int kDepth, bool kTma>
void launch_variant(const DecodeLayerParams& p, cudaStream_t s) {
  const size_t smem = smem_bytes(p, {kDepth, kTma});
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(decode_layer_kernel<kDepth, kTma>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    max_smem_optin()));
    configured = true;
  }
  // One block an SM at most (the ring takes more than half an SM's shared memory), so a grid of
  // at most num_sms blocks is resident at once once earlier kernels leave.
  const int blocks = p.blocks > 0 ? std::min(p.blocks, p.num_sms) : p.num_sms;
  launch_pdl(decode_layer_kernel<kDepth, kTma>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, s, p);
}

// The shapes and operands the kernel takes (bf16 rows of 16-byte chunks, a complete tail).
bool shapes_ok(const DecodeLayerParams& p) {
  const bool tail_ok = !p.w_tail || (p.n_tail > 0 && p.tail_norm && p.tail_out);
  return p.D > 0 && p.Q > 0 && p.F > 0 && p.D % 8 == 0 && p.Q % 8 == 0 && p.F % 8 == 0 && tail_ok && p.barrier;
}

}  // namespace

bool decode_layer_supported(const DecodeLayerParams& p) { return shapes_ok(p) && choose_variant(p).depth > 0; }
bool decode_layer_uses_bulk_copies(const DecodeLayerParams& p) { return choose_variant(p).tma; }

void decode_layer(const DecodeLayerParams& p, cudaStream_t s) {
  const Variant v = choose_variant(p);
  PAGODA_CUDA_REQUIRE(shapes_ok(p) && v.depth > 0, "decode_layer: shapes or shared memory not supported");
  for (const void* ptr : {p.attn, p.w_o, p.w_gu, p.w_down, p.w_tail, static_cast<const void*>(p.act),
                          static_cast<const void*>(p.residual), static_cast<const void*>(p.tail_out)})
    PAGODA_CUDA_REQUIRE(aligned16(ptr), "decode_layer: operands must be 16-byte aligned");
  if (v.tma) {
    if (v.depth == 6) launch_variant<6, true>(p, s);
    else launch_variant<4, true>(p, s);
  } else if (v.depth == 6) {
    launch_variant<6, false>(p, s);
  } else if (v.depth == 4) {
    launch_variant<4, false>(p, s);
  } else {
    launch_variant<2, false>(p, s);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
