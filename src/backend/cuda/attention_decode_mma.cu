// Split-KV decode attention on tensor cores (f16 / bf16 cache, head_dim 64 or 128): the kernel
// row_attention() picks for all but short launches (attention_decode.cu has the SIMT kernel, the
// dispatch and the outline both share; row_attention.cuh).
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
// via ldmatrix.trans. At a split's end the warps' partial results are merged in warp order through
// the stage just computed (the other one is loading), then as in the SIMT kernel (split slot or
// direct store, last block combines).
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_utils.cuh"
#include "backend/cuda/row_attention.cuh"

namespace pagoda::cuda {
namespace {

using namespace row_attention_detail;

constexpr int kMmaWarps = 4;
constexpr int kMmaKeys = 16 * kMmaWarps;  // keys per tile
// K / V ring depth. Measured on the H200 (256 rows x 1500 keys, f16 cache, D 128): 2 stages (3
// blocks an SM) 516 us, 3 stages (2 blocks) 610 us, 4 stages (1 block) 1046 us: more blocks an SM
// beat deeper rings. Also measured and dropped after the warps loaded their own keys (466 us):
// 3 stages (503 us), and an L2 bulk prefetch of each warp's chunks of the tile after next (502 us).
constexpr int kMmaStages = 2;

// KVT: the cache's element type. 16-bit caches go through the ring as they are. An FP8 cache
// (F8) goes through the ring as bytes (rows of D bytes) and each warp converts its rows of the
// current tile to f16 in one converted tile (K, V) before the mma (exact: every E4M3 value is an
// f16 value); the FP8 ring holds half the bytes of a 16-bit one.
template <int D, bool F8 = false>
struct MmaShape {
  static constexpr int LD = D + 8;  // padded shared-memory row (elements): ldmatrix rows hit distinct banks
  static constexpr int kTileElems = kMmaKeys * LD;
  static constexpr int kRingTiles = F8 ? 1 : kMmaStages;  // 16-bit tiles (K and V each)
  static constexpr int kSmem = kRingTiles * 2 * kTileElems * 2 + (F8 ? kMmaStages * 2 * kMmaKeys * D : 0);
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
  constexpr bool F8 = std::is_same_v<KVT, f8>;
  static_assert(!F8 || CHUNKS, "the FP8 ring is loaded per warp (block sizes a multiple of 16)");
  using MT = std::conditional_t<F8, f16, KVT>;  // the mma's 16-bit type
  using S = MmaShape<D, F8>;
  constexpr int LD = S::LD;
  constexpr int STAGES = kMmaStages;
  constexpr int SLD = F8 ? D : LD;  // row stride of the ring (elements)
  constexpr int kStageElems = kMmaKeys * SLD;
  extern __shared__ __align__(16) uint8_t smem[];
  MT* sK = reinterpret_cast<MT*>(smem);        // 16-bit: the ring [STAGES][kMmaKeys][LD]; F8: the converted tile
  MT* sV = sK + S::kRingTiles * S::kTileElems;  // the same for V
  KVT* rK = F8 ? reinterpret_cast<KVT*>(sV + S::kRingTiles * S::kTileElems) : reinterpret_cast<KVT*>(sK);  // the ring
  KVT* rV = F8 ? rK + STAGES * kStageElems : reinterpret_cast<KVT*>(sV);
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
  constexpr int EPC = 16 / static_cast<int>(sizeof(KVT));  // elements a 16-byte chunk
  constexpr int CPR = D / EPC;                               // 16-byte chunks per row
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
      KVT* dK = rK + stage * kStageElems;
      KVT* dV = rV + stage * kStageElems;
      const int ke = split_end(c.split), k0 = tile_first_key(c.split, c.t);
      if constexpr (CHUNKS) {
        const int key0 = k0 + 16 * warp;
        const int in_page = key0 < ke ? key0 - page_of(key0) * bs : 0;
        const int64_t off = pages[0] * page_elems + head_elems + static_cast<int64_t>(in_page + wrow) * D + wcol;
        const int drow = (16 * warp + wrow) * SLD + wcol;
#pragma unroll
        for (int i = 0; i < kLaneCopies; ++i) {
          const int key = key0 + wrow + i * kLaneRowStep;
          const bool valid = key < ke && key >= first;  // zero-fill, not read: masked keys stay finite
          cp_async16(dK + drow + i * kLaneRowStep * SLD, kc + off + i * kLaneRowStep * D, valid);
          cp_async16(dV + drow + i * kLaneRowStep * SLD, vc + off + i * kLaneRowStep * D, valid);
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
    if constexpr (F8) {
      // This warp's 16 rows of K and V: FP8 ring stage -> f16 tile (16 values a 16-byte chunk).
      constexpr int kChunks = 16 * CPR;
#pragma unroll
      for (int i = lane; i < 2 * kChunks; i += 32) {
        const bool isv = i >= kChunks;
        const int j = isv ? i - kChunks : i;
        const int row = 16 * warp + j / CPR, c = j % CPR;
        fp8x16_to_f16((isv ? rV : rK) + stage * kStageElems + row * SLD + c * EPC, (isv ? sV : sK) + row * LD + c * EPC);
      }
      __syncwarp();
    }
    const MT* cK = sK + (F8 ? 0 : stage * S::kTileElems) + warp * 16 * LD;
    const MT* cV = sV + (F8 ? 0 : stage * S::kTileElems) + warp * 16 * LD;

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
      float* o_s = reinterpret_cast<float*>(sK + (F8 ? 0 : stage * S::kTileElems));   // [warp][head][D]
      float* ml_s = reinterpret_cast<float*>(sV + (F8 ? 0 : stage * S::kTileElems));  // [warp][head][2]
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
  constexpr int smem = MmaShape<D, std::is_same_v<KVT, f8>>::kSmem;
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
  if constexpr (std::is_same_v<KVT, f8>) {
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
