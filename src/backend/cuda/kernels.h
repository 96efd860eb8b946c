// Launchers of the CUDA kernels (one .cu per op family). Host-callable, plain C++: the executor
// and the op tests include this; CUDA C++ stays inside the .cu files.
//
// Conventions: every pointer is device memory unless named *_host; row-major, last dimension
// contiguous; "act" is the activation dtype of the compute path (f32 or bf16); counts that a
// CUDA graph must see change between replays (positions, context lengths, ...) are read from
// device memory, never passed by value, so a captured launch stays valid.
//
// The paged KV cache layout on the GPU (differs from the CPU's ops/kv_layout.h):
//   K, V: [num_blocks, num_kv_heads, block_size, head_dim]
// one (block, kv head) is a contiguous block_size x head_dim tile, so a key tile of one head is
// 16-byte-aligned rows that cp.async and ldmatrix read directly, and the keys of one page are
// contiguous for the decode kernel's coalesced loads. Slot s = block * block_size + offset.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/block_trace.h"
#include "common/dtype.h"

namespace pagoda::cuda {

struct KvCacheLayer {
  void* k = nullptr;  // [num_blocks, num_kv_heads, block_size, head_dim] dtype
  void* v = nullptr;
  DType dtype = DType::kBF16;  // f32, f16 or bf16
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

// ---- norm.cu ---------------------------------------------------------------------------------

// out[t, :] (f32) = table[ids[t] - id_begin, :] (f32 | f16 | bf16), ids: [T]. rows >= 0: the
// table holds rows [0, rows) (a tensor-parallel rank's vocabulary slice from id_begin) and other
// ids get zeros.
void embedding(const void* table, DType table_dtype, const int32_t* ids, int64_t T, int64_t D, float* out,
               cudaStream_t s, int64_t id_begin = 0, int64_t rows = -1);

// out[i, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w with r = rows ? rows[i] : i.
// x: f32 [*, D]; w: f32 [D]; out: [n, D] f32 or bf16.
void rms_norm(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, void* out,
              DType out_dtype, cudaStream_t s);

// residual[t, :] += x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w (Gemma's post-norms around a
// sub-block). x, residual: f32 [n, D]; w: f32 [D].
void rms_norm_add(const float* x, int64_t n, int64_t D, const float* w, float eps, float* residual, cudaStream_t s);

// In place over T rows of qkv (f32, stride ld): columns [0, nq) = rms_norm(them) * wq and
// [nq, nq + nk) = rms_norm(them) * wk, each over its whole width (OLMoE's q and k norms, before
// RoPE; model/layer_ops.h AttentionArgs::qk_norm_full).
void qk_rms_norm(float* qkv, int64_t T, int64_t ld, int64_t nq, int64_t nk, const float* wq, const float* wk, float eps,
                 cudaStream_t s);

// x[i] *= scale for i < n (f32; Gemma's sqrt(hidden) embedding scale).
void scale_f32(float* x, int64_t n, float scale, cudaStream_t s);

// ---- activation.cu ---------------------------------------------------------------------------

// out[t, i] = silu(gu[t, i]) * gu[t, F + i]. gu: [T, 2F], out: [T, F], both `dtype` (f32 | bf16).
void swiglu(const void* gu, int64_t T, int64_t F, void* out, DType dtype, cudaStream_t s);
// swiglu (bf16) fused with quantize_activations_fp8 of its rows: codes q [T, F] e4m3 and scales
// [T] f32, bit for bit the two kernels' result, without the bf16 rows in memory. False (nothing
// launched) unless F % 8 == 0, gu 16-byte and q 8-byte aligned and a row's 2F bytes fit 160 KiB.
bool swiglu_fp8(const void* gu, int64_t T, int64_t F, uint8_t* q, float* scale, cudaStream_t s);

// out[t, i] = gelu_tanh(gu[t, i]) * gu[t, F + i] (GeGLU, tanh approximation of GELU). gu: [T, 2F],
// out: [T, F], both `dtype` (f32 | bf16).
void geglu_tanh(const void* gu, int64_t T, int64_t F, void* out, DType dtype, cudaStream_t s);

// x[i] = cap * tanh(x[i] / cap) for i < n (f32; Gemma 2's final logit soft-capping), cap > 0.
void softcap_f32(float* x, int64_t n, float cap, cudaStream_t s);

// Element conversion between f32, f16 and bf16 (n elements).
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t s);
// dst[i] += src[i] for i < n: a bf16 matmul output added into the f32 residual stream.
void accumulate_bf16(const void* src, float* dst, int64_t n, cudaStream_t s);

// ---- rope.cu ---------------------------------------------------------------------------------

// Fused bias add (Qwen2) + per-head RMSNorm (Qwen3 q/k norm) + RoPE + paged KV write.
struct RopeKvParams {
  const float* qkv = nullptr;   // [T, (H + 2 KVH) * D] f32: q heads, then k heads, then v heads
  int64_t num_tokens = 0;       // T (grid size)
  int64_t num_heads = 0, head_dim = 0, rope_dim = 0;
  const float* bias = nullptr;  // optional [(H + 2 KVH) * D] f32
  const float* q_norm = nullptr, *k_norm = nullptr;  // optional [D] f32
  float norm_eps = 1e-6f;
  const float* cos = nullptr, *sin = nullptr;  // [max_positions, rope_dim / 2] f32
  bool interleaved = false;     // pairs (2i, 2i+1); else (i, i + rope_dim/2)
  const int32_t* positions = nullptr;  // [T]
  const int32_t* slots = nullptr;      // [T] cache slot, -1: not cached
  float* q_out = nullptr;       // [T, H * D] f32, rotated queries
  KvCacheLayer cache;           // num_kv_heads = KVH

