// The reference for prompt logprobs, shared by the CPU tier (tests/model) and the GPU tier: the
// model's logits at every prompt position from one forward pass of the whole prompt on a fresh
// CPU executor (no scheduler, no chunks, no prefix cache, no runner row selection), then the
// log-softmax, the rank and the top N of each row in double precision.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "model/model_loader.h"
#include "runtime/forward_batch.h"
#include "runtime/model_executor.h"

namespace pagoda::test {

// rows[j] scores prompt[j + 1] (prompt.size() - 1 rows); empty when the model does not load.
inline std::vector<RowLogprobs> reference_prompt_logprobs(const std::string& model_path, const std::vector<int32_t>& prompt,
                                                          int32_t top_n, DType kv_dtype = DType::kF32) {
  std::vector<RowLogprobs> rows;
  auto m = load_model(model_path);
  if (!m.ok() || prompt.size() < 2) return rows;
  ThreadPool pool(2);
  const int64_t bs = 16;
  const int32_t n = static_cast<int32_t>(prompt.size());
  KvCacheSpec spec;
  spec.block_size = bs;
  spec.num_blocks = (n + bs - 1) / bs + 1;
  spec.dtype = kv_dtype;
  auto ex = make_cpu_executor(*m->model, spec, pool);
  std::vector<int32_t> table;
  for (int32_t b = 1; b < spec.num_blocks; ++b) table.push_back(b);
  ForwardBatch batch;
  batch.add_sequence(prompt, n, table, bs, true, /*want_all_logits=*/true);
  const Tensor& logits = ex->forward(batch);
  const int64_t vocab = logits.dim(1);
  for (int32_t p = 0; p + 1 < n; ++p) {
    const float* row = logits.data_as<float>() + p * vocab;
    double mx = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
    double se = 0;
    for (int64_t v = 0; v < vocab; ++v) se += std::exp(static_cast<double>(row[v]) - mx);
    const double lse = mx + std::log(se);
    RowLogprobs r;
    const int32_t t = prompt[p + 1];
    r.logprob = static_cast<float>(row[t] - lse);
    r.rank = 1;
    for (int64_t v = 0; v < vocab; ++v) r.rank += row[v] > row[t] ? 1 : 0;
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) ids[v] = static_cast<int32_t>(v);
    const size_t k = std::min<size_t>(static_cast<size_t>(top_n), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (size_t i = 0; i < k; ++i) r.top.push_back({ids[i], static_cast<float>(row[ids[i]] - lse)});
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace pagoda::test
