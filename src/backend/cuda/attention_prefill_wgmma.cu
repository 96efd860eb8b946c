// Prefill / chunked-prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a), head dim 128,
// f16 / bf16 cache: the same contract as attention_prefill.cu's kernel (varlen batch, causal, GQA,
// sliding window, soft-cap, paged cache), which stays the path of other devices, head dims and
// the FP8 cache. Our own code, written from the FlashAttention algorithm.
//
// A block is two warpgroups and 128 queries of one head (the items' tile_q must be 128); each
// warpgroup owns 64 of them. K and V stream through shared memory in tiles of 128 keys, a
// three-stage ring filled by cp.async (gathered through the block table row by row, its entries
// read a tile ahead; zero-filled past the last key) in the 128-byte swizzled layout wgmma reads.
// Per tile and warpgroup: S (64 x 128) = Q K^T with Q and K both read by wgmma from shared memory
// (no ldmatrix, no register copy of Q), the mask and the online softmax in registers
// (prefill_common.cuh's, as the accumulators have mma.sync's fragment layout), and O (64 x 128) +=
// P V with P from registers and V read transposed from shared memory, issued with the next tile's
// S so that it runs during that tile's softmax (D84).
#include <atomic>
#include <cmath>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_common.cuh"
#include "backend/cuda/wgmma.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kD = 128;                        // head dim
constexpr int kBM = 128;                       // queries a block (two warpgroups of 64)
constexpr int kBN = 128;                       // keys a tile
constexpr int kThreads = 256;
constexpr int kTileBytes = kBN * kD * 2;       // one K or V tile, and the Q tile (kBM == kBN)
// Three stages of the K / V ring (the P V of a tile runs during the next tile's softmax, so the tile
// loaded during iteration t replaces tile t - 2); shared memory: Q, K[3], V[3] and slack to align
// to 1024 (225 KiB: one block an SM).
constexpr int kStages = 3;
constexpr int kSmemBytes = (1 + 2 * kStages) * kTileBytes + 1024;
static_assert(kBM == kBN, "the Q tile shares the K / V tile's layout");

