// Split-KV attention for one query row at a time (flash-decoding): decode steps, and every row in
// the generic path (f32 compute, head dims without a tensor-core kernel, batch-invariant mode).
//
// Grid (row, kv head x head chunk, split). A block owns one query row, one KV head and up to
// kMaxG of the query heads that share it (GQA: the KV tile is read once for all of them), and a
// contiguous range of keys. The number of splits depends on the row's key count only (so a row's
// arithmetic is the same in any batch), ~256 keys per split up to 32 splits: long contexts fill
// the GPU even at batch 1, and a split is long enough to amortise its merge at batch 256. A block
// handles splits blockIdx.z, + gridDim.z, ..., each with the same arithmetic whatever the grid.
// Warps and splits are merged in a fixed order; the last block of a row to finish (an atomic
// count) combines the splits, so decode is one kernel.
//
// Two kernels share that outline:
// - row_attention_pipe_kernel, f16 / bf16 caches at head_dim 64 and 128 (decode of the real
//   models): 4 warps stream the split's K and V through a 4-stage shared-memory ring with 16-byte
//   cp.async copies (a stage is 8 KiB of K and 8 KiB of V: 32 keys at D = 128, 64 at D = 64),
//   three tiles in flight while one computes, so loads never wait for arithmetic. Each thread
//   copies a fixed 16-byte chunk of 4 rows a stage, the rows' pages looked up in the block table
//   a tile ahead (any block size). Compute reads the stage with the lane mapping below (LPK = D / 8
//   lanes per key, 8 dims a lane, all kMaxG heads from each K / V row). Rows past the split's end
//   are zero-filled and their scores masked. 64 KiB of dynamic shared memory and <= 168 registers
//   give 3 blocks (12 warps, 144 KiB in flight) an SM on sm_90. The ring is reused for the warp
//   merge at the end of a split.
// - row_attention_kernel, everything else (f32 caches, other head dims, strided up to 256; and 16-bit
//   caches when RowAttentionParams::legacy_kernel asks, for comparison): each warp loads KPW keys at
//   a time straight into registers, LPK lanes per key, every lane NV dims of the head.
// Both: scores are a dot product and an LPK-lane shuffle reduction, softmax is online (exp2 with
// log2(e) folded into q), P.V accumulates in registers.
#include <cmath>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace pagoda::cuda {
namespace {

constexpr int kMaxG = 4;          // query heads per block
constexpr int kMaxHeadDim = 256;
constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ int device_num_splits(int keys) {
  if (keys <= 0) return 0;
  const int s = (keys + kRowSplitKeys - 1) / kRowSplitKeys;
  return s < kRowMaxSplits ? s : kRowMaxSplits;
}

// One K or V row slice of this lane: dims d_i = gl * NV + i (contiguous) or gl + LPK * i (strided).
template <class KVT, int NV, int LPK, bool STRIDED>
__device__ __forceinline__ void load_row(const KVT* row, int gl, int D, bool valid, float (&out)[NV]) {
  if constexpr (STRIDED) {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int d = gl + LPK * i;
      out[i] = (valid && d < D) ? to_f32(row[d]) : 0.0f;
    }
  } else {
    if (valid) {
      load_vec<KVT, NV>(row + gl * NV, out);
    } else {
#pragma unroll
      for (int i = 0; i < NV; ++i) out[i] = 0.0f;
    }
  }
}

