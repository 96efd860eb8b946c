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
// count) combines the splits, so decode is one kernel. A block reads the row's geometry and block
// table (step inputs) before it waits for its predecessor; in decode steps the SIMT kernel also
// warms the L2 with its older keys then (fresh_keys), and takes the RoPE + KV write of the step's
// tokens into itself (p.rope: one kernel and one dependent round trip fewer a layer at batch 1).
//
// Two kernels share that outline:
// - row_attention_mma_kernel (tensor_cores set, f16 / bf16 caches at head_dim 64 and 128: the
//   bf16 decode of the real models): the GQA heads of the block are the rows of an m16n8k16 tile,
//   K / V tiles of 64 keys go through shared memory (cp.async, double-buffered), S = Q K^T and
//   O += P V on tensor cores with Q and P rounded to the cache type (as the prefill kernel does).
//   A SIMT version of that per-key work was bound by issue (16-bit -> f32 conversions, 4-level
//   shuffle reductions, FMAs: 50 % of copy bandwidth at 256 rows x 1500 keys), and a cp.async
//   pipeline in front of the same arithmetic did not help (43.6 %).
// - row_attention_kernel, everything else (f32 caches or f32 compute, other head dims, strided up
//   to 256): each warp loads KPW keys at a time straight into registers, LPK lanes per key, every
//   lane NV dims of the head, K and V of 16-bit caches kept packed until used; scores are a dot
//   product and an LPK-lane shuffle reduction, softmax is online (exp2 with log2(e) folded into
//   q), P.V accumulates in registers in f32.
#include <cmath>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/rope_chunk.cuh"

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

// A block's share of the grid (row, KV head x head chunk, split): row r (token tok), its KV head,
// its query heads [h0, h0 + nh) (chunks of HPB heads of the GQA group), the row's visible keys
// [lo, ctx) in ns splits of `per` keys.
struct RowBlock {
  int r, kvh, h0, nh, ctx, lo, ns, per;
  int first;  // the first visible key (a window's start); lo: first rounded down to LO_ALIGN, [lo, first) masked
  int64_t tok;
};
// Fills b, reading only the step's inputs (so it may run before the kernel waits for its
// predecessor). False when the block has nothing to do: a padding row (context 0; block z = 0
// writes its zeros, row_pad_zeros) or a split index past the row's splits. LO_ALIGN / PER_ALIGN:
// the keys [lo, ctx) start at a multiple of LO_ALIGN (a window's first keys are then masked, see
// `first`) and the splits are multiples of PER_ALIGN keys (the tensor-core kernel: whole tiles,
// 16-key page chunks).
template <int HPB, int LO_ALIGN = 1, int PER_ALIGN = 1>
__device__ __forceinline__ bool row_block(const RowAttentionParams& p, int D, RowBlock& b) {
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  const int G = static_cast<int>(p.num_heads) / KVH;
  const int chunks = (G + HPB - 1) / HPB;
  b.r = blockIdx.x;
  b.kvh = blockIdx.y / chunks;
  const int hc = blockIdx.y - b.kvh * chunks;
  b.h0 = b.kvh * G + hc * HPB;
  b.nh = min(HPB, G - hc * HPB);
  b.ctx = p.row_ctx[b.r];
  b.first = p.window > 0 ? max(0, b.ctx - static_cast<int>(p.window)) : 0;
  b.lo = b.first - b.first % LO_ALIGN;
  const int keys = b.ctx - b.lo;
  b.ns = device_num_splits(keys);
  b.tok = p.row_token[b.r];
  if (b.ns == 0) return false;
  b.per = (keys + b.ns - 1) / b.ns;
  if (PER_ALIGN > 1) {
    b.per = (b.per + PER_ALIGN - 1) / PER_ALIGN * PER_ALIGN;
    b.ns = (keys + b.per - 1) / b.per;
  }
  return static_cast<int>(blockIdx.z) < b.ns;
}

