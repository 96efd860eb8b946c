// Split-KV attention for one query row at a time (flash-decoding): decode steps, and every row in
// the generic path (f32 compute, head dims without a tensor-core kernel, batch-invariant mode).
//
// Grid (row, kv head x head chunk, split). A block owns one query row, one KV head and up to
// kMaxG of the query heads that share it (GQA: the KV tile is read once for all of them; a
// one-row launch of the SIMT kernel takes one head a block, simt_heads_per_block), and a
// contiguous range of keys. The number of splits depends on the row's key count only (so a row's
// arithmetic is the same in any batch), ~256 keys per split up to 32 splits: long contexts fill
// the GPU even at batch 1, and a split is long enough to amortise its merge at batch 256. A block
// handles splits blockIdx.z, + gridDim.z, ..., each with the same arithmetic whatever the grid.
// Warps and splits are merged in a fixed order; the last block of a row to finish (an atomic
// count) combines the splits, so decode is one kernel. A block reads the row's geometry and block
// table (step inputs) before it waits for its predecessor; in decode steps the SIMT kernel also
// warms the L2 with its older keys then (fresh_keys), and takes the RoPE + KV write of the step's
// tokens into itself (p.rope: one kernel and one dependent round trip fewer a layer at batch 1).
//
// Two kernels share that outline (row_attention.cuh):
// - row_attention_mma_kernel (attention_decode_mma.cu; tensor_cores set, f16 / bf16 caches, and FP8 ones at block
//   sizes a multiple of 16, at head_dim 64 and 128: the decode of the real models): the keys are the rows of an m16n8k16 tile and the block's
//   GQA heads its columns, K / V tiles of 64 keys go through shared memory (cp.async,
//   double-buffered), S^T = K Q^T and O^T += V^T P^T on tensor cores with Q and P rounded to the
//   16-bit type (as the prefill kernel does; f16 for FP8, whose values convert exactly).
//   A SIMT version of that per-key work was bound by issue (16-bit -> f32 conversions, 4-level
//   shuffle reductions, FMAs: 50 % of copy bandwidth at 256 rows x 1500 keys), and a cp.async
//   pipeline in front of the same arithmetic did not help (43.6 %).
// - row_attention_kernel (this file, with row_attention()'s dispatch), everything else (f32 caches or f32 compute, other head dims, strided up
//   to 256, FP8 caches at other block sizes, short launches): each warp loads KPW keys at a time straight into registers, LPK lanes per key, every
//   lane NV dims of the head, K and V of 16-bit caches kept packed until used; scores are a dot
//   product and an LPK-lane shuffle reduction, softmax is online (exp2 with log2(e) folded into
//   q), P.V accumulates in registers in f32.
#include <cmath>
#include <cstdio>

#include "backend/cuda/block_trace.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/rope_chunk.cuh"
#include "backend/cuda/row_attention.cuh"

namespace pagoda::cuda {
namespace {

using namespace row_attention_detail;

constexpr int kMaxG = 4;          // query heads per block
constexpr int kMaxHeadDim = 256;
constexpr int kWarps = 4;

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
// Before the wait for the predecessor: warms the L2 with the K / V lines of the keys of the
// block's splits that earlier steps wrote ([lo, ctx - fresh_keys), at most kWarmKeys), so the
// loads after the wait (a batch-1 decode's whole attention is a few dependent round trips) find
// them there.
constexpr int kWarmKeys = 256;
template <class KVT>
__device__ __forceinline__ void warm_keys_l2(const RowAttentionParams& p, const RowBlock& b, const int32_t* table, int D) {
  constexpr int kLine = 128;
  const int KVH = static_cast<int>(p.cache.num_kv_heads), bs = static_cast<int>(p.cache.block_size);
  const int row_bytes = D * static_cast<int>(sizeof(KVT));
  const int lines = (row_bytes + kLine - 1) / kLine;
  const int stable_end = b.ctx - p.fresh_keys;
  int budget = kWarmKeys;
  for (int split = blockIdx.z; split < b.ns && budget > 0; split += gridDim.z) {
    const int ks = b.lo + split * b.per;
    const int n = min(min(stable_end, ks + b.per) - ks, budget);
    if (n <= 0) continue;
    budget -= n;
    for (int i = threadIdx.x; i < n * lines * 2; i += blockDim.x) {
      const int key = ks + i / (2 * lines), rem = i % (2 * lines);
      const int64_t row = (static_cast<int64_t>(table[key / bs]) * KVH + b.kvh) * bs + key % bs;
      const char* a = static_cast<const char*>(rem < lines ? p.cache.k : p.cache.v) + row * row_bytes +
                      (rem < lines ? rem : rem - lines) * kLine;
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(a)));
    }
  }
}