// Eight 16-bit values (bf16 or f16) packed in a uint4, as floats.
template <class KVT>
__device__ __forceinline__ void unpack8(const uint4& u, float (&out)[8]) {
  const KVT* e = reinterpret_cast<const KVT*>(&u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

// The warps' partial results (m, l and unnormalised o per warp and head, in shared memory) merged
// in warp order into the split's result: the output itself when the row has one split, else the
// split's slot of the workspace.
template <int WARPS>
__device__ __forceinline__ void store_split(const RowAttentionParams& p, const float* o_s, int o_ld, const float* ml_s,
                                            int r, int h0, int nh, int ns, int split, int64_t tok) {
  const int D = static_cast<int>(p.cache.head_dim);
  const int H = static_cast<int>(p.num_heads);
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, ml_s[(w * kMaxG + h) * 2]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const float mw = ml_s[(w * kMaxG + h) * 2];
        const float f = mw == -INFINITY ? 0.0f : exp2f(mw - M);
        L += ml_s[(w * kMaxG + h) * 2 + 1] * f;
        O += o_s[(w * kMaxG + h) * o_ld + d] * f;
      }
    }
    const float val = L > 0.0f ? O / L : 0.0f;
    if (ns == 1) {
      store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0 + h) * D + d, val);
    } else {
      const int64_t pi = (static_cast<int64_t>(r) * H + h0 + h) * kRowMaxSplits + split;
      p.part_o[pi * D + d] = val;
      if (d == 0) {
        p.part_ml[pi * 2] = M;
        p.part_ml[pi * 2 + 1] = L;
      }
    }
  }
}

// After a block's `done` splits of a row with ns > 1 splits: the block that completes the row's
// last split (an atomic count per row and head chunk) combines all of them in split order.
__device__ __forceinline__ void combine_splits(const RowAttentionParams& p, int r, int h0, int nh, int ns, int64_t tok,
                                               int done, int* last_block) {
  const int D = static_cast<int>(p.cache.head_dim);
  const int H = static_cast<int>(p.num_heads);
  __threadfence();
  __syncthreads();
  const int64_t counter = static_cast<int64_t>(r) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) *last_block = atomicAdd(&p.counters[counter], done) + done == ns;
  __syncthreads();
  if (!*last_block) return;
  __threadfence();
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t pbase = (static_cast<int64_t>(r) * H + h0 + h) * kRowMaxSplits;
    float M = -INFINITY;
    for (int s = 0; s < ns; ++s) M = fmaxf(M, __ldcg(p.part_ml + (pbase + s) * 2));
    float L = 0.0f, O = 0.0f;
    for (int s = 0; s < ns; ++s) {
      const float ms = __ldcg(p.part_ml + (pbase + s) * 2);
      const float w = ms == -INFINITY ? 0.0f : __ldcg(p.part_ml + (pbase + s) * 2 + 1) * exp2f(ms - M);
      L += w;
      O += w * __ldcg(p.part_o + (pbase + s) * D + d);
    }
    store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0 + h) * D + d, L > 0.0f ? O / L : 0.0f);
  }
  if (threadIdx.x == 0) p.counters[counter] = 0;  // ready for the next launch
}

template <class KVT, int LPK, int NV, int U, bool STRIDED>
__global__ __launch_bounds__(kWarps * 32, (!STRIDED && NV == 8 && sizeof(KVT) == 2) ? 4 : 1) void row_attention_kernel(RowAttentionParams p) {
  constexpr bool kRaw = !STRIDED && NV == 8 && sizeof(KVT) == 2;
  constexpr int KPW = 32 / LPK;  // keys a warp works on at once, U times per iteration
  constexpr int STEP = KPW * U;
  __shared__ float q_s[kMaxG][kMaxHeadDim];
  __shared__ float o_s[kWarps][kMaxG][kMaxHeadDim];
  __shared__ float ml_s[kWarps][kMaxG][2];
  __shared__ int last_block;
  pdl_trigger();
  pdl_wait();

  const int r = blockIdx.x;
  const int D = static_cast<int>(p.cache.head_dim);
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  const int H = static_cast<int>(p.num_heads);
  const int G = H / KVH;
  const int chunks = (G + kMaxG - 1) / kMaxG;
  const int kvh = blockIdx.y / chunks;
  const int hc = blockIdx.y - kvh * chunks;
  const int h0 = kvh * G + hc * kMaxG;
  const int nh = min(kMaxG, G - hc * kMaxG);
  const int ctx = p.row_ctx[r];
  const int lo = p.window > 0 ? max(0, ctx - static_cast<int>(p.window)) : 0;
  const int keys = ctx - lo;
  const int ns = device_num_splits(keys);
  const int64_t tok = p.row_token[r];
  if (ns == 0) {  // padding row: defined output
    if (blockIdx.z == 0)
      for (int i = threadIdx.x; i < nh * D; i += blockDim.x)
        store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0) * D + i, 0.0f);
    return;
  }
  if (static_cast<int>(blockIdx.z) >= ns) return;
  const int per = (keys + ns - 1) / ns;

  const float qscale = p.scale * kLog2e;
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    q_s[h][d] = p.q[tok * p.q_stride + static_cast<int64_t>(h0 + h) * D + d] * qscale;
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane / LPK, gl = lane - grp * LPK;
  float qr[kMaxG][NV];
