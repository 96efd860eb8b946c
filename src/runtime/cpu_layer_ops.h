// The CPU implementation of the layer ops (model/layer_ops.h): each layer op composes the ops/
// front ends on f32 activations in a ForwardWorkspace. Fusion choice: a residual add (the o and
// down projections) is deferred into the next RMSNorm (add_rms_norm), so the residual stream is
// read once per norm.
#pragma once

#include <functional>

#include "common/tensor.h"
#include "common/thread_pool.h"
#include "model/layer_range_ops.h"
#include "model/model.h"
#include "ops/moe.h"
#include "runtime/forward_batch.h"
#include "runtime/kv_cache_storage.h"
#include "runtime/tensor_parallel_comm.h"

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

// One forward pass of `model`'s layers `range` over `batch` on `pool`: K/V of every token written
// into `kv` (which holds at least those layers), logits [batch.logits_rows.size(), vocab] f32
// (resized if needed) when the range is the last one. A range after the first starts from
// `residual_in` [T, D] f32 instead of embedding the tokens; one before the last leaves the residual
// stream after its last layer in ws.residual's first T rows (logits untouched).
// `tp` (tensor parallelism): `model` is one rank's (model/tensor_parallel_source.h; its KV heads in
// `kv`); the o / down / expert outputs are all-reduced before they join the residual stream, the
// embedding is looked up in the rank's vocabulary rows and all-reduced, and the logits are
// gathered to the whole vocabulary. Every rank calls this with the same batch at the same time.
// Thread-safety: serialise calls per workspace and KV storage.
void cpu_forward(const Model& model, const ForwardBatch& batch, KvCacheStorage& kv, ForwardWorkspace& ws, Tensor& logits,
                 ThreadPool& pool, const LayerHook& hook = {}, LayerRange range = {}, const Tensor* residual_in = nullptr,
                 const TensorParallelRank* tp = nullptr);

}  // namespace pagoda