// Fused RoPE + KV write (p.rope.qkv set): what the rotation of the block's row needs from the
// step's inputs and constant tables: the token's position and cache slot, and (EARLY) the cos / sin
// of the thread's chunk (a chunk's index within its head is the same for all the thread's chunks:
// lane % (D / 4)). EARLY: read before the kernel waits for its predecessor, with plain loads;
// else the cos / sin are read where they are used (fewer registers held).
struct RopeRowInputs {
  int pos = 0, slot = -1;
  RopeCs cs;
};
template <int D, bool EARLY>
__device__ __forceinline__ RopeRowInputs rope_row_inputs(const RopeKvParams& rp, const RowBlock& b) {
  static_assert(32 % (D / 4) == 0, "a head's chunks must tile a warp");
  RopeRowInputs e;
  if constexpr (EARLY) {
    e.pos = load_s32_early(rp.positions + b.tok);
    e.slot = load_s32_early(rp.slots + b.tok);
    const int c = (threadIdx.x & 31) % (D / 4);
    e.cs = rope_cs<D, true>(rp.interleaved, c, rp.cos + static_cast<int64_t>(e.pos) * (D / 2),
                            rp.sin + static_cast<int64_t>(e.pos) * (D / 2));
  } else {
    e.pos = rp.positions[b.tok];
    e.slot = rp.slots[b.tok];
  }
  return e;
}

// The block's query heads of its decode row (token b.tok at position ctx - 1) rotated into q_s
// (times qscale), the row's new key and value rounded to the cache type into new_kv, and, by the
// first head chunk's z = 0 block of the KV head, written to the cache: the same bits as
// rope_kv_write (rope_chunk4) followed by the unfused kernel.
template <int D, class KVT, bool EARLY>
__device__ __forceinline__ void rope_decode_row(const RowAttentionParams& p, const RowBlock& b, const RopeRowInputs& e,
                                                float qscale, float (*q_s)[kMaxHeadDim], KVT (*new_kv)[kMaxHeadDim]) {
  constexpr int CPH = D / 4;
  const RopeKvParams& rp = p.rope;
  const int H = static_cast<int>(p.num_heads), KVH = static_cast<int>(p.cache.num_kv_heads);
  const float4* src = reinterpret_cast<const float4*>(rp.qkv) + b.tok * (H + 2 * KVH) * CPH;
  const bool writer = blockIdx.z == 0 && b.h0 == b.kvh * (H / KVH) && e.slot >= 0;
  const int bs = static_cast<int>(p.cache.block_size);
  const int64_t cache_row = writer ? (static_cast<int64_t>(e.slot / bs) * KVH + b.kvh) * bs + e.slot % bs : 0;
  const int chunks = (b.nh + 2) * CPH;  // the block's q heads, then the k head, then the v head
  for (int base = threadIdx.x - (threadIdx.x & 31); base < chunks; base += blockDim.x) {
    const int idx = base + (threadIdx.x & 31);
    const bool valid = idx < chunks;
    const int j = idx / CPH, c = idx - j * CPH;
    const int hh = j < b.nh ? b.h0 + j : (j == b.nh ? H + b.kvh : H + KVH + b.kvh);
    float4 v;
    if constexpr (EARLY) {
      v = rope_chunk4<D>(rp, src, hh, c, valid, e.cs);
    } else {
      v = rope_chunk4<D>(rp, src, hh, c, valid, rp.cos + static_cast<int64_t>(e.pos) * (D / 2),
                         rp.sin + static_cast<int64_t>(e.pos) * (D / 2));
    }
    if (!valid) continue;
    if (j < b.nh) {
      q_s[j][4 * c] = v.x * qscale;
      q_s[j][4 * c + 1] = v.y * qscale;
      q_s[j][4 * c + 2] = v.z * qscale;
      q_s[j][4 * c + 3] = v.w * qscale;
    } else {
      store4(&new_kv[j - b.nh][0], 4 * c, v);
      if (writer) store4_as(j == b.nh ? p.cache.k : p.cache.v, p.cache.dtype, cache_row * D + 4 * c, v);
    }
  }
}