#pragma unroll
  for (int h = 0; h < kMaxG; ++h)
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int d = STRIDED ? gl + LPK * i : gl * NV + i;
      qr[h][i] = (h < nh && d < D) ? q_s[h][d] : 0.0f;
    }
  const int32_t* table = p.block_tables + static_cast<int64_t>(p.row_seq[r]) * p.bt_stride;
  const int bs = static_cast<int>(p.cache.block_size);
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);
  // Splits blockIdx.z, + gridDim.z, ...: each split's arithmetic is the same whatever the grid.
  int done = 0;
  for (int split = blockIdx.z; split < ns; split += gridDim.z) {
  ++done;
  const int ks = lo + split * per;
  const int ke = min(ctx, ks + per);
  float m[kMaxG], l[kMaxG], o[kMaxG][NV];
#pragma unroll
  for (int h = 0; h < kMaxG; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) o[h][i] = 0.0f;
  }

  for (int base = ks + warp * STEP; base < ke; base += kWarps * STEP) {
    if constexpr (kRaw) {
      // 16-bit cache, 8 dims a lane: K and V rows stay packed (one 16-byte load each, issued
      // together before any arithmetic), unpacked at use.
      uint4 kr[U], vr[U];
      float sc[U][kMaxG];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int key = base + u * KPW + grp;
        kr[u] = vr[u] = uint4{0, 0, 0, 0};
        if (key < ke) {
          const int page = table[key / bs];
          const int64_t off = ((static_cast<int64_t>(page) * KVH + kvh) * bs + key % bs) * D + gl * NV;
          kr[u] = *reinterpret_cast<const uint4*>(kc + off);
          vr[u] = *reinterpret_cast<const uint4*>(vc + off);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[NV];
        unpack8<KVT>(kr[u], kf);
        const bool valid = base + u * KPW + grp < ke;
#pragma unroll
        for (int h = 0; h < kMaxG; ++h) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < NV; ++i) s = fmaf(qr[h][i], kf[i], s);
#pragma unroll
          for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
          sc[u][h] = valid ? s : -INFINITY;
        }
      }
      // Online softmax; sc becomes the probabilities (0 while a lane group has no valid key).
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
        float mx = sc[0][h];
#pragma unroll
        for (int u = 1; u < U; ++u) mx = fmaxf(mx, sc[u][h]);
        const float mn = fmaxf(m[h], mx);
        const bool any = mn != -INFINITY;
        const float a = any ? exp2f(m[h] - mn) : 1.0f;
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          sc[u][h] = any ? exp2f(sc[u][h] - mn) : 0.0f;
          sum += sc[u][h];
        }
        l[h] = l[h] * a + sum;
        m[h] = mn;
#pragma unroll
        for (int i = 0; i < NV; ++i) o[h][i] *= a;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float vf[NV];
        unpack8<KVT>(vr[u], vf);
#pragma unroll
        for (int h = 0; h < kMaxG; ++h)
