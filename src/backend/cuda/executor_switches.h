// The CUDA executor's comparison and timing switches, read once from the environment when it
// starts. Normal use needs none of them; each one served a measurement in docs/cuda.md.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda::cuda {

struct ExecutorSwitches {
  bool simt_row_attention = false;  // PAGODA_ROW_ATTENTION=simt: decode rows without tensor cores
  bool mma_short_rows = false;      // PAGODA_ROW_ATTENTION=mma: tensor cores for short launches too
  int simt_heads = 0;               // PAGODA_SIMT_HEADS=1|2|4: query heads a SIMT attention block
  // Rows up to which linear layers use the GEMV instead of cuBLASLt. Measured on the H200
  // (docs/cuda.md, fifth session): the GEMV wins at one row; at 2-4 rows cuBLASLt is faster for the
  // wide matrices (gate/up, lm_head), so 1. PAGODA_GEMV_MAX_ROWS=0..4.
  int64_t gemv_max_rows = 1;
  // PAGODA_UNFUSED_ROPE=1: RoPE + KV write as its own kernel in decode steps too; =2: and no early
  // L2 warming of the older keys either.
  bool unfused_rope = false, warm_keys = true;
  // PAGODA_LAYER_KERNEL=1: one-row steps run each layer's o projection, FFN and the next QKV (or
  // the lm_head) as one persistent kernel (cuda::decode_layer) instead of four GEMVs. Opt-in: on
  // the H200 it is slower than the GEMVs (tg128 8B 219.9 vs 239.7 tok/s, docs/cuda.md, tenth
  // session), so it stays an experiment until its weight stream matches theirs.
  bool layer_kernel = false;
  int layer_depth = 0;   // PAGODA_LAYER_DEPTH=N: at most N ring slots a warp
  // PAGODA_LAYER_COPY=cp: the ring filled by cp.async even where bulk copies (TMA) are allowed.
  bool layer_cp_async = false;
  // PAGODA_GREEDY_SPLIT=0: plain greedy rows are sampled by the general one-block-a-row kernel
  // instead of the split argmax (cuda::sample_rows' plain_greedy).
  bool greedy_split = true;
  // PAGODA_GEMV_PAIR=0: the fused-norm QKV and lm_head GEMVs never take two outputs a warp
  // (cuda::GemvPairs).
  bool gemv_pairs = true;
  // PAGODA_ATTN_EARLY=0: the short decode attention reads its RoPE inputs and first keys after its
  // wait, as before (RowAttentionParams::early_reads).
  bool attn_early_reads = true;
  // PAGODA_CUDA_KNOCKOUT=qkv,rope,attn,o,gu,down: those ops of every layer are not launched. Wrong
  // outputs; for timing only (what an op costs inside a decode graph: scripts/gpu_run.sh knock8b).
  // Where the RoPE is fused into the attention, `attn` leaves out both and `rope` nothing.
  // `layerbarrier`: the layer kernel runs without its grid barriers (what they cost).
  std::string knockout;  // ",op,op," or empty

  // Whether the knock-out list names `op` (given with its commas: ",qkv,").
  bool skip(const char* op) const { return !knockout.empty() && knockout.find(op) != std::string::npos; }
  // The switches set in the environment; warns on stderr when a knock-out is set.
  static ExecutorSwitches from_env();
};

}  // namespace pagoda::cuda