  void check() const;
};
void rope_kv_write(const RopeKvParams& p, cudaStream_t s);

// ---- attention_decode.cu: one query row at a time (decode, and the generic path) ------------

// Splits of a row with `keys` visible keys: one per kRowSplitKeys keys, at most kRowMaxSplits (the
// SIMT kernel: a function of the key count only, so a row's arithmetic is the same in any batch;
// the batch-invariant mode relies on it), and at most `target` when target > 0 (the tensor-core
// kernel: row_attention_splits). constexpr: the kernels call it too (--expt-relaxed-constexpr).
constexpr int kRowMaxSplits = 32;
constexpr int kRowSplitKeys = 256;
constexpr int row_num_splits(int64_t keys, int target = 0) {
  if (keys <= 0) return 0;
  int64_t s = (keys + kRowSplitKeys - 1) / kRowSplitKeys;
  if (s > kRowMaxSplits) s = kRowMaxSplits;
  return static_cast<int>(target > 0 && s > target ? target : s);
}
// A launch of at most kRowShortRows rows whose keys are bounded by max_keys <= kRowShortKeys runs
// the SIMT kernel even when tensor cores are asked for: measured on the H200 (Llama-3-8B shape),
// batch-1 decode of tg128 227.4 tok/s with the SIMT kernel vs 219.9 with the tensor-core one, while
// one row over 8192 keys takes 49.9 vs 40.4 us and 256 rows over 1500 keys 744 vs 521 us. (Not a
// batch-invariant choice; the --batch-invariant mode never asks for tensor cores.)
constexpr int64_t kRowShortRows = 8, kRowShortKeys = 1024;
inline bool row_attention_short(int64_t rows, int64_t max_keys) {
  return rows <= kRowShortRows && max_keys > 0 && max_keys <= kRowShortKeys;
}

struct RowAttentionParams {
  const float* q = nullptr;     // f32, row t at q + t * q_stride, head h at + h * head_dim (rotated)
  int64_t q_stride = 0;
  void* out = nullptr;          // act dtype, row t at out + t * out_stride, head h at + h * head_dim
  DType out_dtype = DType::kF32;
  int64_t out_stride = 0;
  int64_t num_rows = 0;         // R (grid)
  // row_token, row_seq, row_ctx and block_tables are read before the kernel waits for its
  // predecessor (programmatic dependent launch): step inputs, never written by an earlier kernel.
  const int32_t* row_token = nullptr;  // [R] row of q / out
  const int32_t* row_seq = nullptr;    // [R] row of block_tables
  const int32_t* row_ctx = nullptr;    // [R] the query sits at position ctx - 1 and sees keys < ctx; 0: padding
  const int32_t* block_tables = nullptr;  // [*, bt_stride]
  int64_t bt_stride = 0;
  KvCacheLayer cache;
  int64_t num_heads = 0;
  float scale = 1.0f;
  float softcap = 0.0f;         // > 0: score = softcap * tanh(q.k * scale / softcap) before the softmax (Gemma 2)
  int64_t window = 0;           // 0: unlimited; else keys in (pos - window, pos]
  int64_t max_keys = 0;         // bound on any row's visible keys, sizes the grid (0: unknown)
  int num_sms = 132;            // multiprocessors of the device (grid sizing)
  int blocks_per_sm = 0;        // grid sizing: blocks aimed at per SM (0: the kernel's default; benchmarks vary it)
  float* part_o = nullptr;      // workspace [R, num_heads, kRowMaxSplits, head_dim] f32
  float* part_ml = nullptr;     // workspace [R, num_heads, kRowMaxSplits, 2] f32
  int* counters = nullptr;      // workspace [R, num_heads] int, zero (left zero)
  // Tensor cores for f16 / bf16 caches at head_dim 64 / 128 (Q and P rounded to the cache type),
  // except for short launches (row_attention_short); false: f32 arithmetic throughout.
  bool tensor_cores = false;
  bool tensor_cores_short = false;  // ... for short launches too (TuningConfig::row_attention "mma")
  // Keys at the end of a row that the preceding kernels of this step may have written (decode: 1,
  // its own token); the keys before them come from earlier steps, so the SIMT kernel warms their
  // cache lines in L2 before it waits for its predecessor. -1: unknown, nothing read early.
  int fresh_keys = -1;
  // Short SIMT launches (one or two query heads a block, 16-bit cache) read the fused RoPE's
  // position, slot and cos / sin, and (fresh_keys >= 0) the K / V of each warp's first keys, before
  // the wait. The results do not depend on it; false only in the op tests (docs/decisions.md#d4).
  bool early_reads = true;
  // RoPE + KV write fused in (rope.qkv set; row_attention_fuses_rope): every row is one decode
  // token at position ctx - 1 whose q, k and v come from rope.qkv (q and rope.q_out unused), one
  // row a sequence, and rope.slots[token] is the cache slot of key ctx - 1 in the row's table. The
  // kernel rotates them and writes the new key and value to the cache (rope.cache == cache).
  RopeKvParams rope;
  // Query heads a block of the SIMT kernel takes, for 16-bit caches at head_dim 64 / 128: 0 its
  // choice (1 for a one-row launch, 2 up to kRowShortRows rows, else 4); 1, 2 or 4 as given
  // (TuningConfig::simt_heads). Other caches take 4. The results do not depend on it.
  int simt_heads_per_block = 0;
  // The tensor-core kernel's bound on a row's splits (row_num_splits' target); 0: its default,
  // row_attention_splits. Benchmarks and tests vary it. The SIMT kernel ignores it.
  int target_splits = 0;
  // Block trace (block_trace.h): set by row_attention itself when the trace is on.
  TraceSlots trace;

