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

#include "core/scheduler_output.h"
#include "core/speculative_config.h"
#include "runtime/model_executor.h"
#include "runtime/proposer.h"
#include "runtime/sampler.h"
#include "runtime/spec_verifier.h"

namespace pagoda {

struct RunnerSample {
  std::string id;
  SampleResult result;
};

// Speculative decoding counters of one step (vLLM's spec-decode metrics).
struct SpecStepStats {
  int64_t num_drafts = 0;           // requests verified with at least one draft
  int64_t num_draft_tokens = 0;     // drafts verified
  int64_t num_accepted_tokens = 0;  // drafts accepted
  int64_t num_rejections = 0;       // verifications that rejected a draft (accepted < drafts): the
                                    // per-token acceptance is accepted / (accepted + rejections)
  std::vector<int64_t> accepted_per_position;  // [num_speculative_tokens]: accepted at draft index i
};

// Prompt logprobs of one request's prompt positions computed this step: rows[j] scores prompt
// token first_token + j (>= 1; prompt token 0 has no logprob). A chunked prefill reports its
// chunks in order; a request that recomputes its prompt (preemption) reports them again.
struct PromptLogprobChunk {
  std::string id;
  int32_t first_token = 1;
  std::vector<RowLogprobs> rows;
};

struct RunnerOutput {
  // One entry per new token, in order; a request verifying drafts has 1 + accepted drafts
  // consecutive entries.
  std::vector<RunnerSample> samples;
  int32_t num_tokens = 0;  // tokens in the forward batch
  // Speculative decoding: drafts for the next step, per request (requests without drafts absent).
  std::vector<std::pair<std::string, std::vector<int32_t>>> drafts;
  SpecStepStats spec;
  std::vector<PromptLogprobChunk> prompt_logprobs;
};

class ModelRunner {
 public:
  // `pool` runs the CPU-side sampling (one sampler per worker).
  ModelRunner(ModelExecutor& executor, int64_t block_size, ThreadPool& pool);

  RunnerOutput execute(const SchedulerOutput& out);
  size_t num_tracked_requests() const { return reqs_.size(); }

  // Speculative decoding: after each step `proposer` drafts tokens for the requests that got new
  // tokens (config.enabled() must hold). On an executor that samples on its device, a step whose
  // drafts are all greedy samples every verified row there (config.device_verify); otherwise the
  // step takes logits to the host (forward()) and verifies on the CPU. A null proposer turns
  // speculation off (config is then ignored).
  void set_speculation(const SpeculativeConfig& config, std::unique_ptr<Proposer> proposer);
  // The proposer back (speculation off); null when there is none.
  std::unique_ptr<Proposer> release_proposer();
  // Drops every tracked request (and the proposer's state of it): only when all of them finished
  // (between benchmark runs), before the scheduler reports them.
  void forget_all();
  const Proposer* proposer() const { return proposer_.get(); }

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
    // Adaptive speculation: decayed counts of accepted drafts and of rejections (the per-token
    // acceptance estimate is accepted / (accepted + rejected)), the draft length chosen from it
    // (-1: not chosen yet, the configured maximum; 0: speculation does not pay, probe later).
    double spec_accepted = 1.0, spec_rejected = 1.0;
    int32_t spec_k = -1;
    int32_t spec_idle = 0;  // steps without drafts since spec_k became 0
    // Structured output: the request's position in its constraint (advanced by every emitted
    // token, never by drafts; tokens[0..constraint_at) so far, sync_constraint) and the mask(s)
    // of the next step.
    std::unique_ptr<TokenConstraint> constraint;
    int32_t constraint_at = 0;
    std::vector<uint32_t> mask;
  };
  // The packed allowed mask of s's next token over `vocab` logits (s.constraint set).
  static std::span<const uint32_t> constraint_mask(ReqState& s, int64_t vocab);
  // Advances s.constraint over the tokens emitted since its last sync (deferred so that on a
  // device executor the work overlaps the next forward pass). Before any use of s.constraint.
  static void sync_constraint(ReqState& s);
  // Device sampling of s's rows (s.constraint set and synced): s.mask, sized drafts.size() + 1
  // rows of equal width by the caller, gets row j's mask (the constraint advanced through drafts
  // 0..j-1); s.constraint is unchanged on return.
  static void fill_draft_masks(ReqState& s, std::span<const int32_t> drafts);
  // Drafts for the requests sampled this step (into result.drafts).
  void propose(const std::vector<const std::string*>& ids, RunnerOutput& result);

  ModelExecutor& executor_;
  int64_t block_size_;
  ThreadPool& pool_;
  std::unordered_map<std::string, ReqState> reqs_;
  ForwardBatch batch_;
  std::vector<Sampler> samplers_;  // one per pool thread
  std::vector<SpecVerifier> verifiers_;  // one per pool thread
  SpeculativeConfig spec_;
  std::unique_ptr<Proposer> proposer_;
};

// Adaptive speculation: the draft length in [0, max_k] that maximises tokens per unit of step
// cost, for a per-token acceptance `alpha` and a cost of `cost_per_draft` step units per draft
// (drafting plus its verification row; a plain decode step is 1 unit). 0: no drafts pay.
int32_t best_draft_length(double alpha, int32_t max_k, double cost_per_draft);

// The Rng for a request's k-th generated token.
Rng token_rng(uint64_t seed, int64_t index);

}  // namespace pagoda