#pragma unroll
          for (int i = 0; i < NV; ++i) o[h][i] = fmaf(sc[u][h], vf[i], o[h][i]);
      }
    } else {
    float kv[U][NV];
    float sc[U][kMaxG];
    int64_t off[U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = base + u * KPW + grp;
      valid[u] = key < ke;
      off[u] = 0;
      if (valid[u]) {
        const int page = table[key / bs];
        off[u] = ((static_cast<int64_t>(page) * KVH + kvh) * bs + key % bs) * D;
      }
      load_row<KVT, NV, LPK, STRIDED>(kc + off[u], gl, D, valid[u], kv[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; ++i) s = fmaf(qr[h][i], kv[u][i], s);
#pragma unroll
        for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
        sc[u][h] = valid[u] ? s : -INFINITY;
      }
#pragma unroll
    for (int u = 0; u < U; ++u) load_row<KVT, NV, LPK, STRIDED>(vc + off[u], gl, D, valid[u], kv[u]);
#pragma unroll
    for (int h = 0; h < kMaxG; ++h) {
      float mx = sc[0][h];
#pragma unroll
      for (int u = 1; u < U; ++u) mx = fmaxf(mx, sc[u][h]);
      const float mn = fmaxf(m[h], mx);
      if (mn == -INFINITY) continue;  // no valid key in this lane group yet
      const float a = exp2f(m[h] - mn);
      float ps[U];
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        ps[u] = exp2f(sc[u][h] - mn);
        sum += ps[u];
      }
      l[h] = l[h] * a + sum;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        float acc = o[h][i] * a;
#pragma unroll
        for (int u = 0; u < U; ++u) acc = fmaf(ps[u], kv[u][i], acc);
        o[h][i] = acc;
      }
      m[h] = mn;
    }
    }
  }

  // Merge the KPW lane groups of the warp (lanes with the same gl hold the same dims).
#pragma unroll
  for (int x = LPK; x < 32; x <<= 1) {
#pragma unroll
    for (int h = 0; h < kMaxG; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], x);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[h], x);
      const float mn = fmaxf(m[h], mo);
      const float a = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mn);
      const float b = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[h] = l[h] * a + lo2 * b;
#pragma unroll
      for (int i = 0; i < NV; ++i) o[h][i] = o[h][i] * a + __shfl_xor_sync(0xffffffffu, o[h][i], x) * b;
      m[h] = mn;
    }
  }
  if (grp == 0) {
#pragma unroll
    for (int h = 0; h < kMaxG; ++h) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int d = STRIDED ? gl + LPK * i : gl * NV + i;
        if (d < D) o_s[warp][h][d] = o[h][i];
      }
      if (gl == 0) {
        ml_s[warp][h][0] = m[h];
        ml_s[warp][h][1] = l[h];
      }
    }
  }
  __syncthreads();
  store_split<kWarps>(p, &o_s[0][0][0], kMaxHeadDim, &ml_s[0][0][0], r, h0, nh, ns, split, tok);
  __syncthreads();  // o_s / ml_s are rewritten by the next split
  }  // split
  if (ns > 1) combine_splits(p, r, h0, nh, ns, tok, done, &last_block);
}

// ---- Pipelined kernel: f16 / bf16 cache, head_dim 64 or 128 ------------------------------------

constexpr int kPipeWarps = 4;
constexpr int kPipeStages = 4;        // ring of stages: kPipeStages - 1 tiles in flight while one computes
constexpr int kPipeTileBytes = 8192;  // K bytes of a stage (as many V bytes)

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <int D>
struct PipeShape {
  static constexpr int LPK = D / 8;                        // lanes per key, 8 dims (16 bytes) a lane
  static constexpr int KPW = 32 / LPK;                     // keys a warp holds at once
  static constexpr int TILE = kPipeTileBytes / (D * 2);    // keys a stage: 32 (D = 128) or 64 (D = 64)
  static constexpr int U = TILE / (kPipeWarps * KPW);      // key groups per warp and stage
  static constexpr int RPP = kPipeWarps * 32 / LPK;        // rows one copy pass of the block covers
  static constexpr int PASSES = TILE / RPP;                // copy passes per stage (K and V each)
  static constexpr int kStageBytes = 2 * kPipeTileBytes;
  static constexpr int kSmem = kPipeStages * kStageBytes;
  static_assert(U * kPipeWarps * KPW == TILE && PASSES * RPP == TILE, "tile shape");
  static_assert(kPipeWarps * (kMaxG * D + kMaxG * 2) * 4 <= kSmem, "the warp merge reuses the ring");
};

