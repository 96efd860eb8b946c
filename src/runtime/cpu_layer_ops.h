// The CPU implementation of the layer ops (model/layer_ops.h): each layer op composes the ops/
// front ends on f32 activations in a ForwardWorkspace. Fusion choice: a residual add (the o and
// down projections) is deferred into the next RMSNorm (add_rms_norm), so the residual stream is
// read once per norm.
#pragma once

#include <functional>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "model/model.h"
#include "ops/moe.h"
#include "runtime/forward_batch.h"
#include "runtime/kv_cache_storage.h"

namespace pagoda {

// Scratch activations (f32), grown on demand to the largest batch seen.
struct ForwardWorkspace {
  Tensor residual, hidden, qkv, q, k, v, attn, proj, gate_up, act, last_hidden;
  MoeScratch moe;  // the MoE layers' routing and per-expert buffers
  int64_t capacity = 0;
  int64_t bytes() const;
};

// Called after each layer with the residual stream [T, D] f32 (layer dumps).
using LayerHook = std::function<void(int64_t layer, const Tensor& residual)>;

// One forward pass of `model` over `batch` on `pool`: K/V of every token written into `kv`,
// logits [batch.logits_rows.size(), vocab] f32 (resized if needed).
// Thread-safety: serialise calls per workspace and KV storage.
void cpu_forward(const Model& model, const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits,
                 ThreadPool& pool, const LayerHook& hook = {});

}  // namespace pagoda
