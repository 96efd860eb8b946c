// The persistent one-row decode layer (decode_layer in kernels.h): the o projection, the FFN and
// the next layer's QKV (or the lm_head) of batch-1 decode in one kernel.
//
// Why: at batch 1 every matmul is a GEMV bound by its weight bytes, and the chain of short kernels
// (o, gate/up, down, QKV, each waiting for the last) lost 2-3 us at every boundary to ramp-up and
// drain (docs/cuda.md, knock-outs). Here the weight stream does not stop at a boundary: each warp
// owns fixed groups of 8 weight rows ("octets") of every matrix and streams them, in the order it
// will use them, through a ring of kDepth 4 KiB slots in shared memory (cp.async, 16 bytes a
// lane). It refills a slot as soon as it has used it, so while it waits (for the attention before
// the first stage, at a grid barrier between stages) the next kDepth slots are on their way.
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
// The dot products run on tensor cores: a slot holds 256 k-values of an octet's 8 rows, and each
// m16n8k16 mma takes x (every row of A) times 16 k-values of the 8 rows (B, via ldmatrix), f32
// accumulation. A SIMT version (one FMA chain a row, gemv_bf16's arithmetic) issued ~380
// instructions a 4 KiB slot and could not consume weights as fast as DRAM delivers them (ncu:
// 64 % of DRAM bandwidth with 16 warps an SM); here a slot is 8 ldmatrix, 16 mma and 32 shared
// loads of x. The norms are gemv_bf16's (same 256-thread arithmetic); the dot products differ from
// the GEMV's FMA chains in rounding only (the op test bounds the difference).
//
// Status (H200, docs/cuda.md ninth session): correct, but slower than the GEMV chain it replaces
// (tg128 8B 209.2 vs 240.3 tok/s; 217.8 even without its grid barriers), so the executor runs it
// only when asked (PAGODA_LAYER_KERNEL=1). ncu: 143 us a layer at 64 % of DRAM bandwidth, and
// the L2 served 27.4 M sectors to the SMs for 436 MB of DRAM reads (2.0x; the GEMVs: 1.07x), in
// 2.7 sectors a request (the GEMVs: 4) -- the 16-byte copies into XOR-swizzled destinations reach
// the L2 as partial-line requests, each sector twice. Not yet run: the swizzle on the global side
// (linear shared destinations) and TMA bulk copies of whole slot rows (branch layer-kernel-tma).
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemv_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 8;  // 256 threads
constexpr int kThreads = kWarps * 32;
constexpr int kOctet = 8;                          // weight rows of a slot (the mma's n)
constexpr int kPadK = 512;                         // x is zero-padded to a multiple of this
// Slot geometry: SK k-values of each of the octet's rows (SK / 8 chunks of 16 bytes a row). The
// cp.async ring stores a slot row's chunks XOR-swizzled; the TMA ring (kTma) stores each row as
// one bulk copy, contiguous, and pads the row stride by 16 bytes instead, so the 8 rows of a
// 16-byte column still fall in 8 different bank groups.
template <int SK, bool kTma>
struct Geo {
  static_assert(SK % 256 == 0 && kPadK % SK == 0, "whole ldmatrix columns, padding covers a slot");
  static constexpr int kRowChunks = SK / 8;
  static constexpr int kRowStride = kRowChunks + (kTma ? 1 : 0);  // in 16-byte chunks
  static constexpr int kSlotChunks = kOctet * kRowStride;         // 4 KiB at SK = 256 (cp.async)
  // Where chunk c of slot row r sits in a slot.
  __device__ static __forceinline__ int pos(int r, int c) {
    return kTma ? r * kRowStride + c : r * kRowChunks + (c ^ r);
  }
};