template <class KVT, int D>
__global__ __launch_bounds__(kPipeWarps * 32, 3) void row_attention_pipe_kernel(RowAttentionParams p) {
  using S = PipeShape<D>;
  constexpr int LPK = S::LPK, KPW = S::KPW, TILE = S::TILE, U = S::U, RPP = S::RPP, PASSES = S::PASSES;
  extern __shared__ __align__(16) uint8_t ring[];
  __shared__ int last_block;
  pdl_trigger();
  pdl_wait();

  const int r = blockIdx.x;
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  const int H = static_cast<int>(p.num_heads);
  const int G = H / KVH;
  const int chunks = (G + kMaxG - 1) / kMaxG;
  const int kvh = blockIdx.y / chunks;
  const int hc = blockIdx.y - kvh * chunks;
  const int h0 = kvh * G + hc * kMaxG;
  const int nh = min(kMaxG, G - hc * kMaxG);
  const int ctx = p.row_ctx[r];
  const int lo = p.window > 0 ? max(0, ctx - static_cast<int>(p.window)) : 0;
  const int keys = ctx - lo;
  const int ns = device_num_splits(keys);
  const int64_t tok = p.row_token[r];
  if (ns == 0) {  // padding row: defined output
    if (blockIdx.z == 0)
      for (int i = threadIdx.x; i < nh * D; i += blockDim.x)
        store_as(p.out, p.out_dtype, tok * p.out_stride + static_cast<int64_t>(h0) * D + i, 0.0f);
    return;
  }
  if (static_cast<int>(blockIdx.z) >= ns) return;
  const int per = (keys + ns - 1) / ns;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane / LPK, gl = lane - grp * LPK;
  const float qscale = p.scale * kLog2e;
  float qr[kMaxG][8];
#pragma unroll
  for (int h = 0; h < kMaxG; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      qr[h][i] = h < nh ? p.q[tok * p.q_stride + static_cast<int64_t>(h0 + h) * D + gl * 8 + i] * qscale : 0.0f;

  const int32_t* table = p.block_tables + static_cast<int64_t>(p.row_seq[r]) * p.bt_stride;
  const int bs = static_cast<int>(p.cache.block_size);
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);
  // Copies: thread t moves 16-byte chunk t % LPK of tile rows t / LPK + RPP * j (K and V), its
  // keys' places in the block table kept as (table index, offset in the page), advanced a tile at
  // a time.
  const int crow = threadIdx.x / LPK, cchunk = threadIdx.x - crow * LPK;
  const int adv_blk = TILE / bs, adv_off = TILE - adv_blk * bs;
  const int64_t head_off = static_cast<int64_t>(kvh) * bs * D + cchunk * 8;
  const int64_t page_elems = static_cast<int64_t>(KVH) * bs * D;
  // Keys of this thread in a stage: rows warp * U * KPW + u * KPW + grp.
  const int my_row = warp * U * KPW + grp;

  int done = 0;
  for (int split = blockIdx.z; split < ns; split += gridDim.z) {
    ++done;
    const int ks = lo + split * per;
    const int ke = min(ctx, ks + per);
    const int ntiles = (ke - ks + TILE - 1) / TILE;
    // Per copied row j: the key's table index and offset in its page, and its page, read a tile
    // ahead (the table load is not waited for when the copy is issued).
    int tb[PASSES], to[PASSES], pg[PASSES];
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
      const int key = ks + crow + RPP * j;
      tb[j] = key / bs;
      to[j] = key - tb[j] * bs;
      pg[j] = key < ke ? table[tb[j]] : 0;
    }
    // Tiles are issued in order 0, 1, ...: each call copies the next one into its ring slot. Rows
    // past the split's end are zero-filled (their scores are masked, and 0 * V must stay 0).
    int issued = 0;
    auto issue_next = [&]() {
      KVT* sk = reinterpret_cast<KVT*>(ring + (issued % kPipeStages) * S::kStageBytes);
      KVT* sv = sk + kPipeTileBytes / 2;
#pragma unroll
      for (int j = 0; j < PASSES; ++j) {
        const int row = crow + RPP * j;
        const int key = ks + issued * TILE + row;
        const bool valid = key < ke;
        const int64_t off = valid ? pg[j] * page_elems + head_off + to[j] * D : 0;
        cp_async16(sk + row * D + cchunk * 8, kc + off, valid);
        cp_async16(sv + row * D + cchunk * 8, vc + off, valid);
        to[j] += adv_off;
        tb[j] += adv_blk;
        if (to[j] >= bs) {
          to[j] -= bs;
          ++tb[j];
        }
        pg[j] = key + TILE < ke ? table[tb[j]] : 0;
      }
      ++issued;
    };
#pragma unroll
    for (int st = 0; st < kPipeStages - 1; ++st) {
      if (st < ntiles) issue_next();
      cp_async_commit();  // (empty groups keep the count uniform)
    }

    float m[kMaxG], l[kMaxG], o[kMaxG][8];
#pragma unroll
    for (int h = 0; h < kMaxG; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) o[h][i] = 0.0f;
    }
    for (int t = 0; t < ntiles; ++t) {
      // Tile t has landed (this thread's copies; the barrier makes everyone's visible), and every
      // warp is done with tile t - 1, whose slot the next copy reuses.
      cp_async_wait<kPipeStages - 2>();
      __syncthreads();
      if (issued < ntiles) issue_next();
      cp_async_commit();

      const KVT* sk = reinterpret_cast<const KVT*>(ring + (t % kPipeStages) * S::kStageBytes);
      const KVT* sv = sk + kPipeTileBytes / 2;
      const int kbase = ks + t * TILE + my_row;
      float sc[U][kMaxG];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[8];
        unpack8<KVT>(*reinterpret_cast<const uint4*>(sk + (my_row + u * KPW) * D + gl * 8), kf);
        const bool valid = kbase + u * KPW < ke;
#pragma unroll
        for (int h = 0; h < kMaxG; ++h) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) s = fmaf(qr[h][i], kf[i], s);