template <class T>
__global__ __launch_bounds__(kThreads, 1) void prefill_attention_wgmma_kernel(PrefillAttentionParams p) {
#if defined(PAGODA_HAVE_WGMMA)
  constexpr int kChunks = kD / 8;  // 16-byte chunks a row
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sQ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* sK = sQ + kTileBytes;            // [kStages]
  uint8_t* sV = sK + kStages * kTileBytes;  // [kStages]
  const T tag{};
  pdl_trigger();
  pdl_wait();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2;  // warpgroup: query rows 64 wg .. 64 wg + 63 of the tile
  const PrefillBlock b(p, kBM);
  const int t_begin = b.kv_begin / kBN, t_end = (b.kv_end + kBN - 1) / kBN;
  const T* kc = static_cast<const T*>(p.cache.k);
  const T* vc = static_cast<const T*>(p.cache.v);

  // Thread tid copies 16-byte chunk lc of rows lr, lr + 16, ... of each tile: per thread, the
  // chunk's place in the cache's block and its swizzled place in the tile are fixed.
  const int lr = tid / kChunks, lc = tid % kChunks;
  static_assert(kThreads == 16 * kChunks, "a pass of the block copies 16 rows");
  const int64_t block_stride = static_cast<int64_t>(b.num_kv_heads) * b.bs * kD;  // elements a cache block
  const int64_t head_off = static_cast<int64_t>(b.kvh) * b.bs * kD + lc * 8;
  const uint32_t dst0 = swizzled_offset(lr, lc, kBN);                 // row lr; row lr + 16 i: + 2048 i
  // The block-table entries of tile t's rows this thread copies (0 past the last key), then the
  // copies themselves: apart, so that the entries can be read a tile ahead.
  using TileBlocks = int32_t[kBN / 16];
  auto fetch_blocks = [&](int t, TileBlocks& tb) {
#pragma unroll
    for (int i = 0; i < kBN / 16; ++i) {
      const int key = t * kBN + lr + 16 * i;
      tb[i] = key < b.kv_end ? b.table[b.block_of(key)] : 0;
    }
  };
  auto copy_tile = [&](int t, int stage, const TileBlocks& tb) {
    uint8_t* dK = sK + stage * kTileBytes + dst0;
    uint8_t* dV = sV + stage * kTileBytes + dst0;
#pragma unroll
    for (int i = 0; i < kBN / 16; ++i) {
      const int key = t * kBN + lr + 16 * i;
      const bool valid = key < b.kv_end;
      const int64_t off = valid ? tb[i] * block_stride + head_off + static_cast<int64_t>(b.slot_of(key)) * kD : 0;
      cp_async16(dK + i * 16 * 128, kc + off, valid);
      cp_async16(dV + i * 16 * 128, vc + off, valid);
    }
    cp_async_commit();
  };
  {
    TileBlocks tb;
    fetch_blocks(t_begin, tb);
    copy_tile(t_begin, 0, tb);
  }
  TileBlocks next_blocks;  // the entries of the next tile to copy, read one tile ahead
  if (t_begin + 1 < t_end) fetch_blocks(t_begin + 1, next_blocks);

  // Q tile: f32 -> T, swizzled (rows past nq are zero).
  for (int i = tid; i < kBM * (kD / 4); i += kThreads) {
    const int row = i / (kD / 4), col = (i - row * (kD / 4)) * 4;
    *reinterpret_cast<uint2*>(sQ + swizzled_offset(row, col / 8, kBM) + (col & 7) * 2) = b.query4(p, row, col, kD, tag);
  }

  // This warpgroup's rows.
  const int wg_row0 = wg * 64;
  const int wg_pos0 = b.first_pos + wg_row0;
  const int g = lane >> 2, t4 = lane & 3;
  const int r0 = wg_row0 + (warp & 3) * 16 + g;  // this thread's rows: r0 and r0 + 8
  const int pos_r[2] = {b.first_pos + r0, b.first_pos + r0 + 8};
  const uint32_t q_addr = smem_addr(sQ) + wg_row0 * 128;

  float o[kD / 8][4];
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  const float sl2 = p.scale * kLog2e;
  const float cap_l2 = p.softcap * kLog2e;  // 0: no soft-cap

  // Every warpgroup computes every tile of the block's range (a tile past its rows' keys is all
  // masked: p = 0, alpha = 1), so no wgmma sits on a divergent path. Tile t's S is issued with
  // tile t - 1's P V (P from registers), and the softmax of tile t runs while that P V does.
  uint32_t pa[kBN / 16][4];
  auto issue_pv = [&](int stage) {
    const uint32_t v_addr = smem_addr(sV + stage * kTileBytes);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_m64n128k16_rs_tb(o, pa[kk], wgmma_desc(v_addr + kk * 16 * 128, kBN * 128, 1024), tag);
    wgmma_commit();
  };
  auto issue_s = [&](float (&s)[kBN / 8][4], int stage) {
    const uint32_t k_addr = smem_addr(sK + stage * kTileBytes);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t col = (kk >> 2) * (kBN * 128) + (kk & 3) * 32;
      wgmma_m64n128k16_ss(s, wgmma_desc(q_addr + col, 16, 1024), wgmma_desc(k_addr + col, 16, 1024), kk > 0, tag);
    }
    wgmma_commit();
  };
  // Tile t landed (the one cp.async group in flight), visible to the async proxy and to every
  // warp; every warp is past iteration t - 1, so the P V of tile t - 2 is done and its stage
  // takes tile t + 1.
  auto next_tile = [&](int t) {
    cp_async_wait<0>();
    fence_proxy_async_shared();
    __syncthreads();
    if (t + 1 < t_end) {
      copy_tile(t + 1, (t + 1 - t_begin) % kStages, next_blocks);
      if (t + 2 < t_end) fetch_blocks(t + 2, next_blocks);
    }
  };
  auto softmax = [&](float (&s)[kBN / 8][4], int t, float (&alpha)[2]) {
    const int kbase = t * kBN;
    const bool need_mask = kbase + kBN - 1 > wg_pos0 || (b.window > 0 && kbase <= wg_pos0 + 63 - b.window);
    float mx[2];
    const float k = prepare_scores(need_mask, s, sl2, cap_l2, kbase, t4, pos_r, b.window, mx);
    online_softmax_tile(s, k, mx, mrow, lrow, alpha);
  };
  auto pack_p = [&](const float (&s)[kBN / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      pa[kk][0] = pack2(s[2 * kk][0], s[2 * kk][1], tag);
      pa[kk][1] = pack2(s[2 * kk][2], s[2 * kk][3], tag);
      pa[kk][2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], tag);
      pa[kk][3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], tag);
    }
  };
  {
    float s[kBN / 8][4], alpha[2];
    next_tile(t_begin);
    wgmma_fence();
    issue_s(s, 0);
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    softmax(s, t_begin, alpha);  // o is zero: no rescale
    pack_p(s);
  }
  for (int t = t_begin + 1; t < t_end; ++t) {
    const int stage = (t - t_begin) % kStages;
    next_tile(t);
    float s[kBN / 8][4], alpha[2];
    wgmma_fence();
    issue_s(s, stage);
    issue_pv((t - 1 - t_begin) % kStages);
    wgmma_wait<1>();
    wgmma_fence_operand(s);
    softmax(s, t, alpha);
    wgmma_wait<0>();
    wgmma_fence_operand(o);
    rescale_rows(o, alpha);
    pack_p(s);
  }
  wgmma_fence();
  issue_pv((t_end - 1 - t_begin) % kStages);
  wgmma_wait<0>();
  wgmma_fence_operand(o);

  store_attention_rows(o, lrow, r0, b.nq, b.sq.query_begin + b.item.q0, b.h, t4, p.out, p.out_dtype, p.out_stride);
