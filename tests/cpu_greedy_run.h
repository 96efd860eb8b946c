// One prompt through the CPU forward (tests' reference runs): a prefill with every position's
// logits, then greedy decode steps one token at a time over a scrambled paged KV cache (f32).
#pragma once

#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "model/model.h"
#include "model/model_config.h"
#include "reference_data.h"
#include "runtime/cpu_layer_ops.h"
#include "runtime/forward_batch.h"
#include "runtime/kv_cache_storage.h"

namespace pagoda::test {

struct GreedyRun {
  std::vector<float> logits;       // [T, V]: the prompt's positions
  std::vector<int32_t> greedy;     // `steps` greedy tokens
  std::vector<float> step_logits;  // [steps, V]: the logits greedy token i was chosen from
};

inline GreedyRun cpu_greedy_run(const ModelConfig& config, const Model& model, const std::vector<int32_t>& prompt,
                                int steps, ThreadPool& pool) {
  const int64_t bs = 16;
  const int64_t total = static_cast<int64_t>(prompt.size()) + steps;
  const int64_t nblocks = (total + bs - 1) / bs + 1;
  KvCacheStorage kv(config, nblocks + 3, bs, DType::kF32);
  // A scrambled block table (distinct blocks, descending, skipping some): blocks need not be
  // contiguous or in order.
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(nblocks + 2 - b));
  ForwardWorkspace ws;
  Tensor logits;
  ForwardBatch batch;
  batch.add_sequence(prompt, static_cast<int32_t>(prompt.size()), table, bs, true, /*want_all_logits=*/true);
  cpu_forward(model, batch, kv, ws, logits, pool);
  GreedyRun r;
  const int64_t V = config.vocab_size;
  r.logits.assign(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
  int32_t next = argmax(r.logits.data() + (prompt.size() - 1) * V, V);
  r.step_logits.assign(r.logits.end() - V, r.logits.end());
  int32_t ctx = static_cast<int32_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    r.greedy.push_back(next);
    if (s > 0) r.step_logits.insert(r.step_logits.end(), logits.data_as<float>(), logits.data_as<float>() + V);
    if (s + 1 == steps) break;  // the last token's own logits are not used (and may lie past the context)
    batch.clear();
    batch.add_sequence({next}, ++ctx, table, bs);
    cpu_forward(model, batch, kv, ws, logits, pool);
    next = argmax(logits.data_as<float>(), V);
  }
  return r;
}

}  // namespace pagoda::test