#pragma unroll
          for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
          sc[u][h] = valid ? s : -INFINITY;
        }
      }
      // Online softmax; sc becomes the probabilities (0 while a lane group has no valid key).
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
        float mx = sc[0][h];
#pragma unroll
        for (int u = 1; u < U; ++u) mx = fmaxf(mx, sc[u][h]);
        const float mn = fmaxf(m[h], mx);
        const bool any = mn != -INFINITY;
        const float a = any ? exp2f(m[h] - mn) : 1.0f;
        float sum = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          sc[u][h] = any ? exp2f(sc[u][h] - mn) : 0.0f;
          sum += sc[u][h];
        }
        l[h] = l[h] * a + sum;
        m[h] = mn;
#pragma unroll
        for (int i = 0; i < 8; ++i) o[h][i] *= a;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float vf[8];
        unpack8<KVT>(*reinterpret_cast<const uint4*>(sv + (my_row + u * KPW) * D + gl * 8), vf);
#pragma unroll
        for (int h = 0; h < kMaxG; ++h)
#pragma unroll
          for (int i = 0; i < 8; ++i) o[h][i] = fmaf(sc[u][h], vf[i], o[h][i]);
      }
    }
    cp_async_wait<0>();  // (only empty groups can be left)

    // Merge the KPW lane groups of the warp (lanes with the same gl hold the same dims).
#pragma unroll
    for (int x = LPK; x < 32; x <<= 1) {
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
        const float mo = __shfl_xor_sync(0xffffffffu, m[h], x);
        const float lo2 = __shfl_xor_sync(0xffffffffu, l[h], x);
        const float mn = fmaxf(m[h], mo);
        const float a = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mn);
        const float b = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
        l[h] = l[h] * a + lo2 * b;
#pragma unroll
        for (int i = 0; i < 8; ++i) o[h][i] = o[h][i] * a + __shfl_xor_sync(0xffffffffu, o[h][i], x) * b;
        m[h] = mn;
      }
    }
    // The ring becomes the warps' partial results once every warp is done reading it.
    __syncthreads();
    float* o_s = reinterpret_cast<float*>(ring);          // [warp][head][D]
    float* ml_s = o_s + kPipeWarps * kMaxG * D;          // [warp][head][2]
    if (grp == 0) {
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
#pragma unroll
        for (int i = 0; i < 8; ++i) o_s[(warp * kMaxG + h) * D + gl * 8 + i] = o[h][i];
        if (gl == 0) {
          ml_s[(warp * kMaxG + h) * 2] = m[h];
          ml_s[(warp * kMaxG + h) * 2 + 1] = l[h];
        }
      }
    }
    __syncthreads();
    store_split<kPipeWarps>(p, o_s, D, ml_s, r, h0, nh, ns, split, tok);
    __syncthreads();  // the next split's copies overwrite o_s / ml_s
  }  // split
  if (ns > 1) combine_splits(p, r, h0, nh, ns, tok, done, &last_block);
}