// Decode steps (p.fresh_keys >= 0), 16-bit cache at 8 dims a lane: the K and V chunks of the
// lane's keys in the warp's first iteration of the block's first split, those that earlier steps
// wrote (keys < stable: ctx - fresh_keys, and never the key a fused launch writes itself), copied
// into shared memory (cp.async: nothing held in registers,
// not sunk below the wait) before the kernel waits for its predecessor. The loop takes them from
// there; keys it did not copy are zero-filled and read as usual. A batch-1 decode's attention is
// a chain of a few dependent round trips, and this takes the first of the key loop off it.
// Returns the iteration's first key, or -1 when nothing was copied.
template <class KVT, int LPK, int U>
__device__ __forceinline__ int preload_first_keys(const RowAttentionParams& p, const RowBlock& b, const int32_t* table,
                                                  int D, int stable, uint4 (*pre)[2][32]) {
  constexpr int KPW = 32 / LPK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane / LPK, gl = lane - grp * LPK;
  const int ks = b.lo + static_cast<int>(blockIdx.z) * b.per;
  const int ke = min(b.ctx, ks + b.per);
  const int base = ks + warp * KPW * U;
  if (base >= ke || base >= stable) return -1;
  const int KVH = static_cast<int>(p.cache.num_kv_heads), bs = static_cast<int>(p.cache.block_size);
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int key = base + u * KPW + grp;
    const bool ok = key < ke && key < stable;
    int64_t off = 0;
    if (ok) off = ((static_cast<int64_t>(load_s32_early(table + key / bs)) * KVH + b.kvh) * bs + key % bs) * D + gl * 8;
    cp_async16(&pre[u][0][lane], kc + off, ok);
    cp_async16(&pre[u][1][lane], vc + off, ok);
  }
  cp_async_commit();
  return base;
}
template <class KVT, int LPK, int NV, int U, bool STRIDED, int HPB = kMaxG>
__global__ __launch_bounds__(kWarps * 32, (!STRIDED && NV == 8 && sizeof(KVT) == 2) ? 4 : 1) void row_attention_kernel(RowAttentionParams p) {
  constexpr bool kRaw = !STRIDED && NV == 8 && sizeof(KVT) == 2;
  // Short launches (one or two heads a block) read the fused RoPE's inputs and their first keys
  // before the wait (rope_row_inputs, preload_first_keys); with four heads a block the registers
  // held across the wait would spill.
  constexpr bool kPreload = kRaw && HPB <= 2;
  constexpr int KPW = 32 / LPK;  // keys a warp works on at once, U times per iteration
  constexpr int STEP = KPW * U;
  __shared__ float q_s[HPB][kMaxHeadDim];
  __shared__ float o_s[kWarps][HPB][kMaxHeadDim];
  __shared__ float ml_s[kWarps][HPB][2];
  __shared__ __align__(16) KVT new_kv[2][kMaxHeadDim];  // fused RoPE: the row's new key and value
  // preload_first_keys (8 / 16 KiB at D = 64 / 128, reserved by every launch of a kPreload kernel)
  __shared__ __align__(16) uint4 pre_s[kPreload ? kWarps : 1][kPreload ? U : 1][2][kPreload ? 32 : 1];
  __shared__ int last_block;
  warp_trace(p.trace, TracePoint::kStart);
  pdl_trigger();

  const int D = static_cast<int>(p.cache.head_dim);
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  // The row's geometry, block-table row and (decode) the lines of its older keys come from the
  // step's inputs and earlier steps: read before waiting for the predecessor.
  RowBlock b;
  const bool work = row_block<HPB>(p, D, b);
  const int32_t* table = work ? p.block_tables + static_cast<int64_t>(p.row_seq[b.r]) * p.bt_stride : nullptr;
  const bool fused = !STRIDED && p.rope.qkv != nullptr;
  RopeRowInputs rope_in;
  if constexpr (kPreload) {
    if (fused && work && p.early_reads) rope_in = rope_row_inputs<LPK * NV, true>(p.rope, b);
  }
  // Keys below `stable` came from earlier steps; a fused launch writes key ctx - 1 itself.
  const int stable = b.ctx - max(p.fresh_keys, fused ? 1 : 0);
  int pre_base = -1;  // the first key of the iteration in pre_s (preload_first_keys), -1: none
  if constexpr (kPreload) {
    if (work && p.fresh_keys >= 0 && p.early_reads)
      pre_base = preload_first_keys<KVT, LPK, U>(p, b, table, D, stable, pre_s[threadIdx.x >> 5]);
  }
  if (work && p.fresh_keys >= 0) warm_keys_l2<KVT>(p, b, table, D);
  pdl_wait();
  warp_trace(p.trace, TracePoint::kWaited);
  if (!work) {
    row_pad_zeros(p, D, b);
    return warp_trace(p.trace, TracePoint::kEnd);
  }
  const int r = b.r, kvh = b.kvh, h0 = b.h0, nh = b.nh, ctx = b.ctx, lo = b.lo, ns = b.ns, per = b.per;
  const int64_t tok = b.tok;

  const float qscale = p.scale * kLog2e;
  const float cap_l2 = p.softcap * kLog2e;  // 0: no soft-cap
  // Fused RoPE (non-strided kernels: D = LPK * NV is 64 or 128): key ctx - 1 is new_kv's.
  const int newest = fused ? ctx - 1 : -1;
  if constexpr (!STRIDED) {
    if (fused) {
      if (!(kPreload && p.early_reads)) rope_in = rope_row_inputs<LPK * NV, kPreload>(p.rope, b);  // not read before the wait
      rope_decode_row<LPK * NV, KVT, kPreload>(p, b, rope_in, qscale, q_s, new_kv);
    }
  }
  if (!fused) {
    for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
      const int h = i / D, d = i - h * D;
      q_s[h][d] = p.q[tok * p.q_stride + static_cast<int64_t>(h0 + h) * D + d] * qscale;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int grp = lane / LPK, gl = lane - grp * LPK;
  float qr[HPB][NV];
#pragma unroll
  for (int h = 0; h < HPB; ++h)
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int d = STRIDED ? gl + LPK * i : gl * NV + i;
      qr[h][i] = (h < nh && d < D) ? q_s[h][d] : 0.0f;
    }
  const int bs = static_cast<int>(p.cache.block_size);
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);
  if constexpr (kPreload) {
    if (pre_base >= 0) cp_async_wait<0>();
  }
  // Splits blockIdx.z, + gridDim.z, ...: each split's arithmetic is the same whatever the grid.
  int done = 0;
  for (int split = blockIdx.z; split < ns; split += gridDim.z) {
  ++done;
  const int ks = lo + split * per;
  const int ke = min(ctx, ks + per);
  float m[HPB], l[HPB], o[HPB][NV];
#pragma unroll
  for (int h = 0; h < HPB; ++h) {
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
      float sc[U][HPB];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int key = base + u * KPW + grp;
        kr[u] = vr[u] = uint4{0, 0, 0, 0};
        if (key < ke) {
          if (kPreload && base == pre_base && key < stable) {
            kr[u] = pre_s[warp][u][0][lane];
            vr[u] = pre_s[warp][u][1][lane];
          } else if (key != newest) {
            const int page = table[key / bs];
            const int64_t off = ((static_cast<int64_t>(page) * KVH + kvh) * bs + key % bs) * D + gl * NV;
            kr[u] = *reinterpret_cast<const uint4*>(kc + off);
            vr[u] = *reinterpret_cast<const uint4*>(vc + off);
          } else {
            kr[u] = *reinterpret_cast<const uint4*>(&new_kv[0][gl * NV]);
            vr[u] = *reinterpret_cast<const uint4*>(&new_kv[1][gl * NV]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[NV];
        unpack8<KVT>(kr[u], kf);
        const bool valid = base + u * KPW + grp < ke;
#pragma unroll
        for (int h = 0; h < HPB; ++h) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < NV; ++i) s = fmaf(qr[h][i], kf[i], s);
#pragma unroll
          for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
          sc[u][h] = valid ? softcap_log2(s, cap_l2) : -INFINITY;
        }
      }
      // Online softmax; sc becomes the probabilities (0 while a lane group has no valid key).
#pragma unroll
      for (int h = 0; h < HPB; ++h) {
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
        for (int h = 0; h < HPB; ++h)
#pragma unroll
          for (int i = 0; i < NV; ++i) o[h][i] = fmaf(sc[u][h], vf[i], o[h][i]);
      }
    } else {
    float kv[U][NV];
    float sc[U][HPB];
    // The new key of a fused launch comes from shared memory in its own branch (a pointer that
    // may point to either space would make every load a generic one); never when STRIDED.
    int64_t off[U];
    bool valid[U], nk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = base + u * KPW + grp;
      valid[u] = key < ke;
      nk[u] = !STRIDED && valid[u] && key == newest;
      off[u] = 0;
      if (valid[u]) {
        const int page = table[key / bs];
        off[u] = ((static_cast<int64_t>(page) * KVH + kvh) * bs + key % bs) * D;
      }
      if (nk[u]) load_row<KVT, NV, LPK, STRIDED>(new_kv[0], gl, D, true, kv[u]);
      else load_row<KVT, NV, LPK, STRIDED>(kc + off[u], gl, D, valid[u], kv[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int h = 0; h < HPB; ++h) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; ++i) s = fmaf(qr[h][i], kv[u][i], s);
#pragma unroll
        for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
        sc[u][h] = valid[u] ? softcap_log2(s, cap_l2) : -INFINITY;
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (nk[u]) load_row<KVT, NV, LPK, STRIDED>(new_kv[1], gl, D, true, kv[u]);
      else load_row<KVT, NV, LPK, STRIDED>(vc + off[u], gl, D, valid[u], kv[u]);
    }
#pragma unroll
    for (int h = 0; h < HPB; ++h) {
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
    for (int h = 0; h < HPB; ++h) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[h], x);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[h], x);
      const float mn = fmaxf(m[h], mo);
      const float a = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mn);
      const float b = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      // Explicit roundings: a sum of two products may be contracted either way, and the compiler's
      // choice changed with the heads a block (the results must not depend on HPB).
      l[h] = fmaf(l[h], a, __fmul_rn(lo2, b));
