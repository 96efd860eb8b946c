// Split-KV decode attention on tensor cores (f16 / bf16 / FP8 E4M3 cache, head_dim 64 or 128): the
// kernel row_attention() picks for all but short launches (attention_decode.cu has the SIMT
// kernel, the dispatch and the outline both share; row_attention.cuh).
//
// The keys are the m16 rows of the m16n8k16 mma and the GQA heads of one KV head its n8 columns
// (up to kMmaHeads): S^T = K Q^T and O^T += V^T P^T, so one K / V tile feeds all the heads at
// tensor-core rates and the per-key SIMT work (16-bit to f32 conversions, shuffle reductions,
// FMAs) disappears. (The first version had the heads as the m16 rows: 8 of the 16 rows used, twice
// the mma instructions, 64 accumulator registers a thread at D = 128 instead of 32. Measured on the
// H200, bf16 cache: 397 vs 398 us at 256 rows x 1500 keys, 85.8 vs 92.4 us at 64 x 1000.)
//
// A block streams the K / V tiles of all its splits (blockIdx.z, + gridDim.z, ...) as one sequence
// of kMmaKeys-key tiles through a two-stage shared-memory ring with cp.async: the next tile, also
// the first tile of the next split, loads while this one computes, so a split boundary leaves no
// gap in the memory stream (the first tile is issued before Q is read). Tiles are gathered through
// the block table (its entries read a tile ahead of the copies that need them) and zero-filled
// past the split's end; warp w owns keys [16 w, 16 w + 16) of every tile: S^T (Q rounded to the
// mma type, as in prefill), mask, online softmax in registers (exp2, log2(e) folded into the
// scale; a head's max over the eight lanes of its column), P^T (16-bit) into B fragments through
// movmatrix, O^T += V^T P^T. At a split's end the warps' partial results are merged in warp order
// through the stage just computed (the other one is loading), then as in the SIMT kernel (split
// slot or direct store, last block combines).
//
// 16-bit caches reach the mma through ldmatrix (K) and ldmatrix.trans (V). An FP8 cache goes
// through the ring as bytes and each thread reads its fragments straight from it and converts them
// in registers (exact: every E4M3 value is an f16 value; the mma runs in f16). K's head dims are
// assigned so that a thread's four values of a k16 step are four adjacent bytes of one key (Q gets
// the same assignment, so the dot products are unchanged); the output dims so that a thread's V
// values are D / 8 adjacent bytes of four keys (tile dm's rows g, g + 8 are dims (D / 8) g + 2 dm,
// + 1, mapped back when the split is stored). Measured on the H200 at 256 rows x 1500 keys: 217.4
// us, 0.849 of the copy bandwidth, against 344.7 us for the first FP8 version, which converted
// each warp's rows into an f16 tile in shared memory for ldmatrix.
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/row_attention.cuh"

