// The Llama family forward pass (Llama 1/2/3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM, TinyLlama):
// pre-norm decoder layers of GQA attention with RoPE and a SwiGLU MLP. Family differences are
// config flags: QKV biases (Qwen2), per-head q/k RMSNorm (Qwen3), tied embeddings, RoPE layout
// and scaling, sliding window.
//
// forward() takes a flat batch of tokens from many sequences (ForwardBatch), writes their K/V
// into the paged cache and returns logits for the requested rows only.
// Thread-safety: a LlamaModel is immutable after load; forward() calls must be serialised per
// workspace and KV storage (the runner owns both).
#pragma once

#include <memory>
#include <vector>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "model/model_config.h"
#include "model/tensor_table.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "runtime/forward_batch.h"
#include "runtime/kv_cache_storage.h"

namespace pagoda {

struct LlamaLayerWeights {
  Tensor attn_norm;                          // [D] f32
  // q, k and v projections fused along N (they share their input): [Q + KV + KV, D], so one
  // matmul writes [T, Q | KV | KV].
  std::shared_ptr<const LinearWeight> wqkv;
  std::shared_ptr<const LinearWeight> wo;    // [D, Q]
  Tensor bq, bk, bv;                         // optional [Q], [KV], [KV] f32
  Tensor q_norm, k_norm;                     // optional [head_dim] f32
  Tensor ffn_norm;                           // [D] f32
  std::shared_ptr<const LinearWeight> w_gate_up;  // gate and up fused: [F + F, D]
  std::shared_ptr<const LinearWeight> w_down;     // [D, F]
};

struct LlamaWeights {
  Tensor token_embd;                           // [V, D] any weight dtype
  Tensor output_norm;                          // [D] f32
  std::shared_ptr<const LinearWeight> output;  // [V, D] (the embedding when tied)
  std::vector<float> rope_freqs;               // optional per-frequency divisors
  std::vector<LlamaLayerWeights> layers;

  // Every matmul weight, once (the output head last; it is the embedding when tied).
  std::vector<const LinearWeight*> linear_weights() const;
};

// Scratch activations, grown on demand to the largest batch seen.
struct ForwardWorkspace {
  Tensor residual, hidden, qkv, q, k, v, attn, proj, gate_up, act, last_hidden;
  int64_t capacity = 0;
};

class LlamaModel {
 public:
  // Validates the checkpoint against the family's tensor table and prepares every weight.
  // `max_positions` bounds the RoPE table (the maximum model length the engine will use).
  // `cpu_kernels` false skips the CPU repacking (weights stay views of the checkpoint; the CPU
  // forward still works, on the generic kernels): for device executors.
  static Result<std::unique_ptr<LlamaModel>> load(const ModelConfig& config, WeightNaming naming,
                                                  const TensorLookup& lookup, int64_t max_positions,
                                                  bool cpu_kernels = true);

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return rope_; }

  // logits: [batch.logits_rows.size(), vocab] f32, resized if needed.
  void forward(const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits, ThreadPool& pool) const;

  // Hidden state hook for per-layer debugging (layer dumps): called after each layer with the
  // residual stream [T, D] (nullptr: off).
  using LayerHook = void (*)(void* ctx, int64_t layer, const Tensor& residual);
  void set_layer_hook(LayerHook hook, void* ctx) { hook_ = hook; hook_ctx_ = ctx; }

 private:
  LlamaModel(ModelConfig config, LlamaWeights weights, RopeTable rope)
      : config_(std::move(config)), weights_(std::move(weights)), rope_(std::move(rope)) {}

  ModelConfig config_;
  LlamaWeights weights_;
  RopeTable rope_;
  LayerHook hook_ = nullptr;
  void* hook_ctx_ = nullptr;
};

}  // namespace pagoda
