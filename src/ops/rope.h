// Rotary position embedding: the frequency table, and the fused op that normalises (Qwen3),
// rotates Q and K, and writes K and V into the paged cache in one pass over the new tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "common/rope_params.h"
#include "common/kv_layout.h"

namespace pagoda {

// cos/sin of position * inv_freq[i] for positions [0, max_positions), i in [0, rope_dim/2).
// inv_freq follows transformers: theta^(-2i/rope_dim), then llama3 / linear scaling, or division
// by explicit per-frequency factors (GGUF rope_freqs.weight; LongRoPE's chosen list, required for
// kLongRope, whose attention_factor then multiplies cos and sin). Computed in double, stored f32.
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeSpec& spec, int64_t max_positions, std::span<const float> freq_factors = {});

  int64_t rope_dim() const { return rope_dim_; }
  int64_t max_positions() const { return max_positions_; }
  RopeLayout layout() const { return layout_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // [rope_dim/2] cos and sin of `pos`.
  const float* cos(int64_t pos) const { return cos_.data() + pos * (rope_dim_ / 2); }
  const float* sin(int64_t pos) const { return sin_.data() + pos * (rope_dim_ / 2); }

 private:
  int64_t rope_dim_ = 0;
  int64_t max_positions_ = 0;
  RopeLayout layout_ = RopeLayout::kHalfSplit;
  std::vector<double> inv_freq_;
  std::vector<float> cos_, sin_;
};

// Inputs of one layer's fused QK-norm + RoPE + KV write.
struct RopeKvWriteParams {
  Tensor* q = nullptr;           // [T, num_heads * head_dim] f32, rotated in place
  Tensor* k = nullptr;           // [T, num_kv_heads * head_dim] f32, rotated in place then stored
  const Tensor* v = nullptr;     // [T, num_kv_heads * head_dim] f32, stored
  std::span<const int32_t> positions;  // [T]
  std::span<const int64_t> slots;      // [T] cache slot per token, -1 = skip
  const RopeTable* rope = nullptr;
  const Tensor* q_norm = nullptr;      // optional [head_dim] (Qwen3)
  const Tensor* k_norm = nullptr;      // optional [head_dim]
  double norm_eps = 1e-6;
  int64_t num_heads = 0;
  KvLayerView cache;

  void check() const;  // aborts on inconsistent shapes (the runner builds these; not user input)
};

void rope_kv_write(const RopeKvWriteParams& p, ThreadPool& pool);

}  // namespace pagoda