// A padding row's output is zeros (written by the blocks z = 0 of the row, after the wait).
__device__ __forceinline__ void row_pad_zeros(const RowAttentionParams& p, int D, const RowBlock& b) {
  if (b.ns == 0 && blockIdx.z == 0)
    for (int i = threadIdx.x; i < b.nh * D; i += blockDim.x)
      store_as(p.out, p.out_dtype, b.tok * p.out_stride + static_cast<int64_t>(b.h0) * D + i, 0.0f);
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

// Fused RoPE + KV write (p.rope.qkv set): the block's query heads of its decode row (token b.tok at
// position ctx - 1) rotated into q_s (times qscale), the row's new key and value rounded to the
// cache type into new_kv, and, by the first head chunk's z = 0 block of the KV head, written to
// the cache: the same bits as rope_kv_write (rope_chunk4) followed by the unfused kernel.
template <int D, class KVT>
__device__ __forceinline__ void rope_decode_row(const RowAttentionParams& p, const RowBlock& b, float qscale,
                                                float (*q_s)[kMaxHeadDim], KVT (*new_kv)[kMaxHeadDim]) {
  constexpr int CPH = D / 4;
  const RopeKvParams& rp = p.rope;
  const int H = static_cast<int>(p.num_heads), KVH = static_cast<int>(p.cache.num_kv_heads);
  const int pos = rp.positions[b.tok], slot = rp.slots[b.tok];
  const float* cs = rp.cos + static_cast<int64_t>(pos) * (D / 2);
  const float* sn = rp.sin + static_cast<int64_t>(pos) * (D / 2);
  const float4* src = reinterpret_cast<const float4*>(rp.qkv) + b.tok * (H + 2 * KVH) * CPH;
  const bool writer = blockIdx.z == 0 && b.h0 == b.kvh * (H / KVH) && slot >= 0;
  const int bs = static_cast<int>(p.cache.block_size);
  const int64_t cache_row = writer ? (static_cast<int64_t>(slot / bs) * KVH + b.kvh) * bs + slot % bs : 0;
  const int chunks = (b.nh + 2) * CPH;  // the block's q heads, then the k head, then the v head
  for (int base = threadIdx.x - (threadIdx.x & 31); base < chunks; base += blockDim.x) {
    const int idx = base + (threadIdx.x & 31);
    const bool valid = idx < chunks;
    const int j = idx / CPH, c = idx - j * CPH;
    const int hh = j < b.nh ? b.h0 + j : (j == b.nh ? H + b.kvh : H + KVH + b.kvh);
    const float4 v = rope_chunk4<D>(rp, src, hh, c, valid, cs, sn);
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

// The warps' partial results (m, l and unnormalised o per warp and head, in shared memory) merged
// in warp order into the split's result: the output itself when the row has one split, else the
// split's slot of the workspace.
template <int WARPS, int HPB>
__device__ __forceinline__ void store_split(const RowAttentionParams& p, const float* o_s, int o_ld, const float* ml_s,
                                            int r, int h0, int nh, int ns, int split, int64_t tok) {
  const int D = static_cast<int>(p.cache.head_dim);
  const int H = static_cast<int>(p.num_heads);
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) M = fmaxf(M, ml_s[(w * HPB + h) * 2]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const float mw = ml_s[(w * HPB + h) * 2];
        const float f = mw == -INFINITY ? 0.0f : exp2f(mw - M);
        L += ml_s[(w * HPB + h) * 2 + 1] * f;
        O += o_s[(w * HPB + h) * o_ld + d] * f;
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
  __shared__ __align__(16) KVT new_kv[2][kMaxHeadDim];  // fused RoPE: the row's new key and value
  __shared__ int last_block;
  pdl_trigger();

  const int D = static_cast<int>(p.cache.head_dim);
  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  // The row's geometry, block-table row and (decode) the lines of its older keys come from the
  // step's inputs and earlier steps: read before waiting for the predecessor.
  RowBlock b;
  const bool work = row_block<kMaxG>(p, D, b);
  const int32_t* table = work ? p.block_tables + static_cast<int64_t>(p.row_seq[b.r]) * p.bt_stride : nullptr;
  if (work && p.fresh_keys >= 0) warm_keys_l2<KVT>(p, b, table, D);
  pdl_wait();
  if (!work) return row_pad_zeros(p, D, b);
  const int r = b.r, kvh = b.kvh, h0 = b.h0, nh = b.nh, ctx = b.ctx, lo = b.lo, ns = b.ns, per = b.per;
  const int64_t tok = b.tok;

  const float qscale = p.scale * kLog2e;
  // Fused RoPE (non-strided kernels: D = LPK * NV is 64 or 128): key ctx - 1 is new_kv's.
  const bool fused = !STRIDED && p.rope.qkv != nullptr;
  const int newest = fused ? ctx - 1 : -1;
  if constexpr (!STRIDED) {
    if (fused) rope_decode_row<LPK * NV, KVT>(p, b, qscale, q_s, new_kv);
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
  float qr[kMaxG][NV];
#pragma unroll
  for (int h = 0; h < kMaxG; ++h)
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int d = STRIDED ? gl + LPK * i : gl * NV + i;
      qr[h][i] = (h < nh && d < D) ? q_s[h][d] : 0.0f;
    }
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
          if (key != newest) {
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
      for (int h = 0; h < kMaxG; ++h) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; ++i) s = fmaf(qr[h][i], kv[u][i], s);
#pragma unroll
        for (int x = LPK / 2; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
        sc[u][h] = valid[u] ? s : -INFINITY;
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (nk[u]) load_row<KVT, NV, LPK, STRIDED>(new_kv[1], gl, D, true, kv[u]);
      else load_row<KVT, NV, LPK, STRIDED>(vc + off[u], gl, D, valid[u], kv[u]);
    }
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
  store_split<kWarps, kMaxG>(p, &o_s[0][0][0], kMaxHeadDim, &ml_s[0][0][0], r, h0, nh, ns, split, tok);
  __syncthreads();  // o_s / ml_s are rewritten by the next split
  }  // split
  if (ns > 1) combine_splits(p, r, h0, nh, ns, tok, done, &last_block);
}

// ---- Tensor-core kernel: f16 / bf16 cache, head_dim 64 or 128 -----------------------------------
//
// The GQA heads of one KV head are the rows of an m16n8k16 tile (up to kMmaHeads of the 16 rows
// used), so one K / V tile feeds all of them at tensor-core rates and the per-key SIMT work (16-bit
// to f32 conversions, shuffle reductions, FMAs) disappears. A block streams the K / V tiles of all
// its splits (blockIdx.z, + gridDim.z, ...) as one sequence of kMmaKeys-key tiles through a
// two-stage shared-memory ring with cp.async: the next tile, also the first tile of the next split,
// loads while this one computes, so a split boundary leaves no gap in the memory stream (the
// first tile is issued before Q is read). Tiles are gathered through the block table (its entries
// read a tile ahead of the copies that need them) and zero-filled past the split's end; warp w
// owns keys [16 w, 16 w + 16) of every tile: S = Q K^T (Q rounded to the cache type, as in
// prefill), mask, online softmax in registers (exp2, log2(e) folded into the scale), P (16-bit) V
// via ldmatrix.trans. At a split's end the warps' partial
// results are merged in warp order through the stage just computed (the other one is loading),
// then as in the SIMT kernel (split slot or direct store, last block combines).

constexpr int kMmaWarps = 4;
constexpr int kMmaKeys = 16 * kMmaWarps;  // keys per tile
constexpr int kMmaHeads = 8;              // query heads per block (rows 0..7 of the m16 tile)
// K / V ring depth. Measured on the H200 (256 rows x 1500 keys, f16 cache, D 128): 2 stages (3
// blocks an SM) 516 us, 3 stages (2 blocks) 610 us, 4 stages (1 block) 1046 us: more blocks an SM
// beat deeper rings. Also measured and dropped after the warps loaded their own keys (466 us):
// 3 stages (503 us), and an L2 bulk prefetch of each warp's chunks of the tile after next (502 us).
constexpr int kMmaStages = 2;
// Blocks resident an SM at D = 128 (140 registers a thread with per-warp loading, 166 without;
// 70 KiB of shared memory); D = 64 fits more, the grid sizing uses this figure for both.
constexpr int kMmaBlocksPerSm = 3;

template <int D>
struct MmaShape {
  static constexpr int LD = D + 8;  // padded shared-memory row (elements): ldmatrix rows hit distinct banks
  static constexpr int kTileElems = kMmaKeys * LD;
  static constexpr int kSmem = kMmaStages * 2 * kTileElems * 2;  // stages x (K, V) x 16-bit
  static_assert(kMmaWarps * kMmaHeads * D * 4 <= kTileElems * 2, "the warp merge's o fits in a K stage");
  static_assert(kMmaWarps * kMmaHeads * 2 * 4 <= kTileElems * 2, "the warp merge's m, l fit in a V stage");
};

// Online softmax over one warp's 16-key tile for rows 0..7 of the m16 tile (the heads; rows 8..15
// are zero and stay so: their P is set to zero). Row max over the quad, exp2, row sums; the O
// accumulators are rescaled only when some row's max grew (alpha != 1: multiplying by 1 changes
// nothing, so skipping it keeps the results).
template <int DN>
__device__ __forceinline__ void online_softmax_rows8(float (&sc)[2][4], float mx, float& mrow, float& lrow,
                                                     float (&o)[DN][4]) {
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float mn = fmaxf(mrow, mx);
  const float mu = mn == -INFINITY ? 0.0f : mn;
  const float alpha = exp2f(mrow - mu);
  mrow = mn;
  float rs = 0.0f;
#pragma unroll
  for (int n = 0; n < 2; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sc[n][e] = exp2f(sc[n][e] - mu);
      rs += sc[n][e];
    }
  lrow = lrow * alpha + rs;
  if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
    for (int dn = 0; dn < DN; ++dn) {
      o[dn][0] *= alpha;
      o[dn][1] *= alpha;
    }
  }
}

// CHUNKS (block size a multiple of 16): warp w loads the keys it computes, [16 w, 16 w + 16) of
// each tile, which lie in one page (tiles start at multiples of 16): one block-table entry a warp
// and tile, a base address and D / 16 pairs of 16-byte copies a lane with constant offsets, and
// the warps need no block-wide barrier per tile (each waits for its own copies). Otherwise the
// block loads a tile together, row by row through the table, with a barrier per tile.
template <class KVT, int D, bool CHUNKS>
__global__ __launch_bounds__(kMmaWarps * 32) void row_attention_mma_kernel(RowAttentionParams p) {
  using S = MmaShape<D>;
  constexpr int LD = S::LD;
  constexpr int STAGES = kMmaStages;
  extern __shared__ __align__(16) uint8_t smem[];
  KVT* sK = reinterpret_cast<KVT*>(smem);  // [STAGES][kMmaKeys][LD]
  KVT* sV = sK + STAGES * S::kTileElems;   // [STAGES][kMmaKeys][LD]
  __shared__ int last_block;
  const KVT tag{};
  pdl_trigger();
  pdl_wait();

  const int KVH = static_cast<int>(p.cache.num_kv_heads);
  RowBlock b;
  if (!row_block<kMmaHeads, 16, kMmaKeys>(p, D, b)) return row_pad_zeros(p, D, b);
  const int r = b.r, kvh = b.kvh, h0 = b.h0, nh = b.nh, ctx = b.ctx, lo = b.lo, ns = b.ns, per = b.per;
  const int first = b.first;
  const int64_t tok = b.tok;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;

  const int32_t* table = p.block_tables + static_cast<int64_t>(p.row_seq[r]) * p.bt_stride;
  const int bs = static_cast<int>(p.cache.block_size);
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;
  auto page_of = [&](int key) { return bs_pow2 ? key >> bs_shift : key / bs; };
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);
  const int64_t page_elems = static_cast<int64_t>(KVH) * bs * D;
  const int64_t head_elems = static_cast<int64_t>(kvh) * bs * D;
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  auto split_end = [&](int split) { return min(ctx, lo + (split + 1) * per); };
  auto split_tiles = [&](int split) { return (split_end(split) - (lo + split * per) + kMmaKeys - 1) / kMmaKeys; };
  auto tile_first_key = [&](int split, int t) { return lo + split * per + t * kMmaKeys; };
  // A position in the block's tile stream: tile t of `split` (of nt tiles); past the end: split >= ns.
  struct Cursor {
    int split, t, nt;
  };
  auto advance = [&](Cursor& c) {
    if (++c.t == c.nt) {
      c.split += gridDim.z;
      c.t = 0;
      if (c.split < ns) c.nt = split_tiles(c.split);
    }
  };
  // Block-wide loading (!CHUNKS): thread rows crow + i * kRowsPerPass of a tile, one table entry each.
  constexpr int kRowsPerPass = kMmaWarps * 32 / CPR;
  constexpr int kPasses = CHUNKS ? 1 : kMmaKeys / kRowsPerPass;
  const int crow = tid / CPR, cchunk = (tid - crow * CPR) * 8;
  // Warp loading (CHUNKS): lane rows wrow + i * kLaneRowStep of the warp's 16 keys, column wcol.
  constexpr int kLaneRowStep = 32 / CPR, kLaneCopies = 16 / kLaneRowStep;
  const int wrow = lane / CPR, wcol = (lane - wrow * CPR) * 8;
  // The block-table entries the copies of the tile at cursor c need (CHUNKS: the warp's page). Read
  // one tile ahead of their use, so no cp.async waits on a dependent table load.
  auto fetch_pages = [&](const Cursor& c, int (&pages)[kPasses]) {
    if (c.split >= ns) return;
    const int ke = split_end(c.split), k0 = tile_first_key(c.split, c.t);
    if constexpr (CHUNKS) {
      const int key = k0 + 16 * warp;
      pages[0] = key < ke ? table[page_of(key)] : 0;
    } else {
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int key = k0 + crow + i * kRowsPerPass;
        pages[i] = key < ke ? table[page_of(key)] : 0;
      }
    }
  };
  // The tile at cursor c into a ring stage (one commit group, empty past the stream's end); CHUNKS:
  // this warp's rows only.
  auto load_tile = [&](const Cursor& c, const int (&pages)[kPasses], int stage) {
    if (c.split < ns) {
      KVT* dK = sK + stage * S::kTileElems;
      KVT* dV = sV + stage * S::kTileElems;
      const int ke = split_end(c.split), k0 = tile_first_key(c.split, c.t);
      if constexpr (CHUNKS) {
        const int key0 = k0 + 16 * warp;
        const int in_page = key0 < ke ? key0 - page_of(key0) * bs : 0;
        const int64_t off = pages[0] * page_elems + head_elems + static_cast<int64_t>(in_page + wrow) * D + wcol;
        const int drow = (16 * warp + wrow) * LD + wcol;
#pragma unroll
        for (int i = 0; i < kLaneCopies; ++i) {
          const int key = key0 + wrow + i * kLaneRowStep;
          const bool valid = key < ke && key >= first;  // zero-fill, not read: masked keys stay finite
          cp_async16(dK + drow + i * kLaneRowStep * LD, kc + off + i * kLaneRowStep * D, valid);
          cp_async16(dV + drow + i * kLaneRowStep * LD, vc + off + i * kLaneRowStep * D, valid);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
          const int row = crow + i * kRowsPerPass;
          const int key = k0 + row;
          const bool valid = key < ke && key >= first;
          int64_t off = 0;
          if (valid) off = pages[i] * page_elems + head_elems + static_cast<int64_t>(key - page_of(key) * bs) * D + cchunk;
          cp_async16(dK + row * LD + cchunk, kc + off, valid);
          cp_async16(dV + row * LD + cchunk, vc + off, valid);
        }
      }
    }
    cp_async_commit();
  };
  // CHUNKS: a warp reads only what it copied, so a warp barrier orders its lanes' copies and reads.
  auto tile_barrier = [] {
    if constexpr (CHUNKS) __syncwarp();
    else __syncthreads();
  };
  Cursor cur{static_cast<int>(blockIdx.z), 0, 0};
  cur.nt = split_tiles(cur.split);
  Cursor ld = cur;
  int pages[kPasses];
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) {
    fetch_pages(ld, pages);
    load_tile(ld, pages, i);
    advance(ld);
  }
  fetch_pages(ld, pages);

  // Q as A fragments (rows = heads; rows g + 8 and rows >= nh are zero), rounded to the cache type.
  uint32_t qf[D / 16][4];
  {
    const float* qrow = p.q + tok * p.q_stride + static_cast<int64_t>(h0 + g) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      float2 a = make_float2(0.f, 0.f), b = make_float2(0.f, 0.f);
      if (g < nh) {
        a = *reinterpret_cast<const float2*>(qrow + kk * 16 + 2 * t4);
        b = *reinterpret_cast<const float2*>(qrow + kk * 16 + 8 + 2 * t4);
      }
      qf[kk][0] = pack2(a.x, a.y, tag);
      qf[kk][1] = 0u;
      qf[kk][2] = pack2(b.x, b.y, tag);
      qf[kk][3] = 0u;
    }
  }
  const float sl2 = p.scale * kLog2e;

  // Accumulators of rows g (elements 0, 1); elements 2, 3 belong to the zero rows g + 8.
  float o[D / 8][4];
  float mrow, lrow;
  auto reset = [&] {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    mrow = -INFINITY;
    lrow = 0.0f;
  };
  reset();
  int done = 0, stage = 0, load_stage = STAGES - 1;
  for (;;) {
    // Refill the stage computed last iteration with the tile STAGES - 1 ahead, wait for this one.
    load_tile(ld, pages, load_stage);
    advance(ld);
    fetch_pages(ld, pages);  // used next iteration
    load_stage = load_stage + 1 == STAGES ? 0 : load_stage + 1;
    cp_async_wait<STAGES - 1>();
    tile_barrier();
    const KVT* cK = sK + stage * S::kTileElems + warp * 16 * LD;
    const KVT* cV = sV + stage * S::kTileElems + warp * 16 * LD;

    // S = Q K^T over this warp's 16 keys (two n8 tiles).
    float sc[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bf[4];
      ldmatrix_x4(bf, cK + (((lane >> 4) << 3) + (lane & 7)) * LD + kk * 16 + (((lane >> 3) & 1) << 3));
      mma16816(sc[0], qf[kk], bf[0], bf[1], tag);
      mma16816(sc[1], qf[kk], bf[2], bf[3], tag);
    }
    // Scale; mask keys outside [first, split end) (only a tile that reaches past either); row max.
    const int ke = split_end(cur.split), kbase = tile_first_key(cur.split, cur.t) + warp * 16;
    float mx = -INFINITY;
    if (kbase + 16 <= ke && kbase >= first) {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          sc[n][e] *= sl2;
          mx = fmaxf(mx, sc[n][e]);
        }
    } else {
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kbase + n * 8 + t4 * 2 + e;
          sc[n][e] = key < ke && key >= first ? sc[n][e] * sl2 : -INFINITY;
          mx = fmaxf(mx, sc[n][e]);
        }
    }
    online_softmax_rows8(sc, mx, mrow, lrow, o);
    // O += P V: P (rows g: heads; rows g + 8: zero) from the score fragments, V through ldmatrix.trans.
    uint32_t a[4];
    a[0] = pack2(sc[0][0], sc[0][1], tag);
    a[1] = 0u;
    a[2] = pack2(sc[1][0], sc[1][1], tag);
    a[3] = 0u;
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, cV + ((((lane >> 3) & 1) << 3) + (lane & 7)) * LD + dn * 16 + ((lane >> 4) << 3));
      mma16816(o[2 * dn], a, bf[0], bf[1], tag);
      mma16816(o[2 * dn + 1], a, bf[2], bf[3], tag);
    }
    tile_barrier();  // this stage is free: the next iteration refills it

    if (cur.t + 1 == cur.nt) {
      // The split is complete: per-warp results into this stage (the other holds loads in flight),
      // merged in warp order.
      ++done;
      __syncthreads();  // CHUNKS: every warp is done reading this stage
      lrow += __shfl_xor_sync(0xffffffffu, lrow, 1);
      lrow += __shfl_xor_sync(0xffffffffu, lrow, 2);
      float* o_s = reinterpret_cast<float*>(sK + stage * S::kTileElems);   // [warp][head][D]
      float* ml_s = reinterpret_cast<float*>(sV + stage * S::kTileElems);  // [warp][head][2]
      if (g < nh) {
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          o_s[(warp * kMmaHeads + g) * D + dn * 8 + 2 * t4] = o[dn][0];
          o_s[(warp * kMmaHeads + g) * D + dn * 8 + 2 * t4 + 1] = o[dn][1];
        }
        if (t4 == 0) {
          ml_s[(warp * kMmaHeads + g) * 2] = mrow;
          ml_s[(warp * kMmaHeads + g) * 2 + 1] = lrow;
        }
      }
      __syncthreads();
      store_split<kMmaWarps, kMmaHeads>(p, o_s, D, ml_s, r, h0, nh, ns, cur.split, tok);
      __syncthreads();  // the next iteration refills this stage
      if (cur.split + static_cast<int>(gridDim.z) >= ns) break;
      reset();
    }
    advance(cur);
    stage = stage + 1 == STAGES ? 0 : stage + 1;
  }
  cp_async_wait<0>();  // the empty groups committed past the stream's end
  if (ns > 1) combine_splits(p, r, h0, nh, ns, tok, done, &last_block);
}

