// Layer ops: the level at which a family's forward pass is written and at which backends fuse.
// A family's forward (model/families/*.cc) is one straight-line loop over its layers calling
// these; the CPU backend (runtime/cpu_layer_ops.cc) composes ops/, the CUDA backend
// (backend/cuda/cuda_executor.cc) launches its fused kernels and owns their fusion choices
// (a norm folded into the next GEMV, a residual add folded into an epilogue or into the next
// norm). One forward, two backends, no drift.
//
// Activations belong to the backend and are named by role; a step covers T tokens:
//   residual [T, D] f32   the residual stream
//   qkv      [T, Q + 2 KV] the fused q/k/v projection
//   attn     [T, Q]        the attention output
// Weights are named by the ids of model/model_weights.h.
// Contract: calls come in the order a family's forward makes them; each reads the activations
// the previous calls wrote. A LayerOps object serves one forward pass (one step) of one thread.
#pragma once

#include <cstdint>

#include "model/model_weights.h"

namespace pagoda {

struct NormArgs {
  VectorId weight;  // [D] f32 RMSNorm weight: y = x / rms(x) * weight
  double eps = 1e-6;
};

struct AttentionArgs {
  int64_t layer = 0;  // the KV-cache layer written and read
  VectorId qkv_bias;  // optional [Q + 2 KV] f32, added to qkv before RoPE (Qwen2)
  VectorId q_norm;    // optional [head_dim] f32 per-head RMSNorm of q and k before RoPE (Qwen3)
  VectorId k_norm;
  double norm_eps = 1e-6;
};

class LayerOps {
 public:
  virtual ~LayerOps() = default;
  // residual = token_embd[token ids]
  virtual void embed() = 0;
  // qkv = rms_norm(residual) @ w^T, w [Q + 2 KV, D]
  virtual void norm_qkv(const NormArgs& norm, LinearId w) = 0;
  // q, k = rope(q/k-norm(qkv + bias)); K and V written into the layer's cache slots; attn =
  // causal (optionally sliding-window) attention of q over the cached keys of each sequence.
  virtual void rope_kv_attention(const AttentionArgs& args) = 0;
  // residual += attn @ w^T, w [D, Q]
  virtual void linear_residual(LinearId w) = 0;
  // residual += silu(g) * u @ down^T where [g | u] = rms_norm(residual) @ gate_up^T;
  // gate_up [2F, D] (gate rows then up rows), down [D, F]
  virtual void gated_mlp(const NormArgs& norm, LinearId gate_up, LinearId down) = 0;
  // logits = rms_norm(residual[logits rows]) @ w^T, w [V, D]
  virtual void final_logits(const NormArgs& norm, LinearId w) = 0;
  // After layer `layer`'s last op (debug hooks; backends may ignore it).
  virtual void end_layer(int64_t layer) {}
};

}  // namespace pagoda