#pragma unroll
      for (int i = 0; i < NV; ++i) o[h][i] = fmaf(o[h][i], a, __fmul_rn(__shfl_xor_sync(0xffffffffu, o[h][i], x), b));
      m[h] = mn;
    }
  }
  if (grp == 0) {
#pragma unroll
    for (int h = 0; h < HPB; ++h) {
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
  store_split<kWarps, HPB>(p, &o_s[0][0][0], kMaxHeadDim, &ml_s[0][0][0], r, h0, nh, ns, split, tok);
  __syncthreads();  // o_s / ml_s are rewritten by the next split
  }  // split
  if (ns > 1) combine_splits(p, r, h0, nh, ns, tok, done, &last_block);
  warp_trace(p.trace, TracePoint::kEnd);
}

// The tensor-core kernel applies: asked for, not a short launch, a 16-bit cache or an FP8 one at
// block sizes a multiple of 16, head_dim 64 / 128.
bool use_mma(const RowAttentionParams& p) {
  const DType t = p.cache.dtype;
  return p.tensor_cores && (p.tensor_cores_short || !row_attention_short(p.num_rows, p.max_keys)) &&
         (t == DType::kF16 || t == DType::kBF16 || (t == DType::kF8E4M3 && p.cache.block_size % 16 == 0)) &&
         (p.cache.head_dim == 64 || p.cache.head_dim == 128);
}