struct Stage {
  const bf16* w;
  int n_out;  // outputs (SwiGLU: F, each from a gate row n and an up row n_out + n)
  int K;
  int R;      // weight rows an output reads: 2 for SwiGLU
  // Octets of the stage (8 / R outputs each), 16-byte chunks of a row, slots of a row.
  __device__ __forceinline__ int octets() const { return (n_out * R + kOctet - 1) / kOctet; }
  __device__ __forceinline__ int chunks() const { return K / 8; }
  __device__ __forceinline__ int slots(int slot_k) const { return (K + slot_k - 1) / slot_k; }
  // Weight row i of octet q: R = 1: output 8q + i; R = 2: gate (i even) or up (i odd) of output
  // 4q + i / 2, so an output's pair lands in one thread's mma accumulators. -1 past the outputs.
  __device__ __forceinline__ int row(int q, int i) const {
    if (R == 1) {
      const int n = q * kOctet + i;
      return n < n_out ? n : -1;
    }
    const int n = q * (kOctet / 2) + (i >> 1);
    return n < n_out ? n + (i & 1) * n_out : -1;
  }
};

__device__ __forceinline__ Stage stage_of(const DecodeLayerParams& p, int s) {
  if (s == 0) return {static_cast<const bf16*>(p.w_o), static_cast<int>(p.D), static_cast<int>(p.Q), 1};
  if (s == 1) return {static_cast<const bf16*>(p.w_gu), static_cast<int>(p.F), static_cast<int>(p.D), 2};
  if (s == 2) return {static_cast<const bf16*>(p.w_down), static_cast<int>(p.D), static_cast<int>(p.F), 1};
  return {static_cast<const bf16*>(p.w_tail), static_cast<int>(p.n_tail), static_cast<int>(p.D), 1};
}

// Octets of a stage go round-robin over the grid's warps, block-major (octet q to the warp of rank
// q mod TW, rank = warp * blocks + block), so a stage with few octets still spreads over every SM.
struct WarpRank {
  int rank, total;
  __device__ __forceinline__ int count(int octets) const { return octets > rank ? (octets - rank + total - 1) / total : 0; }
  __device__ __forceinline__ int octet(int j) const { return rank + j * total; }
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

// The copy side of a warp's ring: walks the warp's sequence of slots (stage, octet, slot of the
// row) in the consumer loop's order, kDepth slots ahead of it, keeping the current stage's
// constants and the current octet's row starts.
template <int SK, bool kTma>
struct Producer {
  using G = Geo<SK, kTma>;
  int s = 0, j = 0, k = 0;  // stage, the warp's octet index in the stage, slot of the row
  int stages;
  WarpRank wr;
  Stage st{};
  int count = 0, slots = 0, kc = 0;
  bool linear = false;  // cp.async: the global-side swizzle (DecodeLayerParams::copy_linear)
  const uint4* rows[kOctet] = {};

