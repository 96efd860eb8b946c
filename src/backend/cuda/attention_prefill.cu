// Prefill / chunked-prefill attention over the paged KV cache on tensor cores, FlashAttention-2
// style (our own code, written from the algorithm): varlen batch, causal, GQA, sliding window.
//
// Grid (query head, query tile of one sequence); a tile is 64 or 128 queries (4 or 8 warps),
// each warp owns 16 query rows. The Q tile is converted from the f32 rotated queries to the
// cache's 16-bit type in shared memory; its mma A fragments stay in registers (tile 64) or are
// re-read for every K tile (tile 128, two blocks an SM); K and V tiles of 64 keys stream through
// shared memory, double-buffered with cp.async (the next tile loads while this one computes),
// gathered through the block table row by row, zero-filled past the last key. Per tile: S = Q K^T
// with mma.sync m16n8k16 (f32 accumulate), causal / window mask and online softmax in registers
// (prefill_common.cuh: the scale times log2(e) folded into ex2's exponent), P re-packed in
// registers as the A operand of O += P V (ldmatrix.trans reads V). On compute capability 9.0 at
// head dim 128 with a 16-bit cache, prefill_attention runs attention_prefill_wgmma.cu instead.
// Shared-memory rows are padded by 16 bytes so ldmatrix's 8-row reads hit distinct banks.
// Work items are ordered longest first (the host builds them) and the grid runs them in that order
// over all heads, to shorten the tail.
#include <cmath>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill_common.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kBN = 64;  // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

// kBM queries per block, 16 per warp. Tile 128 (QS): the Q fragments are re-read from shared
// memory for every K tile instead of living in registers, so that two 8-warp blocks fit an SM
// (128 registers): 254.7 vs 226.0 TFLOP/s at 8192 causal tokens on the H200 (CudaKernelBench).
// An FP8 cache (KVT = f8) streams through the ring as bytes (rows of D) and the block converts each
// tile to f16 (exact) in one converted K / V tile before the mma; Q and P are then f16.
template <class KVT, int D>
struct PrefillSmem {
  static constexpr bool F8 = kIsFp8<KVT>;
  static constexpr int LD = D + 8;  // padded shared-memory row of the 16-bit tiles (elements)
  // bytes: Q tile + the 16-bit K / V tiles (the ring, or F8's converted tile) + F8's byte ring
  static constexpr int bytes(int kBM) { return (kBM + (F8 ? 2 : 4) * kBN) * LD * 2 + (F8 ? 4 * kBN * D : 0); }
};