// Query heads a SIMT block takes (16-bit caches at head_dim 64 / 128; other caches kMaxG): as
// asked (1, 2 or kMaxG), else 1 for a one-row launch, 2 up to kRowShortRows rows and kMaxG beyond.
// A short launch is a chain of dependent round trips on a few SMs: more blocks, each a shorter
// chain. Llama-3-8B shape, tg128 on the H200 (docs/decisions.md#d2): batch 1 229.1 tok/s
// with 4 heads a block, 238.4 with 1; batch 4 / 8 816.3 / 1665.9 with 4, 850.7 / 1692.8 with 2.
// The results do not depend on it (op tests: the same bits).
int simt_heads_per_block(const RowAttentionParams& p) {
  const bool small_ok = (p.cache.dtype == DType::kBF16 || p.cache.dtype == DType::kF16) &&
                        (p.cache.head_dim == 64 || p.cache.head_dim == 128);
  if (!small_ok) return kMaxG;
  if (p.simt_heads_per_block == 1 || p.simt_heads_per_block == 2 || p.simt_heads_per_block == kMaxG)
    return p.simt_heads_per_block;
  return p.num_rows == 1 ? 1 : p.num_rows <= kRowShortRows ? 2 : kMaxG;
}

// <lanes per key, dims per lane, keys per lane group per iteration, strided dims, heads a block>
template <class KVT, int HPB>
void launch_rows_d(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  if (p.cache.head_dim == 64) launch_pdl(row_attention_kernel<KVT, 8, 8, 2, false, HPB>, grid, dim3(kWarps * 32), 0, s, p);
  else launch_pdl(row_attention_kernel<KVT, 16, 8, 4, false, HPB>, grid, dim3(kWarps * 32), 0, s, p);
}
template <class KVT>
void launch_rows(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  const int64_t D = p.cache.head_dim;
  if (D == 64 || D == 128) {
    if constexpr (sizeof(KVT) == 2) {  // simt_heads_per_block is kMaxG for other caches
      const int hpb = simt_heads_per_block(p);
      if (hpb == 1) return launch_rows_d<KVT, 1>(p, grid, s);
      if (hpb == 2) return launch_rows_d<KVT, 2>(p, grid, s);
    }
    return launch_rows_d<KVT, kMaxG>(p, grid, s);
  }
  if (D <= 64) launch_pdl(row_attention_kernel<KVT, 8, 8, 2, true>, grid, dim3(kWarps * 32), 0, s, p);
  else launch_pdl(row_attention_kernel<KVT, 32, 8, 2, true>, grid, dim3(kWarps * 32), 0, s, p);
}

}  // namespace