  __device__ __forceinline__ void set_octet() {
    const int q = wr.octet(j);
#pragma unroll
    for (int i = 0; i < kOctet; ++i) {
      const int r = st.row(q, i);
      rows[i] = r < 0 ? nullptr : reinterpret_cast<const uint4*>(st.w + static_cast<int64_t>(r) * st.K);
    }
  }
  // From stage s on, the first stage where the warp has octets (s == stages: done).
  __device__ __forceinline__ void enter(const DecodeLayerParams& p) {
    for (; s < stages; ++s) {
      st = stage_of(p, s);
      count = wr.count(st.octets());
      if (count > 0) {
        slots = st.slots(SK);
        kc = st.chunks();
        j = k = 0;
        set_octet();
        return;
      }
    }
  }
  __device__ __forceinline__ void advance(const DecodeLayerParams& p) {
    if (s >= stages) return;
    if (++k < slots) return;
    k = 0;
    if (++j < count) {
      set_octet();
      return;
    }
    ++s;
    enter(p);
  }
  // Starts the copies of the current slot into `slot`.
  // cp.async: one commit group; lane l copies chunk l of each slot row; chunks past K and rows
  // past the outputs are zero-filled (nothing read), so the mma sees zeros there. Past the end,
  // an empty group (the wait counts stay uniform).
  // TMA: lane 0 arrives on the slot's barrier with the byte count and copies each row of the
  // octet whole (K is a multiple of SK: whole slot rows); rows past the outputs keep stale bytes,
  // which reach only their own mma columns. Past the end, nothing.
  __device__ __forceinline__ void issue(uint4* slot, int lane, uint64_t* bar) const {
    if constexpr (kTma) {
      if (lane != 0 || s >= stages) return;
      uint32_t bytes = 0;
#pragma unroll
      for (int i = 0; i < kOctet; ++i)
        if (rows[i]) bytes += SK * 2;
      mbar_arrive_expect_tx(bar, bytes);
#pragma unroll
      for (int i = 0; i < kOctet; ++i)
        if (rows[i]) bulk_copy_to_shared(slot + G::pos(i, 0), rows[i] + k * G::kRowChunks, SK * 2, bar);
      return;
    }
    if (s < stages) {
#pragma unroll
      for (int i = 0; i < kOctet; ++i)
#pragma unroll
        for (int u = 0; u < G::kRowChunks / 32; ++u) {
          // linear: the swizzle on the global side, so that a warp's 16-byte destinations are
          // consecutive (lane l fetches chunk l ^ i into position l); the same slot layout.
          const int cr = u * 32 + lane, c = k * G::kRowChunks + (linear ? cr ^ i : cr);
          const bool valid = rows[i] && c < kc;
          cp_async16(slot + (linear ? i * G::kRowChunks + cr : G::pos(i, cr)), valid ? rows[i] + c : rows[0], valid);
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

// The stage's input vector into xs as bf16, zero-padded to a whole number of slots (the padding
// meets zero-filled weights); by the whole block, ends with a barrier. The norms are
// block_rms_norm_row<8> over 256 threads: gemv_bf16's fused norm, bit for bit.
__device__ __forceinline__ void load_stage_input(const DecodeLayerParams& p, int s, uint4* xs, float* scratch,
                                                 int pad) {
  const int K = static_cast<int>(s == 0 ? p.Q : s == 2 ? p.F : p.D);
  const int padded = (K + pad - 1) / pad * pad;
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

template <int SK, int kDepth, bool kTma>
__global__ __launch_bounds__(kThreads, 1) void decode_layer_kernel(const __grid_constant__ DecodeLayerParams p) {
  using G = Geo<SK, kTma>;
  constexpr int kSlotChunks = G::kSlotChunks, kRowChunks = G::kRowChunks;
  extern __shared__ uint4 smem[];
  __shared__ float scratch[33];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stages = p.w_tail ? 4 : 3;
  const WarpRank wr{warp * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x),
                    kWarps * static_cast<int>(gridDim.x)};
  uint4* ring = smem + warp * kDepth * kSlotChunks;
  uint4* xs = smem + kWarps * kDepth * kSlotChunks;
  const uint32_t* x32 = reinterpret_cast<const uint32_t*>(xs);
  // TMA ring: one barrier a slot, after x (x_elems of p rounded to kPadK).
  const int x_chunks = static_cast<int>((std::max({p.D, p.Q, p.F}) + kPadK - 1) / kPadK * kPadK / 8);
  uint64_t* bars = reinterpret_cast<uint64_t*>(xs + x_chunks) + warp * kDepth;
  if constexpr (kTma) {
    if (lane == 0) {
      for (int i = 0; i < kDepth; ++i) mbar_init(bars + i, 1);
      fence_proxy_async_shared();  // the initialised barriers visible to the async proxy (complete_tx)
    }
    __syncwarp();
  }

  // Weights depend on nothing: fill the ring before waiting for the attention.
  Producer<SK, kTma> prod;
  prod.stages = stages;
  prod.wr = wr;
  prod.linear = p.copy_linear;
  prod.enter(p);
#pragma unroll
  for (int i = 0; i < kDepth; ++i) {
    prod.issue(ring + i * kSlotChunks, lane, bars + i);
    prod.advance(p);
  }
  pdl_wait();

  // ldmatrix: lane L gives the address of row L % 8 of 8x8 matrix L / 8; matrices 0-3 are the
  // 16-byte columns 4h .. 4h + 3 of the slot (k-steps 2h and 2h + 1).
  const int lm_row = lane & 7, lm_mat = lane >> 3;
  const int t = lane & 3;  // mma: this thread's k pair within a k-step (and its C column pair)
  int slot = 0;
  uint32_t phase = 0;  // TMA: parity of the slots' current barrier phase (flips as the ring wraps)
  for (int s = 0; s < stages; ++s) {
    if (s > 0 && !p.timing_no_barriers) grid_barrier(p.barrier);
    load_stage_input(p, s, xs, scratch, kPadK);
    const Stage st = stage_of(p, s);
    const int count = wr.count(st.octets()), slots = st.slots(SK);
    for (int j = 0; j < count; ++j) {
      // Four accumulator chains (k-step i goes to chain i % 4, whatever the slot size): the
      // mmas of one chain wait for each other, four chains overlap.
      float c[4][4] = {};
      for (int k = 0; k < slots; ++k) {
        if constexpr (kTma) {
          mbar_wait(bars + slot, phase);  // the slot's bytes have landed
          __syncwarp();                   // reconverged before the .sync.aligned ldmatrix / mma
        } else {
          cp_async_wait<kDepth - 1>();  // this slot's copies (the oldest group) have landed...
          __syncwarp();                 // ... for every lane: ldmatrix reads other lanes' chunks
        }
        const uint4* ws = ring + slot * kSlotChunks;
        const uint32_t* xk = x32 + k * (SK / 2);
        constexpr int kBatch = 8;  // ldmatrix (2 k-steps each) issued together before their mmas
#pragma unroll
        for (int h0 = 0; h0 < kRowChunks / 4; h0 += kBatch) {
          uint32_t b[kBatch][4], x[kBatch][4];
#pragma unroll
          for (int h = 0; h < kBatch; ++h) {
            ldmatrix_x4(b[h], ws + G::pos(lm_row, 4 * (h0 + h) + lm_mat));
#pragma unroll
            for (int e = 0; e < 4; ++e) x[h][e] = xk[16 * (h0 + h) + 4 * e + t];  // k-steps 2h, 2h + 1
          }
#pragma unroll
          for (int h = 0; h < kBatch; ++h) {
            const uint32_t a0[4] = {x[h][0], x[h][0], x[h][1], x[h][1]};
            const uint32_t a1[4] = {x[h][2], x[h][2], x[h][3], x[h][3]};
            mma16816(c[(2 * h) & 3], a0, b[h][0], b[h][1], bf16{});
            mma16816(c[(2 * h + 1) & 3], a1, b[h][2], b[h][3], bf16{});
          }
        }
        // Every lane's ldmatrix reads ordered before the async proxy's writes (each lane fences
        // its own reads), then the warp barrier before lane 0 refills the slot.
        if constexpr (kTma) fence_proxy_async_shared();
        __syncwarp();
        prod.issue(ring + slot * kSlotChunks, lane, bars + slot);
        prod.advance(p);
        if (++slot == kDepth) {
          slot = 0;
          phase ^= 1u;
        }
      }
      // Every row of A is x, so each C row holds the octet's 8 sums; lanes 0-3 (C row 0) write
      // them: lane t has rows 2t and 2t + 1 in sum[0], sum[1].
      float sum[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) sum[e] = (c[0][e] + c[1][e]) + (c[2][e] + c[3][e]);
      if (lane < 4) {
        const int q = wr.octet(j);
        if (st.R == 2) {
          const int n = q * (kOctet / 2) + lane;
          if (n < st.n_out) static_cast<bf16*>(p.act)[n] = swiglu_out(sum[0], sum[1]);
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int n = q * kOctet + 2 * lane + e;
            if (n >= st.n_out) continue;
            if (s == 3) p.tail_out[n] = sum[e];
            else __stcg(p.residual + n, __ldcg(p.residual + n) + sum[e]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
}

// ---- Row slots (DecodeLayerParams::row_slots) ----
// A slot is RK contiguous k-values (2048: 4 KiB) of one weight row, so a warp streams whole rows
// as the GEMV does: one output at a time (SwiGLU: its gate row, then its up row), outputs dealt to
// the grid's warps round-robin. Each 2048 k-values of a slot (a "batch", 256 chunks of 16 bytes)
// are dealt round-robin to the mma's 8 columns: column n of the batch's k-step i is chunks
// 16 i + n (k 0-7) and 16 i + 8 + n (k 8-15), so one ldmatrix 8x8 matrix is 8 consecutive chunks
// (128 bytes, no bank conflicts, no swizzle: the slot is a plain copy, one bulk copy with TMA).
// Row m < 8 of A holds x at the chunks of column m, so C[m][n] = x(column m) . w(column n), and
// the row's dot product is the sum of the diagonal C[n][n] (rows 8-15 of A repeat rows 0-7 and
// are ignored). The same mma count a weight byte as the octets.
constexpr int kRowBatchK = 2048;
constexpr int kRowBatchChunks = kRowBatchK / 8;  // 256

template <int RK, bool kTma>
struct RowProducer {
  static constexpr int kSlotChunks = RK / 8;
  int s = 0, j = 0, r = 0, k = 0;  // stage, the warp's output index in the stage, row of the output, slot
  int stages;
  WarpRank wr;
  Stage st{};
  int count = 0, slots = 0, kc = 0;
  const uint4* row = nullptr;

  __device__ __forceinline__ void set_row() {
    row = reinterpret_cast<const uint4*>(st.w + (static_cast<int64_t>(wr.octet(j)) + r * st.n_out) * st.K);
  }
  __device__ __forceinline__ void enter(const DecodeLayerParams& p) {
    for (; s < stages; ++s) {
      st = stage_of(p, s);
      count = wr.count(st.n_out);
      if (count > 0) {
        slots = (st.K + RK - 1) / RK;
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
  // cp.async: one commit group, lane l copies chunks l, l + 32, ...: each copy instruction of the
  // warp moves 512 contiguous bytes; chunks past K are zero-filled. TMA: lane 0 copies the slot's
  // chunks up to K (K a multiple of 2048: whole batches). Past the end: an empty group / nothing.
  __device__ __forceinline__ void issue(uint4* slot, int lane, uint64_t* bar) const {
    if constexpr (kTma) {
      if (lane != 0 || s >= stages) return;
      const uint32_t bytes = static_cast<uint32_t>(min(kSlotChunks, kc - k * kSlotChunks)) * 16;
      mbar_arrive_expect_tx(bar, bytes);
      bulk_copy_to_shared(slot, row + k * kSlotChunks, bytes, bar);
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

template <int RK, int kDepth, bool kTma>
__global__ __launch_bounds__(kThreads, 1) void decode_layer_rows_kernel(const __grid_constant__ DecodeLayerParams p) {
  static_assert(RK % kRowBatchK == 0, "whole batches a slot");
  constexpr int kSlotChunks = RK / 8;
  extern __shared__ uint4 smem[];
  __shared__ float scratch[33];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int stages = p.w_tail ? 4 : 3;
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const WarpRank wr{p.rank_block_contiguous ? block * kWarps + warp : warp * blocks + block, kWarps * blocks};
  uint4* ring = smem + warp * kDepth * kSlotChunks;
  uint4* xs = smem + kWarps * kDepth * kSlotChunks;
  const uint32_t* x32 = reinterpret_cast<const uint32_t*>(xs);
  const int x_chunks = static_cast<int>((std::max({p.D, p.Q, p.F}) + RK - 1) / RK * RK / 8);
  uint64_t* bars = reinterpret_cast<uint64_t*>(xs + x_chunks) + warp * kDepth;
  if constexpr (kTma) {
    if (lane == 0) {
      for (int i = 0; i < kDepth; ++i) mbar_init(bars + i, 1);
      fence_proxy_async_shared();
    }
    __syncwarp();
  }

  RowProducer<RK, kTma> prod;
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
  uint32_t phase = 0;
  for (int s = 0; s < stages; ++s) {
    if (s > 0 && !p.timing_no_barriers) grid_barrier(p.barrier);
    load_stage_input(p, s, xs, scratch, RK);
    const Stage st = stage_of(p, s);
    const int count = wr.count(st.n_out), slots = (st.K + RK - 1) / RK;
    for (int j = 0; j < count; ++j) {
      float sum0 = 0.0f, sum1 = 0.0f;  // the output's rows (SwiGLU: gate, up)
      for (int r = 0; r < st.R; ++r) {
        float c[4][4] = {};  // k-step i of a batch accumulates into chain i % 4
        for (int k = 0; k < slots; ++k) {
          if constexpr (kTma) {
            mbar_wait(bars + slot, phase);
            __syncwarp();
          } else {
            cp_async_wait<kDepth - 1>();
            __syncwarp();
          }
          // The slot's batches that hold k-values below K (the rest is zeros or stale).
          const int batches = min(RK / kRowBatchK, (st.K - k * RK + kRowBatchK - 1) / kRowBatchK);
          for (int bt = 0; bt < batches; ++bt) {
            const uint4* ws = ring + slot * kSlotChunks + bt * kRowBatchChunks;
            const uint32_t* xk = x32 + k * (RK / 2) + bt * (kRowBatchK / 2);
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
          }
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
        const int n = wr.octet(j);
        if (st.R == 2) static_cast<bf16*>(p.act)[n] = swiglu_out(sum0, sum1);
        else if (s == 3) p.tail_out[n] = sum0;
        else __stcg(p.residual + n, __ldcg(p.residual + n) + sum0);
      }
    }
  }
  cp_async_wait<0>();
}

// The ring variants: (k-values a slot row, slots a warp, bulk copies), deepest first per kind.
// Row slots: slot_k 2048 or 4096, rows true.
struct Variant {
  int slot_k, depth;
  bool tma, rows;
};
constexpr Variant kVariants[] = {{256, 6, false, false},  {256, 4, false, false},  {256, 2, false, false},
                                 {512, 3, false, false},  {512, 2, false, false},  {256, 5, true, false},
                                 {2048, 6, false, true},  {2048, 4, false, true},  {2048, 2, false, true},
                                 {2048, 6, true, true},   {2048, 4, true, true},   {4096, 3, false, true},
                                 {4096, 3, true, true}};

size_t smem_bytes(const DecodeLayerParams& p, const Variant& v) {
  const int64_t k_max = std::max({p.D, p.Q, p.F});
  const int64_t pad = v.rows ? v.slot_k : kPadK;
  const int64_t x_elems = (k_max + pad - 1) / pad * pad;
  const int64_t slot_bytes = v.rows ? v.slot_k * 2 : kOctet * (v.slot_k * 2 + (v.tma ? 16 : 0));
  const int64_t bars = v.tma ? int64_t{kWarps} * v.depth * 8 : 0;
  return static_cast<size_t>(int64_t{kWarps} * v.depth * slot_bytes + x_elems * 2 + bars);
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
// Bulk copies need Hopper, and whole slots: every K a multiple of 256 (octets) or 2048 (rows).
bool tma_ok(const DecodeLayerParams& p) {
  const int64_t whole = p.row_slots ? kRowBatchK : 256;
  return device_attr(cudaDevAttrComputeCapabilityMajor) >= 9 && p.D % whole == 0 && p.Q % whole == 0 &&
         p.F % whole == 0;
}
// The deepest ring of the asked kind (p.tma when tma_ok, else cp.async with p.slot_k, 0: 256)
// that fits, at most p.depth slots when set; depth 0: none.
Variant choose_variant(const DecodeLayerParams& p) {
  const size_t limit = static_cast<size_t>(max_smem_optin());
  const bool tma = p.tma && tma_ok(p);
  const int slot_k = p.row_slots ? (p.slot_k == 4096 ? 4096 : kRowBatchK) : tma ? 256 : p.slot_k > 0 ? p.slot_k : 256;
  for (const Variant& v : kVariants)
    if (v.rows == p.row_slots && v.tma == tma && v.slot_k == slot_k && (p.depth == 0 || v.depth <= p.depth) &&
        smem_bytes(p, v) <= limit)
      return v;
  return {0, 0, false, false};
}

template <int SK, int kDepth, bool kTma, bool kRows>
void launch_variant(const DecodeLayerParams& p, cudaStream_t s) {
  const size_t smem = smem_bytes(p, {SK, kDepth, kTma, kRows});
  constexpr auto kernel = [] {
    if constexpr (kRows) return decode_layer_rows_kernel<SK, kDepth, kTma>;
    else return decode_layer_kernel<SK, kDepth, kTma>;
  }();
  static bool configured = false;
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_optin()));
    configured = true;
  }
  // One block an SM at most (the ring takes more than half an SM's shared memory), so a grid of
  // at most num_sms blocks is resident at once once earlier kernels leave.
  const int blocks = p.blocks > 0 ? std::min(p.blocks, p.num_sms) : p.num_sms;
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, s, p);
}

}  // namespace

namespace {
// The shapes and operands the kernel takes (bf16 rows of 16-byte chunks, a complete tail).
bool shapes_ok(const DecodeLayerParams& p) {
  const bool tail_ok = !p.w_tail || (p.n_tail > 0 && p.tail_norm && p.tail_out);
  return p.D > 0 && p.Q > 0 && p.F > 0 && p.D % 8 == 0 && p.Q % 8 == 0 && p.F % 8 == 0 && tail_ok && p.barrier;
}
}  // namespace

bool decode_layer_supported(const DecodeLayerParams& p) { return shapes_ok(p) && choose_variant(p).depth > 0; }
bool decode_layer_uses_tma(const DecodeLayerParams& p) { return choose_variant(p).tma; }

void decode_layer(const DecodeLayerParams& p, cudaStream_t s) {
  const Variant v = choose_variant(p);
  PAGODA_CUDA_REQUIRE(shapes_ok(p) && v.depth > 0, "decode_layer: shapes or shared memory not supported");
  for (const void* ptr : {p.attn, p.w_o, p.w_gu, p.w_down, p.w_tail, static_cast<const void*>(p.act),
                          static_cast<const void*>(p.residual), static_cast<const void*>(p.tail_out)})
    PAGODA_CUDA_REQUIRE(aligned16(ptr), "decode_layer: operands must be 16-byte aligned");
  if (v.rows && v.slot_k == 4096) {
    if (v.tma) launch_variant<4096, 3, true, true>(p, s);
    else launch_variant<4096, 3, false, true>(p, s);
  } else if (v.rows) {
    if (v.tma) {
      if (v.depth == 6) launch_variant<kRowBatchK, 6, true, true>(p, s);
      else launch_variant<kRowBatchK, 4, true, true>(p, s);
    } else if (v.depth == 6) {
      launch_variant<kRowBatchK, 6, false, true>(p, s);
    } else if (v.depth == 4) {
      launch_variant<kRowBatchK, 4, false, true>(p, s);
    } else {
      launch_variant<kRowBatchK, 2, false, true>(p, s);
    }
  } else if (v.tma) {
    launch_variant<256, 5, true, false>(p, s);
  } else if (v.slot_k == 512) {
    if (v.depth == 3) launch_variant<512, 3, false, false>(p, s);
    else launch_variant<512, 2, false, false>(p, s);
  } else if (v.depth == 6) {
    launch_variant<256, 6, false, false>(p, s);
  } else if (v.depth == 4) {
    launch_variant<256, 4, false, false>(p, s);
  } else {
    launch_variant<256, 2, false, false>(p, s);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
