// Layer ops: the level at which a family's forward pass is written and at which backends fuse.
// A family's forward (model/families/*.cc) is one straight-line loop over its layers calling
// these; the CPU backend (runtime/cpu_layer_ops.cc) composes ops/, the CUDA backend
// (backend/cuda/cuda_step_ops.cc) launches its fused kernels and owns their fusion choices
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

#include "common/check.h"
#include "model/model_weights.h"

namespace pagoda {
class RopeTable;
}

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
  // Gemma's per-layer variants; the defaults are the Llama behaviour.
  float scale = 0.0f;          // scores = q.k * scale; 0: 1 / sqrt(head_dim)
  float logit_softcap = 0.0f;  // > 0: scores = cap * tanh(scores / cap) before the softmax (Gemma 2)
  int64_t sliding_window = -1; // -1: the config's window; 0: full attention; > 0: keys in (p - w, p]
  const RopeTable* rope = nullptr;  // the model's table for this layer; nullptr: Model::rope()
  // true: q_norm [Q] and k_norm [KV] are RMSNorms over the whole q and k projections (OLMoE), not
  // per head.
  bool qk_norm_full = false;
};

// A mixture-of-experts MLP (model/families/moe.cc). Router: p = softmax(x @ router^T) over the E
// experts, the top_k largest kept (ties: the lower expert index) and, with normalize_top_k,
// divided by their sum; out = sum over the kept experts of p_e * swiglu_e(x). With a shared
// expert (Qwen2-MoE) out += sigmoid(x @ shared_gate^T) * swiglu_shared(x).
struct MoeArgs {
  LinearId router;          // [E, D]
  ExpertSetId experts;      // E experts of [2F, D] gate/up and [D, F] down
  int64_t top_k = 0;
  bool normalize_top_k = false;
  LinearId shared_gate_up;  // optional [2Fs, D]
  LinearId shared_down;     // [D, Fs] when shared_gate_up is
  LinearId shared_gate;     // [1, D] when shared_gate_up is
};

// The gate's activation of a gated MLP: act(g) * u.
enum class GateActivation {
  kSilu,      // SwiGLU (Llama)
  kGeluTanh,  // GeGLU with the tanh approximation of GELU (Gemma's gelu_pytorch_tanh)
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
  // Before layer `layer`'s first op and after its last one: a layer's weights are those its ops
  // name in between (model/layer_linears.h). Backends may ignore them (the CUDA backend streams
  // offloaded layers' weights there; hidden-state capture reads the residual at a layer's end).
  virtual void begin_layer(int64_t /*layer*/) {}
  virtual void end_layer(int64_t /*layer*/) {}

  // Ops of the Gemma and MoE families (model/families/gemma.cc, moe.cc). A backend that does not
  // implement them must refuse such models at load; reaching these defaults aborts.
  // residual *= scale (Gemma's sqrt(hidden) embedding scale)
  virtual void scale_residual(float /*scale*/) { unsupported("scale_residual"); }
  // residual += rms_norm(attn @ w^T) * post.weight (the post-attention norm), w [D, Q]
  virtual void linear_post_norm_residual(LinearId /*w*/, const NormArgs& /*post*/) { unsupported("linear_post_norm_residual"); }
  // residual += rms_norm(act(g) * u @ down^T) * post.weight, [g | u] = rms_norm(residual) @ gate_up^T
  virtual void gated_mlp_post_norm(const NormArgs& /*norm*/, LinearId /*gate_up*/, LinearId /*down*/,
                                   GateActivation /*act*/, const NormArgs& /*post*/) {
    unsupported("gated_mlp_post_norm");
  }
  // residual += moe(rms_norm(residual)) (MoeArgs above)
  virtual void moe_mlp(const NormArgs& /*norm*/, const MoeArgs& /*moe*/) { unsupported("moe_mlp"); }
  // logits = final_logits(norm, w), then cap * tanh(logits / cap) when cap > 0 (Gemma 2)
  virtual void final_logits_softcap(const NormArgs& /*norm*/, LinearId /*w*/, float /*cap*/) { unsupported("final_logits_softcap"); }

 private:
  [[noreturn]] static void unsupported(const char* op) {
    PAGODA_CHECK(false, "layer op {} is not implemented by this backend (it must refuse the model at load)", op);
    __builtin_unreachable();
  }
};

}  // namespace pagoda