bool row_attention_fuses_rope(const RowAttentionParams& p) {
  const RopeKvParams& r = p.rope;
  return r.qkv && r.positions && r.slots && r.cos && r.sin && !use_mma(p) && rope_vec4_supported(r) &&
         r.head_dim == p.cache.head_dim && r.num_heads == p.num_heads && r.cache.k == p.cache.k &&
         r.cache.v == p.cache.v && r.cache.num_kv_heads == p.cache.num_kv_heads;
}

void RowAttentionParams::check() const {
  PAGODA_CUDA_REQUIRE(!rope.qkv || row_attention_fuses_rope(*this), "row_attention: the RoPE cannot be fused here");
  PAGODA_CUDA_REQUIRE((q || rope.qkv) && out && row_token && row_seq && row_ctx && block_tables && cache.k && cache.v,
                      "row_attention: missing input");
  PAGODA_CUDA_REQUIRE(part_o && part_ml && counters, "row_attention: missing split workspace");
  PAGODA_CUDA_REQUIRE(cache.head_dim > 0 && cache.head_dim <= kMaxHeadDim, "row_attention: head_dim must be in [1, 256]");
  PAGODA_CUDA_REQUIRE(cache.num_kv_heads > 0 && num_heads % cache.num_kv_heads == 0, "row_attention: heads");
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "row_attention: out dtype");
}