#else
  pdl_wait();
  __trap();  // host dispatch never launches it below sm_90a
#endif
}

template <class T>
void launch(const PrefillAttentionParams& p, cudaStream_t s) {
  static bool configured = false;  // per instantiation; the attribute is per device function
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_wgmma_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    configured = true;
  }
  // Heads fastest, as attention_prefill.cu: items longest first across all heads.
  dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_items));
  launch_pdl(prefill_attention_wgmma_kernel<T>, grid, dim3(kThreads), kSmemBytes, s, p);
}

// Whether the current device runs sm_90a code (compute capability 9.0), asked once a device.
bool device_is_sm90() {
  static std::atomic<int8_t> known[64] = {};  // 0 unknown, 1 yes, -1 no
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  int8_t v = known[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    v = major == 9 && minor == 0 ? 1 : -1;
    known[dev].store(v, std::memory_order_relaxed);
  }
  return v > 0;
}

}  // namespace

bool prefill_attention_wgmma_supported(const PrefillAttentionParams& p) {
  return p.cache.head_dim == kD && (p.cache.dtype == DType::kBF16 || p.cache.dtype == DType::kF16) &&
         p.tile_q == kBM && device_is_sm90();
}

void prefill_attention_wgmma(const PrefillAttentionParams& p, cudaStream_t s) {
  PAGODA_CUDA_REQUIRE(prefill_attention_wgmma_supported(p),
                      "prefill_attention: the wgmma kernel needs compute capability 9.0, head_dim 128, an f16 / bf16 "
                      "cache and query tiles of 128");
  if (p.cache.dtype == DType::kBF16) launch<bf16>(p, s);
  else launch<f16>(p, s);
}

}  // namespace pagoda::cuda