template <class KVT, int D, bool CHUNKS>
void launch_mma_kernel(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  constexpr int smem = MmaShape<D>::kSmem;
  static bool configured = false;  // per instantiation; the attribute is per device function
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(row_attention_mma_kernel<KVT, D, CHUNKS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem));
    configured = true;
  }
  launch_pdl(row_attention_mma_kernel<KVT, D, CHUNKS>, grid, dim3(kMmaWarps * 32), smem, s, p);
}
template <class KVT, int D>
void launch_mma(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  if (p.cache.block_size % 16 == 0) launch_mma_kernel<KVT, D, true>(p, grid, s);
  else launch_mma_kernel<KVT, D, false>(p, grid, s);
}

// The tensor-core kernel applies: asked for, not a short launch, 16-bit cache, head_dim 64 / 128.
bool use_mma(const RowAttentionParams& p) {
  return p.tensor_cores && (p.tensor_cores_short || !row_attention_short(p.num_rows, p.max_keys)) &&
         (p.cache.dtype == DType::kF16 || p.cache.dtype == DType::kBF16) &&
         (p.cache.head_dim == 64 || p.cache.head_dim == 128);
}

template <class KVT>
void launch_rows(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  const int64_t D = p.cache.head_dim;
  if constexpr (sizeof(KVT) == 2) {
    if (use_mma(p)) return D == 128 ? launch_mma<KVT, 128>(p, grid, s) : launch_mma<KVT, 64>(p, grid, s);
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

void row_attention(const RowAttentionParams& p, cudaStream_t s) {
  p.check();
  if (p.num_rows <= 0) return;
  const int64_t G = p.num_heads / p.cache.num_kv_heads;
  const bool mma = use_mma(p);
  const int64_t chunks = ceil_div(G, mma ? kMmaHeads : kMaxG);
  // A block loops over the splits beyond gridDim.z. Aimed at: twice the blocks an SM holds for the
  // tensor-core kernel (64 rows x 1000 keys: 110 us vs 123 with one wave's worth), ~4 blocks an SM
  // for the SIMT one.
  const int sms = p.num_sms > 0 ? p.num_sms : 132;
  const int64_t blocks_per_split = p.num_rows * p.cache.num_kv_heads * chunks;
  const int max_splits = p.max_keys > 0 ? row_num_splits(p.max_keys) : kRowMaxSplits;
  const int64_t per_sm = p.blocks_per_sm > 0 ? p.blocks_per_sm : (mma ? 2 * kMmaBlocksPerSm : 4);
  int64_t z = ceil_div(per_sm * sms, blocks_per_split);
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
