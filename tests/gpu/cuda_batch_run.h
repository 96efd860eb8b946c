// One CUDA executor's logits over a fixed batch, for comparing two configurations of one model
// (tests/gpu/cuda_fp8_test.cc: FP8 kernels against the dequantized weights; cuda_sparse_test.cc:
// 2:4 sparse GEMMs against the dense ones): B sequences, their prompts of `len` tokens in one
// prefill (every position's logits), then `steps` decode steps of B rows fed fixed tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_loader.h"
#include "runtime/cuda_executor.h"
#include "runtime/forward_batch.h"

namespace pagoda::test {

struct BatchRun {
  std::vector<float> logits;  // [rows, vocab]: the prefill's rows, then each decode step's
  int64_t rows = 0;
  int64_t weight_bytes = 0;   // the memory planner's weight term (cuda_memory_terms)
  std::string describe;       // the executor's describe()
};

// `co`: the options under test (dtype, tuning); the capacities are set here from B, len and steps.
inline Result<BatchRun> run_batch(const LoadedModel& m, int64_t B, int64_t len, int64_t steps, CudaExecutorOptions co) {
  const int64_t bs = 16, V = m.config.vocab_size;
  const int64_t per_seq = (len + steps + bs - 1) / bs + 1;
  KvCacheSpec spec;
  spec.num_blocks = B * per_seq + 2;
  spec.block_size = bs;
  spec.dtype = DType::kBF16;
  co.max_num_tokens = std::max<int64_t>(64, B * len);
  co.max_num_seqs = std::max<int64_t>(4, B);
  co.max_model_len = per_seq * bs;
  BatchRun r;
  PAGODA_ASSIGN_OR_RETURN(auto terms, cuda_memory_terms(*m.model, co));
  r.weight_bytes = terms.weights;
  PAGODA_ASSIGN_OR_RETURN(auto ex, make_cuda_executor(*m.model, spec, co));
  r.describe = ex->describe();
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < per_seq; ++j) tables[static_cast<size_t>(b)].push_back(static_cast<int32_t>(1 + b * per_seq + j));
  auto token = [&](int64_t b, int64_t i) { return static_cast<int32_t>(i == 0 ? 1 : 3 + (i * 37 + b * 101) % (V - 3)); };
  ForwardBatch batch;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < len; ++i) prompt.push_back(token(b, i));
    batch.add_sequence(prompt, static_cast<int32_t>(len), tables[static_cast<size_t>(b)], bs, true, /*want_all_logits=*/true);
  }
  auto take = [&](const Tensor& l) {
    r.logits.insert(r.logits.end(), l.data_as<float>(), l.data_as<float>() + l.numel());
    r.rows += l.numel() / V;
  };
  take(ex->forward(batch));
  for (int64_t s = 0; s < steps; ++s) {
    batch.clear();
    for (int64_t b = 0; b < B; ++b)
      batch.add_sequence({token(b, len + s)}, static_cast<int32_t>(len + s + 1), tables[static_cast<size_t>(b)], bs);
    take(ex->forward(batch));
  }
  return r;
}

}  // namespace pagoda::test