  void check() const;
};
// The tensor-core kernel's splits a row aims at, for a launch of `blocks_per_split` blocks a split
// (rows x KV heads x head chunks) on `sms` multiprocessors: about one block an SM in all. Every
// split costs a merge of the warps' results and a combine; the kernel bench (440 rows x 1500 keys,
// two device calls) ran at 82-84 % of copy bandwidth with splits of 256 keys, 95-98 % with one.
int row_attention_splits(int64_t blocks_per_split, int sms);
// Whether row_attention can take the RoPE + KV write of p.rope (its SIMT kernel at head_dim 64 /
// 128 with the whole head rotated, aligned inputs).
bool row_attention_fuses_rope(const RowAttentionParams& p);
// Split-KV attention of R query rows (flash-decoding); the last block of a row to finish its
// splits combines them (no second kernel).
void row_attention(const RowAttentionParams& p, cudaStream_t s);

// ---- attention_prefill.cu: FlashAttention-2-style tensor-core kernel --------------------------

constexpr int kPrefillTileQ = 128;  // default query tile of the prefill kernel
// Which prefill kernel runs: kAuto takes the wgmma kernel (attention_prefill_wgmma.cu) where it
// applies (compute capability 9.0, head dim 128, f16 / bf16 cache, tile_q 128) and the mma.sync
// kernel elsewhere; tests and the kernel bench name one (kWgmma where it does not apply is an
// error).
enum class PrefillKernel { kAuto, kMmaSync, kWgmma };
struct PrefillSeq {
  int32_t query_begin;  // first row of the sequence in q / out
  int32_t num_queries;
  int32_t context_len;  // query i sits at position context_len - num_queries + i
  int32_t bt_row;       // row of block_tables
};
struct PrefillItem {
  int32_t seq;          // index into seqs
  int32_t q0;           // first query (within the sequence) of this tile of tile_q rows
};
struct PrefillAttentionParams {
  const float* q = nullptr;     // as RowAttentionParams
  int64_t q_stride = 0;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int64_t out_stride = 0;
  const PrefillSeq* seqs = nullptr;    // device
  const PrefillItem* items = nullptr;  // device, [num_items]
  int64_t num_items = 0;
  const int32_t* block_tables = nullptr;
  int64_t bt_stride = 0;
  KvCacheLayer cache;
  int64_t num_heads = 0;
  float scale = 1.0f;
  float softcap = 0.0f;         // as RowAttentionParams
  int64_t window = 0;
  int tile_q = kPrefillTileQ;   // queries per block: 64 (4 warps) or 128 (8 warps)
  PrefillKernel kernel = PrefillKernel::kAuto;