int row_attention_splits(int64_t blocks_per_split, int sms) {
  return blocks_per_split >= sms ? 1 : static_cast<int>(sms / blocks_per_split);
}

void row_attention(const RowAttentionParams& params, cudaStream_t s) {
  params.check();
  if (params.num_rows <= 0) return;
  RowAttentionParams p = params;
  const int64_t G = p.num_heads / p.cache.num_kv_heads;
  const bool mma = use_mma(p);
  const int64_t chunks = ceil_div(G, mma ? kMmaHeads : simt_heads_per_block(p));
  // A block loops over the splits beyond gridDim.z. Aimed at: twice the blocks an SM holds for the
  // tensor-core kernel (64 rows x 1000 keys: 110 us vs 123 with one wave's worth), ~4 blocks an SM
  // for the SIMT one.
  const int sms = p.num_sms > 0 ? p.num_sms : 132;
  const int64_t blocks_per_split = p.num_rows * p.cache.num_kv_heads * chunks;
  if (!mma) p.target_splits = 0;
  else if (p.target_splits <= 0) p.target_splits = row_attention_splits(blocks_per_split, sms);
  // No bound on the keys (max_keys 0): as many splits as the longest possible row takes.
  const int max_splits = row_num_splits(p.max_keys > 0 ? p.max_keys : int64_t{1} << 30, p.target_splits);
  const int64_t per_sm = p.blocks_per_sm > 0 ? p.blocks_per_sm : (mma ? 2 * kMmaBlocksPerSm : 4);
  int64_t z = ceil_div(per_sm * sms, blocks_per_split);
  z = z < 1 ? 1 : (z > max_splits ? max_splits : z);
  dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(p.cache.num_kv_heads * chunks),
            static_cast<unsigned>(z));
  if (mma) {
    launch_mma(p, grid, s);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (block_trace_enabled()) {
    char label[64];
    std::snprintf(label, sizeof label, "row_attention:rows%lld:hpb%d", static_cast<long long>(p.num_rows),
                  simt_heads_per_block(p));
    p.trace = block_trace_reserve(label, grid, kWarps, 0);
  }
  switch (p.cache.dtype) {
    case DType::kF32: launch_rows<float>(p, grid, s); break;
    case DType::kF16: launch_rows<f16>(p, grid, s); break;
    case DType::kBF16: launch_rows<bf16>(p, grid, s); break;
    case DType::kF8E4M3: launch_rows<f8>(p, grid, s); break;
    default: PAGODA_CUDA_REQUIRE(false, "row_attention: kv dtype must be f32, f16, bf16 or f8_e4m3");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