template <class KVT, int D>
void launch_pipe(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  constexpr int smem = PipeShape<D>::kSmem;
  static bool configured = false;  // per instantiation; the attribute is per device function
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(row_attention_pipe_kernel<KVT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CUDA_CHECK(cudaFuncSetAttribute(row_attention_pipe_kernel<KVT, D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    configured = true;
  }
  launch_pdl(row_attention_pipe_kernel<KVT, D>, grid, dim3(kPipeWarps * 32), smem, s, p);
}

template <class KVT>
void launch_rows(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  const int64_t D = p.cache.head_dim;
  if constexpr (sizeof(KVT) == 2) {
    if (!p.legacy_kernel && D == 128) return launch_pipe<KVT, 128>(p, grid, s);
    if (!p.legacy_kernel && D == 64) return launch_pipe<KVT, 64>(p, grid, s);
  }
  // <lanes per key, dims per lane, keys per lane group per iteration, strided dims>
  if (D == 64) {
    launch_pdl(row_attention_kernel<KVT, 8, 8, 2, false>, grid, dim3(kWarps * 32), 0, s, p);
  } else if (D == 128) {
    launch_pdl(row_attention_kernel<KVT, 16, 8, 4, false>, grid, dim3(kWarps * 32), 0, s, p);
  } else if (D <= 64) {
    launch_pdl(row_attention_kernel<KVT, 8, 8, 2, true>, grid, dim3(kWarps * 32), 0, s, p);
  } else {
    launch_pdl(row_attention_kernel<KVT, 32, 8, 2, true>, grid, dim3(kWarps * 32), 0, s, p);
  }
}

}  // namespace

void RowAttentionParams::check() const {
  PAGODA_CUDA_REQUIRE(q && out && row_token && row_seq && row_ctx && block_tables && cache.k && cache.v,
                      "row_attention: missing input");
  PAGODA_CUDA_REQUIRE(part_o && part_ml && counters, "row_attention: missing split workspace");
  PAGODA_CUDA_REQUIRE(cache.head_dim > 0 && cache.head_dim <= kMaxHeadDim, "row_attention: head_dim must be in [1, 256]");
  PAGODA_CUDA_REQUIRE(cache.num_kv_heads > 0 && num_heads % cache.num_kv_heads == 0, "row_attention: heads");
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "row_attention: out dtype");
}

void row_attention(const RowAttentionParams& p, cudaStream_t s) {
  p.check();
  if (p.num_rows <= 0) return;
  const int64_t G = p.num_heads / p.cache.num_kv_heads;
  const int64_t chunks = ceil_div(G, kMaxG);
  // Enough blocks to fill the GPU (~4 per SM); a block loops over the splits beyond gridDim.z.
  const int sms = p.num_sms > 0 ? p.num_sms : 132;
  const int64_t blocks_per_split = p.num_rows * p.cache.num_kv_heads * chunks;
  const int max_splits = p.max_keys > 0 ? row_num_splits(p.max_keys) : kRowMaxSplits;
  int64_t z = ceil_div(int64_t{4} * sms, blocks_per_split);
  z = z < 1 ? 1 : (z > max_splits ? max_splits : z);
  dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.cache.num_kv_heads * chunks),
            static_cast<unsigned>(z));
  switch (p.cache.dtype) {
    case DType::kF32: launch_rows<float>(p, grid, s); break;
    case DType::kF16: launch_rows<f16>(p, grid, s); break;
    case DType::kBF16: launch_rows<bf16>(p, grid, s); break;
    default: PAGODA_CUDA_REQUIRE(false, "row_attention: kv dtype must be f32, f16 or bf16");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