  void check() const;
};
// Head dims 64 and 128 with an f16 or bf16 cache (mma.sync m16n8k16).
bool prefill_attention_supported(int64_t head_dim, DType kv_dtype);
void prefill_attention(const PrefillAttentionParams& p, cudaStream_t s);
// Whether prefill_attention(p) runs the wgmma kernel (p.kernel and, for kAuto, where it applies).
bool prefill_attention_runs_wgmma(const PrefillAttentionParams& p);
// The wgmma kernel (attention_prefill_wgmma.cu): whether it applies to p on the current device,
// and its launch (prefill_attention dispatches to it).
bool prefill_attention_wgmma_supported(const PrefillAttentionParams& p);
void prefill_attention_wgmma(const PrefillAttentionParams& p, cudaStream_t s);

// ---- gemv.cu / gemm_simt.cu: the matmuls cuBLASLt does not do ---------------------------------

enum class GemmOut {
  kStoreF32,   // y = x W^T, f32
  kAddF32,     // y += x W^T, f32 (residual add)
  kStoreAct,   // y = x W^T in the input dtype
  kSwiGlu,     // W = [gate; up] ([2F, K]); y[m, i] = silu(g) * u in the input dtype, y: [M, F]
};

// Small-M bf16 GEMV (decode): y[M, N] from x[M, K] bf16, w[N, K] bf16 (N = 2F for kSwiGlu).
// 1 <= M <= kGemvMaxM, K % 8 == 0, 16-byte aligned rows. One warp per output row, 16-byte
// streaming weight loads, several in flight per lane.
constexpr int kGemvMaxM = 4;
bool gemv_supported(int64_t M, int64_t K);
// Whether a one-row fused-norm kStoreF32 GEMV of an even N computes two outputs a warp (n and
// n + N / 2): kAuto where that turns a grid of more than one wave of blocks into one (the 8B
// shape's QKV), kAlways / kNever for tests and comparisons. The same bits either way.
enum class GemvPairs { kAuto, kNever, kAlways };
// The RMSNorm fused into the GEMV's prologue: x = rms_norm(residual[rows ? rows[m] : m]) * weight
// (bf16), instead of a separate rms_norm kernel. Needs M * K * 2 <= 96 KiB.
struct GemvNorm {
  const float* residual = nullptr;  // [*, K] f32
  const int32_t* rows = nullptr;    // optional [M]
  const float* weight = nullptr;    // [K] f32
  float eps = 1e-5f;
  GemvPairs pairs = GemvPairs::kAuto;
};
bool gemv_norm_supported(int64_t M, int64_t K);
// Whether gemv_bf16(M, N, mode, norm) computes two outputs a warp (GemvPairs).
bool gemv_takes_pairs(int64_t M, int64_t N, GemmOut mode, const GemvNorm* norm);
void gemv_bf16(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
               cudaStream_t s, const GemvNorm* norm = nullptr);

// Batch-invariant tiled SIMT GEMM: every output is one f32 FMA chain over k = 0..K-1 in order,
// so a row's result does not depend on M or on the other rows. Slow; the --batch-invariant mode.
// x: [M, K], w: [N, K] in `dtype` (f32 | bf16); y as `mode` (kSwiGlu not supported).
void gemm_simt(const void* x, const void* w, DType dtype, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy,
               GemmOut mode, cudaStream_t s);

// ---- quant_matmul.cu: GGUF block-quantized weights read natively ------------------------------

// Weight formats with kernels: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, in the GGUF block
// layout a file stores (rows of K / block_size blocks, row_bytes(format, K) bytes a row, rows
// 2-byte aligned; K a multiple of 32 and of the block size).
bool quant_weight_supported(DType format);
// Activations quantized for gemv_quant: per 32 inputs of a row, 32 int8 codes q = round(x / d),
// d = max|x| / 127, and ds = (d, d * sum(q)). x: [M, K] bf16 or f32; q: [M, K]; ds: [M, K / 32].
void quantize_activations_q8(const void* x, DType x_dtype, int64_t M, int64_t K, int8_t* q, float2* ds, cudaStream_t s);
// rms_norm (out dtype act: bf16 or f32) of rows x[rows ? rows[i] : i] fused with
// quantize_activations_q8 of its output: the same codes q [n, D] and ds [n, D / 32] as the two
// kernels (rms_norm into act, then quantize_activations_q8 of that), bit for bit, in one launch
// without the normalised row in memory (norm.cu). False (nothing launched) where D % 32 != 0, a
// pointer is not 16-byte aligned (the vectorised norm's condition) or act is another dtype: the
// caller runs the two kernels.
bool rms_norm_q8(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, DType act,
                 int8_t* q, float2* ds, cudaStream_t s);
// y[M, N] = x W^T from quantize_activations_q8's (q, ds) of x and a quantized W [N, K] (N = 2F:
// [gate; up] for kSwiGlu, y: [M, F]); kStoreAct and kSwiGlu write bf16. One warp an output row,
// int8 dot products (dp4a) per 32 inputs. 1 <= M <= kQuantGemvMaxM.
constexpr int kQuantGemvMaxM = 8;
void gemv_quant(const int8_t* xq, const float2* xds, const void* w, DType format, int64_t M, int64_t N, int64_t K,
                void* y, int64_t ldy, GemmOut mode, cudaStream_t s);
// y[M, N] = x W^T for bf16 activations x [M, K] (row stride K, 16-byte aligned) and a quantized W
// [N, K] (N = 2F: [gate; up] for kSwiGlu, y: [M, F]); kStoreAct and kSwiGlu write bf16. The
// weights are dequantized in registers to the bf16 values dequantize_weight writes and multiplied
// on tensor cores with f32 accumulation; a row's result does not depend on M or the other rows.
// 1 <= M <= kQuantMmaMaxM.
constexpr int kQuantMmaMaxM = 64;
void gemm_quant_mma(const void* x, const void* w, DType format, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy,
                    GemmOut mode, cudaStream_t s);
// out[rows, K] (bf16 or f32) = the values of quantized rows w, each computed as
// quant::dequantize_row computes it on the host (f32; bf16 rounds that).
void dequantize_weight(const void* w, DType format, int64_t rows, int64_t K, void* out, DType out_dtype, cudaStream_t s);

// ---- gemv_2of4.cu: 2:4 sparse bf16 weights in our own layout ---------------------------------

// An [N, K] weight (K a multiple of 16) whose every group of 4 consecutive inputs holds at most 2
// nonzeros: values [N, K / 2] bf16 (a group's two kept weights, in input order), then positions
// [N, K / 16] u16 (a 16-input chunk's 4 groups, group g's two 2-bit indices i0 | i1 << 2 at bits
// 4g): 9/16 of the bf16 bytes.
inline int64_t sparse_2of4_bytes(int64_t N, int64_t K) { return N * K + N * K / 8; }
// Packs the row-major bf16 [N, K] weight at dense into `out` (sparse_2of4_bytes), adding to
// *violations (a device int the caller zeroes) the number of groups with more than 2 nonzeros: 0
// when the weight holds the pattern (then the layout is exact).
void pack_2of4(const void* dense, int64_t N, int64_t K, void* out, int* violations, cudaStream_t s);
// y = x W^T for 1 <= M <= kGemv2of4MaxM rows of bf16 x [M, K], W in the layout above; the modes of
// gemv_bf16 (kSwiGlu: W is [2 n, K] gate then up rows, y [M, n] bf16). ldy: y's row stride.
constexpr int kGemv2of4MaxM = 8;
void gemv_2of4(const void* x, const void* w, int64_t M, int64_t N, int64_t K, void* y, int64_t ldy, GemmOut mode,
               cudaStream_t s);

// ---- fp8_matmul.cu: FP8 E4M3 weights with per-channel scales (DType::kF8E4M3Rows) -------------
//
// The device layout of such a weight (device_weight.h): codes [N, K] e4m3, K a multiple of 16
// (fp8_weight_supported), then scales [N] f32; w[n, k] = scale[n] * e4m3(code[n, k]).
bool fp8_weight_supported(int64_t K);
// y[M, N] = x W^T for bf16 x [M, K] (16-byte aligned rows) and the FP8 W (N = 2F: [gate; up] for
// kSwiGlu, y: [M, F]); kStoreAct and kSwiGlu write bf16. W8A16: the codes are converted in
// registers, f32 sums scaled per channel at the end; a row's result does not depend on M.
// 1 <= M <= kFp8GemvMaxM.
constexpr int kFp8GemvMaxM = 8;
void gemv_fp8(const void* x, const void* w, const float* w_scale, int64_t M, int64_t N, int64_t K, void* y,
              int64_t ldy, GemmOut mode, cudaStream_t s);
// Dynamic per-token FP8 activations for the W8A8 GEMM (BlasLt::matmul_fp8): per row of x [M, K]
// (bf16 or f32), scale = max|x| / 448 (f32) and q = e4m3(x / scale) (nearest even, saturating; 0
// for a zero row), bit for bit quant::quantize_row(kF8E4M3Rows)'s codes and scale.
void quantize_activations_fp8(const void* x, DType x_dtype, int64_t M, int64_t K, uint8_t* q, float* scale,
                              cudaStream_t s);
// rms_norm (bf16 out) of rows x[rows ? rows[i] : i] fused with quantize_activations_fp8: the same
// codes [n, D] and scales [n] as the two kernels, bit for bit, without the bf16 row in memory
// (norm.cu). False (nothing launched) where the vectorised norm does not apply (D % 4, alignment)
// or a row's bf16 values exceed 96 KiB of shared memory: the caller runs the two kernels.
bool rms_norm_fp8(const float* x, const int32_t* rows, int64_t n, int64_t D, const float* w, float eps, uint8_t* q,
                  float* scale, cudaStream_t s);
// y[m, n] (kStoreF32 / kAddF32 / kStoreAct: bf16; row stride ldy) = x_scale[m] * w_scale[n] *
// acc[m, n], acc [M, N] f32 the unscaled FP8 GEMM (BlasLt::matmul_fp8_unscaled).
void scale_fp8_output(const float* acc, int64_t M, int64_t N, const float* x_scale, const float* w_scale, void* y,
                      int64_t ldy, GemmOut mode, cudaStream_t s);

// ---- moe.cu, moe_gemm.cu: mixture-of-experts layers (model/layer_ops.h moe_mlp) ---------------
//
// A step of T tokens routes P = T * k (token, slot) pairs; pair p = t * k + j is token t's j-th
// choice. moe_route picks them, moe_sort orders them by expert, moe_matmul runs the experts over
// their pairs' rows (the pair order of moe_sort: "sorted positions"), moe_combine adds the
// weighted outputs into the residual. Routing-dependent counts live in device memory only
// (MoeSegments), so the sequence is graph-capturable and never synchronises with the host.
constexpr int kMoeMaxExperts = 256, kMoeMaxTopK = 16;
constexpr int kMoeTile = 64;  // rows (and columns) of a SIMT GEMM tile
// Steps of at most this many tokens take the grouped GEMV (weights read once per 4 rows of an
// expert: decode); larger ones the grouped SIMT GEMM. Not in --batch-invariant mode (the GEMM only).
constexpr int64_t kMoeGemvMaxTokens = 32;

// The active experts of a step, in ascending expert order: segment s < *count is expert
// expert[s], its pairs at sorted positions [begin[s], begin[s + 1]), its SIMT tiles
// [tile[s], tile[s + 1]) (ceil(pairs / kMoeTile) each). begin[*count] = P.
struct MoeSegments {
  int32_t* expert = nullptr;  // [E]
  int32_t* begin = nullptr;   // [E + 1]
  int32_t* tile = nullptr;    // [E + 1]
  int32_t* count = nullptr;   // [1]
};

// logits [T, E] f32 (router outputs) -> ids [T, k] (experts, descending probability; ties: the
// lower expert) and weights [T, k] f32: softmax over E, the k largest kept, divided by their sum
// when normalize (ops/moe.h's moe_route). 1 <= k <= E <= kMoeMaxExperts, k <= kMoeMaxTopK.
void moe_route(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize, int32_t* ids, float* weights,
               cudaStream_t s);
// ids [P] -> order [P]: the pairs sorted by expert, ascending pair index within an expert
// (stable), and seg. One block per expert.
void moe_sort(const int32_t* ids, int64_t P, int64_t E, int32_t* order, const MoeSegments& seg, cudaStream_t s);
// moe_route then moe_sort (the same ids, weights, order and seg) in one single-block launch, for
// small steps: T * k <= kMoeRouteSortMaxPairs.
constexpr int64_t kMoeRouteSortMaxPairs = 4096;
void moe_route_sort(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize, int32_t* ids, float* weights,
                    int32_t* order, const MoeSegments& seg, cudaStream_t s);
// rms_norm of the residual rows (the rms_norm kernel's arithmetic) -> hidden [T, D] (dtype), the
// router matmul -> logits [T, E] f32, then moe_route_sort's ids, weights, order and seg: one launch
// for decode steps (moe_norm_route_supported: T <= kMoeNormRouteMaxTokens, D % 8 == 0, f32 | bf16).
// A block per 8 experts normalises the rows itself (block 0 writes hidden); the last block to
// finish routes and sorts. done: a device counter that is 0 before the launch and is left 0.
constexpr int64_t kMoeNormRouteMaxTokens = 4;
struct MoeNormRouteParams {
  const float* residual = nullptr;  // [T, D] f32
  const float* norm_w = nullptr;    // [D] f32
  float eps = 1e-5f;
  const void* router = nullptr;     // [E, D] dtype
  int64_t T = 0, D = 0, E = 0, k = 0;
  bool normalize = false;
  void* hidden = nullptr;           // [T, D] dtype
  float* logits = nullptr;          // [T, E]
  int32_t* ids = nullptr;           // [T, k]
  float* weights = nullptr;         // [T, k]
  int32_t* order = nullptr;         // [T * k]
  MoeSegments seg;
  unsigned* done = nullptr;
};
bool moe_norm_route_supported(int64_t T, int64_t D, DType dtype);
void moe_norm_route(const MoeNormRouteParams& p, DType dtype, cudaStream_t s);
// Upper bound of the SIMT GEMM's tiles for P pairs over E experts (its grid).
int64_t moe_max_tiles(int64_t P, int64_t E);

// y = x_e W_e^T for every sorted position of every active segment e, W_e = w[e] [N, K] in the
// compute dtype (f32 | bf16), x, y as follows:
//   input row of sorted position i:  x + (gather ? gather[i] / gather_div : i) * ldx  (dtype)
//   kSwiGlu (GEMV only): y[i, n] = silu(g) * u, g = row n, u = row N/2 + n; y [P, N/2] dtype
//   kStoreAct: y[i, n] dtype;  kStoreF32: y[scatter ? scatter[i] : i, n] f32.
// gemv: the grouped GEMV (K and ldx multiples of 16 bytes, x 16-byte aligned); else the SIMT GEMM
// (every output one f32 FMA chain over k in order: batch-invariant), or with tensor_cores the
// grouped bf16 mma GEMM over the same 64 x 64 tiles (f32 accumulation, not batch-invariant).
struct MoeMatmulParams {
  const void* x = nullptr;
  int64_t ldx = 0;
  const int32_t* gather = nullptr;
  int gather_div = 1;
  const void* const* w = nullptr;  // [E] device pointers
  int N = 0, K = 0;
  void* y = nullptr;
  int64_t ldy = 0;
  const int32_t* scatter = nullptr;
  MoeSegments seg;
  int64_t P = 0, E = 0;            // pairs and experts (grid bounds)
  int64_t max_rows = 0;            // a bound on any segment's pairs (the step's tokens); 0: none
  bool tensor_cores = false;       // GEMM: the bf16 mma kernel (K, ldx multiples of 8) instead of SIMT
  GemmOut mode = GemmOut::kStoreF32;
  int64_t w_row_bytes = 0;  // moe_matmul_quant / moe_down_combine_quant: device_row_bytes(format, K)
};
void moe_matmul(const MoeMatmulParams& p, DType dtype, bool gemv, cudaStream_t s);
// moe_matmul over experts in a GGUF block format (quant_weight_supported(format); w[e] rows in the
// device layout, quant_layout.h, p.w_row_bytes a row), bf16 activations (16-byte aligned rows, ldx
// a multiple of 8), K whole blocks:
//   gemv: the grouped int8 GEMV, each block quantizing the input rows it reads (gemv_quant's
//         arithmetic over quantize_activations_q8's values); kSwiGlu, kStoreAct, kStoreF32.
//   else: the grouped tensor-core GEMM of moe_matmul's tensor_cores path, each 32-wide k slice
//         of the weights dequantized to bf16 in shared memory (gemm_quant_mma's values); every
//         output one fixed chain of mma over k in order, so a row's result does not depend on the
//         other rows (batch-invariant); kStoreAct, kStoreF32.
void moe_matmul_quant(const MoeMatmulParams& p, DType format, bool gemv, cudaStream_t s);
// moe_down_combine for block-quantized experts: one token (p.max_rows == 1, p.P <= kMoeMaxTopK
// pairs, x its pairs' rows in sorted order), no shared expert; residual[0, n] += the sum over the
// active experts of weights[pair] * (x[pos] . w[e][n]) with the int8 GEMV's arithmetic (the
// weighted sum taken unit by unit).
void moe_down_combine_quant(const MoeMatmulParams& p, DType format, const float* weights, float* residual,
                            cudaStream_t s);

// One token (p.max_rows == 1: a segment is one pair), no shared expert: moe_matmul's down
// projection (p as for kStoreF32 with the GEMV; p.scatter: the pairs' order) and moe_combine in one
// launch: residual[0, n] += the sum over the active experts in ascending order of weights[pair] *
// (x[pos] . w[e][n]). A warp an output column, 4 experts' rows streamed together.
void moe_down_combine(const MoeMatmulParams& p, const float* weights, float* residual, DType dtype, cudaStream_t s);

// residual[t, :] += sigmoid(g[t]) * shared_out[t, :] (when shared_out) + the sum over the token's k
// pairs in ascending expert order of weights[p] * expert_out[p, :], the shared expert's gate logit
// g[t] = shared_gate_logits[t] when given, else hidden[t] . shared_gate.
struct MoeCombineParams {
  const float* expert_out = nullptr;  // [T * k, D] f32, by pair
  const float* weights = nullptr;     // [T * k]
  const int32_t* ids = nullptr;       // [T * k]
  int64_t T = 0;
  int top_k = 0, D = 0;
  const float* shared_out = nullptr;  // optional [T, D] f32
  const float* shared_gate_logits = nullptr;  // optional [T] f32
  const void* hidden = nullptr;       // [T, D] dtype: the normalised input (without shared_gate_logits)
  const void* shared_gate = nullptr;  // [D] dtype (without shared_gate_logits)
  float* residual = nullptr;          // [T, D] f32
};
void moe_combine(const MoeCombineParams& p, DType dtype, cudaStream_t s);

// ---- sampling.cu -----------------------------------------------------------------------------

constexpr int kMaxTopLogprobs = 20;
struct SampleRowParams {
  int32_t logits_row;        // row of the logits buffer
  int32_t top_k;             // <= 0: off
  float temperature;         // < 1e-5: greedy
  float top_p, min_p;
  float repetition_penalty, presence_penalty, frequency_penalty;
  int32_t logprobs;          // -1 none, 0 the chosen token's, N also the top N (<= kMaxTopLogprobs)
  int32_t pen_begin, pen_count;      // penalty entries [pen_begin, +count)
  int32_t block_begin, block_count;  // min_tokens-blocked ids [block_begin, +count)
  int32_t bias_begin, bias_count;    // logit_bias entries [bias_begin, +count)
  double uniform;            // the draw in [0, 1)
};
// OpenAI logit_bias: added to the token's logit after the masks, before the penalties (the
// reported logprobs do not see it: they are of the masked row, runtime/sampler.h).
struct BiasEntry {
  int32_t token;
  float bias;
};
// A distinct token of a request's history: in_prompt_or_output (repetition penalty) and its
// count in the output (presence / frequency).
struct PenaltyEntry {
  int32_t token;
  int32_t output_count;
};
struct SampleOutput {
  int32_t token;
  float logprob;
  int32_t top_ids[kMaxTopLogprobs];  // -1 past the tokens with a finite logit (masked tokens are never listed)
  float top_logprobs[kMaxTopLogprobs];
};
// One block per row. logits: [*, vocab] f32, modified in place only by the min_tokens mask.
// work: [rows, vocab] f32 scratch; mask: [rows, vocab] u8 scratch.
// biases: the rows' logit_bias entries (may be null when no row has any).
// plain_greedy: the caller promises every row is greedy with no penalty entries, no blocked ids,
// no bias entries and no logprobs; where the vocabulary is large enough (sample_rows_split_greedy) the argmax is
// then split over many blocks a row. Same token as the general kernel (for rows without NaN).
bool sample_rows_split_greedy(int64_t vocab);
// Structured outputs: for each of `num_rows` masked rows r, logits[row_ids[r] * vocab + t] = -inf
// where bit t of masks[r * mask_words ...] is clear (packed: bit t % 32 of word t / 32; ids at or
// past mask_words * 32 are disallowed). Run before sample_rows.
void apply_token_masks(float* logits, int64_t vocab, const int32_t* row_ids, const uint32_t* masks, int64_t mask_words,
                       int64_t num_rows, cudaStream_t s);
void sample_rows(float* logits, int64_t vocab, const SampleRowParams* rows, int64_t num_rows,
                 const PenaltyEntry* penalties, const int32_t* blocked, float* work, uint8_t* mask,
                 SampleOutput* out, cudaStream_t s, bool plain_greedy = false, const BiasEntry* biases = nullptr);
// Prompt logprobs: for each of num_rows rows r, out[r].logprob = log-softmax(logits row
// rows[r].logits_row)[rows[r].token], out[r].top_* the top rows[r].top_n (<= kMaxTopLogprobs;
// ids -1 past the finite logits) and ranks[r] = 1 + the tokens with a greater logit. logits is
// not modified.
struct RowLogprobRow {
  int32_t logits_row;
  int32_t token;
  int32_t top_n;
};
void row_logprobs(const float* logits, int64_t vocab, const RowLogprobRow* rows, int64_t num_rows, SampleOutput* out,
                  int32_t* ranks, cudaStream_t s);

}  // namespace pagoda::cuda
