// Per-ISA table of the CPU's non-matmul kernels (norms, activations, RoPE + KV write, paged
// attention). The same portable source (kernels_impl.inc) is compiled once per ISA level with
// that level's flags (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc) into its own
// namespace; cpu_kernels() returns the table for the best level this machine supports.
//
// The row-level functions take raw pointers: the ops/ front ends validate shapes and split the
// work across the thread pool.
#pragma once

#include <cstdint>

#include "common/cpu_features.h"
#include "common/kv_layout.h"

namespace pagoda::cpu {

// One unit of attention work: query tokens [q0, q1) x query heads [h0, h1) of one sequence
// (all sharing kv head `kv_head`), against keys [k0, k1). If `partial` >= 0 the unnormalised
// result (running max m, sum l, accumulator acc) goes to the partial buffers for a later merge
// (split-KV, flash-decoding); otherwise the normalised output goes to `out`.
struct AttentionTask {
  int32_t seq;
  int32_t kv_head;
  int32_t q0, q1;
  int32_t h0, h1;
  int32_t k0, k1;
  int32_t partial;
};

struct AttentionArgs {
  const float* q;        // [T, num_heads * head_dim]
  float* out;            // [T, num_heads * head_dim]
  KvLayerView cache;
  int64_t num_heads;
  float scale;
  int64_t sliding_window;
  // Per sequence (indexed by AttentionTask::seq):
  const int32_t* query_begin;
  const int32_t* num_queries;
  const int32_t* context_len;
  const int32_t* const* block_tables;
  // Split-KV partials, [num_partials][rows][...]: m, l [rows], acc [rows * head_dim].
  float* partial_m;
  float* partial_l;
  float* partial_acc;
  int32_t partial_rows;  // rows per partial slot
  float softcap = 0.0f;  // > 0: scores (already scaled) become softcap * tanh(scores / softcap)
};

inline constexpr int kAttentionMaxRows = 16;    // query rows (tokens x heads) per task
inline constexpr int kAttentionMaxHeadDim = 256;

struct KernelTable {
  IsaLevel level;
  // out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]
  void (*rms_norm_row)(const float* x, const float* w, int64_t n, float eps, float* out);
  // residual[i] += x[i]; out = rms_norm(residual) * w   (out may alias x)
  void (*add_rms_norm_row)(float* residual, const float* x, const float* w, int64_t n, float eps, float* out);
  void (*swiglu_row)(const float* gate, const float* up, int64_t n, float* out);
  // Converts n elements of f16/bf16/f32 to f32.
  void (*to_f32_row)(const void* src, int dtype_id, int64_t n, float* dst);
  void (*attention_task)(const AttentionArgs& args, const AttentionTask& task);
  // Writes one token's K and V rows (f32, [num_kv_heads * head_dim]) into the cache at `slot`.
  void (*kv_write_token)(const KvLayerView& cache, int64_t slot, const float* k, const float* v);
  // out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  void (*geglu_tanh_row)(const float* gate, const float* up, int64_t n, float* out);
};

const KernelTable& cpu_kernels();  // best level available (respecting the ISA cap)
// The table for one level; nullptr if this machine cannot run it.
const KernelTable* cpu_kernels_for(IsaLevel level);

extern const KernelTable kKernelsScalar;
extern const KernelTable kKernelsAvx2;
extern const KernelTable kKernelsAvx512;

}  // namespace pagoda::cpu