template <class KVT, int D, int kBM, bool QS = (kBM == 128)>
__global__ __launch_bounds__(kBM * 2, QS ? 2 : 1) void prefill_attention_kernel(PrefillAttentionParams p) {
  constexpr bool F8 = PrefillSmem<KVT, D>::F8;
  using MT = mma_type_t<KVT>;
  constexpr int kThreads = kBM * 2;
  constexpr int LD = PrefillSmem<KVT, D>::LD;
  constexpr int SLD = F8 ? D : LD;  // row stride of the ring (elements)
  extern __shared__ __align__(16) uint8_t smem[];
  MT* sQ = reinterpret_cast<MT*>(smem);
  MT* sK = sQ + kBM * LD;                    // 16-bit: [2][kBN][LD]; F8: [kBN][LD] converted
  MT* sV = sK + (F8 ? 1 : 2) * kBN * LD;     // the same for V
  KVT* rK = F8 ? reinterpret_cast<KVT*>(sV + kBN * LD) : reinterpret_cast<KVT*>(sK);  // the ring [2][kBN][SLD]
  KVT* rV = F8 ? rK + 2 * kBN * SLD : reinterpret_cast<KVT*>(sV);
  const MT tag{};
  pdl_trigger();
  pdl_wait();

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const PrefillBlock b(p, kBM);
  const int t_begin = b.kv_begin / kBN, t_end = (b.kv_end + kBN - 1) / kBN;
  const KVT* kc = static_cast<const KVT*>(p.cache.k);
  const KVT* vc = static_cast<const KVT*>(p.cache.v);

  // Q tile: f32 -> KVT in shared memory (rows past nq are zero).
  constexpr int QV = D / 4;
  for (int i = tid; i < kBM * QV; i += kThreads) {
    const int row = i / QV, c = (i - row * QV) * 4;
    *reinterpret_cast<uint2*>(sQ + row * LD + c) = b.query4(p, row, c, D, tag);
  }

  constexpr int EPC = kChunkElems<KVT>;
  constexpr int CPR = D / EPC;  // 16-byte chunks per row
  auto load_tile = [&](int t, int stage) {
    KVT* dK = rK + stage * kBN * SLD;
    KVT* dV = rV + stage * kBN * SLD;
    for (int i = tid; i < kBN * CPR; i += kThreads) {
      const int row = i / CPR, c = (i - row * CPR) * EPC;
      const int key = t * kBN + row;
      const bool valid = key < b.kv_end;
      int64_t off = 0;
      if (valid) {
        off = ((static_cast<int64_t>(b.table[b.block_of(key)]) * b.num_kv_heads + b.kvh) * b.bs + b.slot_of(key)) * D + c;
      }
      cp_async16(dK + row * SLD + c, kc + off, valid);
      cp_async16(dV + row * SLD + c, vc + off, valid);
    }
    cp_async_commit();
  };

  load_tile(t_begin, 0);
  __syncthreads();  // Q tile stored

  const MT* qsrc = sQ + (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
  uint32_t qf[QS ? 1 : D / 16][4];
  if constexpr (!QS) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], qsrc + kk * 16);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  const float sl2 = p.scale * kLog2e;
  const float cap_l2 = p.softcap * kLog2e;  // 0: no soft-cap
  const int g = lane >> 2, t4 = lane & 3;
  const int r0 = warp * 16 + g;  // this thread's rows: r0 and r0 + 8
  const int pos_r[2] = {b.first_pos + r0, b.first_pos + r0 + 8};

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    if (t + 1 < t_end) {
      load_tile(t + 1, stage ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (F8) {
      // The tile: FP8 ring stage -> f16 (16 values a 16-byte chunk), then every warp reads it.
      for (int i = tid; i < 2 * kBN * CPR; i += kThreads) {
        const bool isv = i >= kBN * CPR;
        const int j = isv ? i - kBN * CPR : i;
        const int row = j / CPR, c = j - row * CPR;
        fp8x16_to_f16((isv ? rV : rK) + stage * kBN * SLD + row * SLD + c * EPC, (isv ? sV : sK) + row * LD + c * EPC);
      }
      __syncthreads();
    }
    const MT* cK = sK + (F8 ? 0 : stage * kBN * LD);
    const MT* cV = sV + (F8 ? 0 : stage * kBN * LD);

    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qs[4];
      if constexpr (QS) ldmatrix_x4(qs, qsrc + kk * 16);
      const uint32_t(&a)[4] = QS ? qs : qf[QS ? 0 : kk];
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, cK + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD + kk * 16 + (((lane >> 3) & 1) << 3));
        mma16816(s[2 * np], a, b[0], b[1], tag);
        mma16816(s[2 * np + 1], a, b[2], b[3], tag);
      }
    }

    // Mask (only tiles that cross the diagonal or the window edge), scale, row max (rows live
    // in the 4 lanes of a quad).
    const int kbase = t * kBN;
    const bool need_mask = kbase + kBN - 1 > b.first_pos || (b.window > 0 && kbase <= b.first_pos + kBM - 1 - b.window);
    float mx[2];
    const float k = prepare_scores(need_mask, s, sl2, cap_l2, kbase, t4, pos_r, b.window, mx);
    float alpha[2];
    online_softmax_tile(s, k, mx, mrow, lrow, alpha);
    rescale_rows(o, alpha);

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      a[0] = pack2(s[2 * kk][0], s[2 * kk][1], tag);
      a[1] = pack2(s[2 * kk][2], s[2 * kk][3], tag);
      a[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], tag);
      a[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], tag);
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, cV + (kk * 16 + (((lane >> 3) & 1) << 3) + (lane & 7)) * LD + dn * 16 + ((lane >> 4) << 3));
        mma16816(o[2 * dn], a, b[0], b[1], tag);
        mma16816(o[2 * dn + 1], a, b[2], b[3], tag);
      }
    }
    __syncthreads();  // this stage (F8: the converted tile) is overwritten by a later iteration
  }

  store_attention_rows(o, lrow, r0, b.nq, b.sq.query_begin + b.item.q0, b.h, t4, p.out, p.out_dtype, p.out_stride);
}