namespace pagoda::cuda {
namespace {

using namespace row_attention_detail;

constexpr int kMmaWarps = 4;
constexpr int kMmaKeys = 16 * kMmaWarps;  // keys per tile
// K / V ring depth. Measured on the H200 with the first (heads-as-rows) version of the kernel (256
// rows x 1500 keys, f16 cache, D 128): 2 stages (3 blocks an SM) 516 us, 3 stages (2 blocks) 610
// us, 4 stages (1 block) 1046 us: more blocks an SM beat deeper rings. Also measured and dropped
// after the warps loaded their own keys (466 us): 3 stages (503 us), and an L2 bulk prefetch of
// each warp's chunks of the tile after next (502 us). With the keys as rows (docs/decisions.md#d14):
// 4 stages for launches of at most a block an SM (batch 1) changed nothing (29.2 vs 29.0 us at
// 1 x 8192 keys).
constexpr int kMmaStages = 2;

// Shared memory: a ring of kMmaStages stages, each a K tile and a V tile of kMmaKeys rows of D
// elements padded by 16 bytes: ldmatrix rows hit distinct banks, and so do the FP8 kernel's row
// reads at D = 128 (at D = 64 its K reads, 16 bytes a lane of rows g and g + 1, are 2-way
// conflicted: the 80-byte stride that keeps its V reads conflict-free puts row 1's last chunk on
// row 0's first; a K-only stride or swizzle would fix it, unmeasured). The FP8 ring holds half the
// bytes of a 16-bit one. At a split's end the warps' partial results go through the stage just
// computed (o [warp][head][D], then m, l [warp][head][2]; the o stores are 4- to 16-way
// conflicted, once a split).
template <class KVT, int D>
struct MmaShape {
  static constexpr int LD = D + kChunkElems<KVT>;  // row stride (elements): 16 bytes of padding
  static constexpr int kTileBytes = kMmaKeys * LD * static_cast<int>(sizeof(KVT));
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kSmem = kMmaStages * kStageBytes;
  static constexpr int kMergeO = kMmaWarps * kMmaHeads * D;  // floats before m, l
  static_assert((kMergeO + kMmaWarps * kMmaHeads * 2) * 4 <= kStageBytes, "the warp merge fits in a stage");
};

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}
// N 32-bit words from shared memory (16-byte aligned when N >= 4, 8-byte when N == 2).
template <int N>
__device__ __forceinline__ void load_words(const void* src, uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = static_cast<const uint4*>(src)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else {
    static_assert(N == 2, "2, 4 or a multiple of 4 words");
    const uint2 v = *static_cast<const uint2*>(src);
    w[0] = v.x, w[1] = v.y;
  }
}

// CHUNKS (block size a multiple of 16): warp w loads the keys it computes, [16 w, 16 w + 16) of
// each tile, which lie in one page (tiles start at multiples of 16): one block-table entry a warp
// and tile, a base address and D / 16 (FP8: D / 32) pairs of 16-byte copies a lane with constant
// offsets, and the warps need no block-wide barrier per tile (each waits for its own copies).
// Otherwise (16-bit caches only) the block loads a tile together, row by row through the table,
// with a barrier per tile; ptxas spills 20 bytes in that path's D = 64 instantiations.
template <class KVT, int D, bool CHUNKS>
__global__ __launch_bounds__(kMmaWarps * 32) void row_attention_mma_kernel(RowAttentionParams p) {
  constexpr bool F8 = kIsFp8<KVT>;
  static_assert(!F8 || CHUNKS, "the FP8 ring is loaded per warp (block sizes a multiple of 16)");
  using MT = mma_type_t<KVT>;
  using S = MmaShape<KVT, D>;
  constexpr int LD = S::LD;
  constexpr int STAGES = kMmaStages;
  extern __shared__ __align__(16) uint8_t smem[];
  auto stage_k = [&](int stage) { return reinterpret_cast<KVT*>(smem + stage * S::kStageBytes); };
  auto stage_v = [&](int stage) { return reinterpret_cast<KVT*>(smem + stage * S::kStageBytes + S::kTileBytes); };
  __shared__ int last_block;
  const MT tag{};
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
  constexpr int EPC = kChunkElems<KVT>;
  constexpr int CPR = D / EPC;  // 16-byte chunks per row
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
  const int crow = tid / CPR, cchunk = (tid - crow * CPR) * EPC;
  // Warp loading (CHUNKS): lane rows wrow + i * kLaneRowStep of the warp's 16 keys, column wcol.
  constexpr int kLaneRowStep = 32 / CPR, kLaneCopies = 16 / kLaneRowStep;
  const int wrow = lane / CPR, wcol = (lane - wrow * CPR) * EPC;
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
      KVT* dK = stage_k(stage);
      KVT* dV = stage_v(stage);
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
      } else if constexpr (!F8) {
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

  // Q^T as B fragments (column g: head h0 + g; heads >= nh zero), rounded to the mma type. FP8: in
  // step kk, thread t4's four head dims are (D / 4) t4 + 4 kk + 0..3, as its K values are.
  uint32_t qf[D / 16][2];
  {
    const float* qrow = p.q + tok * p.q_stride + static_cast<int64_t>(h0 + g) * D;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int d0 = F8 ? (D / 4) * t4 + 4 * kk : kk * 16 + 2 * t4, d1 = F8 ? d0 + 2 : d0 + 8;
      float2 a = make_float2(0.f, 0.f), b = make_float2(0.f, 0.f);
      if (g < nh) {
        a = *reinterpret_cast<const float2*>(qrow + d0);
        b = *reinterpret_cast<const float2*>(qrow + d1);
      }
      qf[kk][0] = pack2(a.x, a.y, tag);
      qf[kk][1] = pack2(b.x, b.y, tag);
    }
  }
  const float sl2 = p.scale * kLog2e;
  const float cap_l2 = p.softcap * kLog2e;  // 0: no soft-cap

