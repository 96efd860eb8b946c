// ModelRunner: SchedulerOutput -> ForwardBatch -> logits -> sampled tokens.
//
// Keeps a persistent batch (per-request token ids, block table, sampling state) patched by each
// SchedulerOutput's diffs, performs swap copies, runs one forward pass over all scheduled tokens
// and samples for the requests whose known tokens are now all computed (a prefill chunk that
// stops short of the end samples nothing).
//
// Sampling randomness is stateless per token: the draw for a request's k-th generated token uses
// an Rng seeded from (request seed, k), so a seed gives the same tokens whatever the batch
// composition, chunking or preemption history.
// Thread-safety: execute() calls are serialised by the engine-core thread.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/model_executor.h"
#include "runtime/sampler.h"
#include "core/scheduler_output.h"

namespace pagoda {

struct RunnerSample {
  std::string id;
  SampleResult result;
};

struct RunnerOutput {
  std::vector<RunnerSample> samples;
  int32_t num_tokens = 0;  // tokens in the forward batch
};

class ModelRunner {
 public:
  // `pool` runs the CPU-side sampling (one sampler per worker).
  ModelRunner(ModelExecutor& executor, int64_t block_size, ThreadPool& pool);

  RunnerOutput execute(const SchedulerOutput& out);
  size_t num_tracked_requests() const { return reqs_.size(); }

  ModelExecutor& executor() { return executor_; }

 private:
  struct ReqState {
    std::vector<int32_t> tokens;  // prompt + generated
    int32_t num_prompt = 0;
    SamplingParams sampling;
    uint64_t seed = 0;
    std::vector<int32_t> block_table;
    int32_t num_computed = 0;
    int32_t min_tokens = 0;
    std::vector<int32_t> min_tokens_blocked_ids;
    // Structured output: the request's position in its constraint (advanced by every sampled
    // token) and the mask of the next step.
    std::unique_ptr<TokenConstraint> constraint;
    std::vector<uint32_t> mask;
  };
  // The packed allowed mask of s's next token over `vocab` logits (s.constraint set).
  static std::span<const uint32_t> constraint_mask(ReqState& s, int64_t vocab);
  ModelExecutor& executor_;
  int64_t block_size_;
  ThreadPool& pool_;
  std::unordered_map<std::string, ReqState> reqs_;
  ForwardBatch batch_;
  std::vector<Sampler> samplers_;  // one per pool thread
};

// The Rng for a request's k-th generated token.
Rng token_rng(uint64_t seed, int64_t index);

}  // namespace pagoda