template <class KVT, int D, int kBM>
void launch_prefill(const PrefillAttentionParams& p, cudaStream_t s) {
  constexpr int smem = PrefillSmem<KVT, D>::bytes(kBM);
  static bool configured = false;  // per instantiation; the attribute is per device function
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<KVT, D, kBM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    smem));
    configured = true;
  }
  // Heads fastest: blocks start in item order (longest first) across all heads, and the query
  // heads of a KV head run side by side (their K / V tiles hit in L2).
  dim3 grid(static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_items));
  launch_pdl(prefill_attention_kernel<KVT, D, kBM>, grid, dim3(kBM * 2), smem, s, p);
}

template <class KVT, int kBM>
void launch_dtype(const PrefillAttentionParams& p, cudaStream_t s) {
  if (p.cache.head_dim == 64) launch_prefill<KVT, 64, kBM>(p, s);
  else launch_prefill<KVT, 128, kBM>(p, s);
}
template <int kBM>
void launch_tile(const PrefillAttentionParams& p, cudaStream_t s) {
  if (p.cache.dtype == DType::kBF16) launch_dtype<bf16, kBM>(p, s);
  else if (p.cache.dtype == DType::kF8E4M3) launch_dtype<f8, kBM>(p, s);
  else launch_dtype<f16, kBM>(p, s);
}

}  // namespace

bool prefill_attention_supported(int64_t head_dim, DType kv_dtype) {
  return (head_dim == 64 || head_dim == 128) &&
         (kv_dtype == DType::kBF16 || kv_dtype == DType::kF16 || kv_dtype == DType::kF8E4M3);
}

void PrefillAttentionParams::check() const {
  PAGODA_CUDA_REQUIRE(q && out && seqs && items && block_tables && cache.k && cache.v, "prefill_attention: missing input");
  PAGODA_CUDA_REQUIRE(prefill_attention_supported(cache.head_dim, cache.dtype),
                      "prefill_attention: head_dim 64/128 with an f16, bf16 or f8_e4m3 cache only");
  PAGODA_CUDA_REQUIRE(num_heads % cache.num_kv_heads == 0, "prefill_attention: heads");
  PAGODA_CUDA_REQUIRE(out_dtype == DType::kF32 || out_dtype == DType::kBF16, "prefill_attention: out dtype");
  PAGODA_CUDA_REQUIRE(q_stride % 4 == 0 && out_stride % 2 == 0, "prefill_attention: strides");
  PAGODA_CUDA_REQUIRE(tile_q == 64 || tile_q == 128, "prefill_attention: tile_q must be 64 or 128");
  PAGODA_CUDA_REQUIRE(num_items <= 65535, "prefill_attention: at most 65535 query tiles a launch");
}

bool prefill_attention_runs_wgmma(const PrefillAttentionParams& p) {
  return p.kernel == PrefillKernel::kWgmma || (p.kernel == PrefillKernel::kAuto && prefill_attention_wgmma_supported(p));
}

void prefill_attention(const PrefillAttentionParams& p, cudaStream_t s) {
  p.check();
  if (p.num_items <= 0) return;
  if (prefill_attention_runs_wgmma(p)) {
    prefill_attention_wgmma(p, s);
    CUDA_CHECK_LAUNCH();
    return;
  }
  if (p.tile_q == 64) launch_tile<64>(p, s);
  else launch_tile<128>(p, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