  // O^T tiles of 16 dims (elements 0, 1: dim row g, heads 2 t4 and 2 t4 + 1; 2, 3: dim row g + 8),
  // the running max and partial sum (this thread's keys) of heads 2 t4 and 2 t4 + 1.
  constexpr int ON = D / 16;
  float o[ON][4];
  float mrow[2], lrow[2];
  auto reset = [&] {
#pragma unroll
    for (int i = 0; i < ON; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    mrow[0] = mrow[1] = -INFINITY;
    lrow[0] = lrow[1] = 0.0f;
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
    const KVT* cK = stage_k(stage) + warp * 16 * LD;
    const KVT* cV = stage_v(stage) + warp * 16 * LD;
    const int ke = split_end(cur.split), kbase = tile_first_key(cur.split, cur.t) + warp * 16;
    const bool full = kbase + 16 <= ke && kbase >= first;

    // S^T = K Q^T: rows keys kbase + g (elements 0, 1) and + g + 8 (2, 3), columns heads 2 t4, 2 t4 + 1.
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (F8) {
      uint32_t k0[D / 16], k8[D / 16];  // keys g, g + 8: bytes [(D / 4) t4, (D / 4) (t4 + 1))
      load_words(cK + g * LD + (D / 4) * t4, k0);
      load_words(cK + (g + 8) * LD + (D / 4) * t4, k8);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t a[4] = {e4m3x2_to_f16x2(k0[kk]), e4m3x2_to_f16x2(k8[kk]), e4m3x2_to_f16x2(k0[kk] >> 16),
                               e4m3x2_to_f16x2(k8[kk] >> 16)};
        mma16816(sc, a, qf[kk][0], qf[kk][1], tag);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, cK + ((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + kk * 16 + ((lane >> 4) << 3));
        mma16816(sc, a, qf[kk][0], qf[kk][1], tag);
      }
    }
    // Scale; mask keys outside [first, split end) (only a tile that reaches past either); each
    // head's max over the 16 keys (the eight lanes of its column: xor 4, 8, 16).
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = kbase + g + 8 * (e >> 1);
      sc[e] = full || (key < ke && key >= first) ? softcap_log2(sc[e] * sl2, cap_l2) : -INFINITY;
    }
    float mu[2], alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float mx = fmaxf(sc[i], sc[i + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float mn = fmaxf(mrow[i], mx);
      mu[i] = mn == -INFINITY ? 0.0f : mn;
      alpha[i] = exp2f(mrow[i] - mu[i]);
      mrow[i] = mn;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[e] = exp2f(sc[e] - mu[e & 1]);
#pragma unroll
    for (int i = 0; i < 2; ++i) lrow[i] = lrow[i] * alpha[i] + sc[i] + sc[i + 2];
    // Rescale only when some head's max grew (multiplying by 1 changes nothing).
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int dm = 0; dm < ON; ++dm)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dm][e] *= alpha[e & 1];
    }
    // P^T as B fragments (rows keys, column g: head g): the transposes of the score pairs.
    const uint32_t pb0 = movmatrix_trans(pack2(sc[0], sc[1], tag));
    const uint32_t pb1 = movmatrix_trans(pack2(sc[2], sc[3], tag));
    // O^T += V^T P^T, a tile of 16 dims at a time.
    if constexpr (F8) {
      // Keys 2 t4, 2 t4 + 1, 2 t4 + 8, 2 t4 + 9, bytes [(D / 8) g, (D / 8) (g + 1)): byte pairs of
      // two keys gathered by a byte permute, tile dm's rows g and g + 8 are dims (D / 8) g + 2 dm, + 1.
      constexpr int VW = D / 32;
      uint32_t v0[VW], v1[VW], v8[VW], v9[VW];
      const KVT* vr = cV + 2 * t4 * LD + (D / 8) * g;
      load_words(vr, v0);
      load_words(vr + LD, v1);
      load_words(vr + 8 * LD, v8);
      load_words(vr + 9 * LD, v9);
#pragma unroll
      for (int w = 0; w < VW; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // the thread's dims 4 w + 2 h, + 1: tile 2 w + h
          const uint32_t sel = h ? 0x7362u : 0x5140u;
          const uint32_t lo = __byte_perm(v0[w], v1[w], sel), hi = __byte_perm(v8[w], v9[w], sel);
          const uint32_t a[4] = {e4m3x2_to_f16x2(lo), e4m3x2_to_f16x2(lo >> 16), e4m3x2_to_f16x2(hi),
                                 e4m3x2_to_f16x2(hi >> 16)};
          mma16816(o[2 * w + h], a, pb0, pb1, tag);
        }
    } else {
#pragma unroll
      for (int dm = 0; dm < ON; ++dm) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, cV + ((lane & 7) + (((lane >> 4) & 1) << 3)) * LD + dm * 16 + (((lane >> 3) & 1) << 3));
        mma16816(o[dm], a, pb0, pb1, tag);
      }
    }
    tile_barrier();  // this stage is free: the next iteration refills it

    if (cur.t + 1 == cur.nt) {
      // The split is complete: per-warp results into this stage (the other holds loads in flight),
      // merged in warp order.
      ++done;
      __syncthreads();  // CHUNKS: every warp is done reading this stage
      float* o_s = reinterpret_cast<float*>(smem + stage * S::kStageBytes);  // [warp][head][D]
      float* ml_s = o_s + S::kMergeO;                                          // [warp][head][2]
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int m = 4; m < 32; m <<= 1) lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], m);
#pragma unroll
      for (int dm = 0; dm < ON; ++dm)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = 2 * t4 + (e & 1);
          const int d = F8 ? (D / 8) * g + 2 * dm + (e >> 1) : dm * 16 + g + 8 * (e >> 1);
          if (h < nh) o_s[(warp * kMmaHeads + h) * D + d] = o[dm][e];
        }
      if (g == 0)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (2 * t4 + i < nh) {
            ml_s[(warp * kMmaHeads + 2 * t4 + i) * 2] = mrow[i];
            ml_s[(warp * kMmaHeads + 2 * t4 + i) * 2 + 1] = lrow[i];
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
  constexpr int smem = MmaShape<KVT, D>::kSmem;
  static bool configured = false;  // per instantiation; the attribute is per device function
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(row_attention_mma_kernel<KVT, D, CHUNKS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem));
    configured = true;
  }
  launch_pdl(row_attention_mma_kernel<KVT, D, CHUNKS>, grid, dim3(kMmaWarps * 32), smem, s, p);
}
template <class KVT, int D>
void launch_mma_d(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  if constexpr (kIsFp8<KVT>) {
    PAGODA_CUDA_REQUIRE(p.cache.block_size % 16 == 0, "row_attention: the FP8 tensor-core kernel needs block sizes a multiple of 16");
    launch_mma_kernel<KVT, D, true>(p, grid, s);
  } else if (p.cache.block_size % 16 == 0) {
    launch_mma_kernel<KVT, D, true>(p, grid, s);
  } else {
    launch_mma_kernel<KVT, D, false>(p, grid, s);
  }
}

}  // namespace

void row_attention_detail::launch_mma(const RowAttentionParams& p, dim3 grid, cudaStream_t s) {
  const bool d128 = p.cache.head_dim == 128;
  if (p.cache.dtype == DType::kF16) d128 ? launch_mma_d<f16, 128>(p, grid, s) : launch_mma_d<f16, 64>(p, grid, s);
  else if (p.cache.dtype == DType::kF8E4M3) d128 ? launch_mma_d<f8, 128>(p, grid, s) : launch_mma_d<f8, 64>(p, grid, s);
  else d128 ? launch_mma_d<bf16, 128>(p, grid, s) : launch_mma_d<bf16, 64>(p, grid, s);
}

}  // namespace pagoda::cuda
