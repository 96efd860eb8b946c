// Draft-model proposer: a smaller model of the target's vocabulary drafts greedily, k forward
// passes per step (the first catches up on the tokens verified since its last call, each next
// one feeds the previous draft), batched over the requests.
//
// Structured outputs (ProposeRequest::constraint): each draft is the draft model's greedy choice
// among the tokens the constraint allows after the drafts before it (the mask applied to the
// draft's logits, on its device where it samples there), so the drafts stay in the grammar and
// the target's masked choice can accept them; the constraint is rolled back on return.
//
// The draft runs on its own executor: the CPU, or a CUDA executor next to the target's (its
// weights and KV in the device memory plan: MemoryPlanInput::draft_*). On an executor that
// samples on its device, each pass takes its greedy ids from the device (no logits copied back).
// The catch-up pass is cut into forward passes of at most max_pass_tokens tokens (a long prompt
// in chunks), and no draft goes past position max_len - 1.
//
// KV: the draft model's own paged cache in host/device memory of its executor, with its own
// block bookkeeping (a second KvCacheManager, no prefix cache). Per request it remembers which
// tokens its cache holds; after verification the longest common prefix of those and the
// request's verified tokens stays valid (accepted drafts included), the rest is recomputed. A
// request whose blocks cannot be allocated gets no drafts that step.
// Thread-safety: engine-core thread only.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/request.h"
#include "kv/kv_cache_manager.h"
#include "runtime/model_executor.h"
#include "runtime/proposer.h"

namespace pagoda {

class DraftModelProposer final : public Proposer {
 public:
  // `executor` runs the draft model over a cache of `num_blocks` blocks (null block included);
  // `cost` is a draft pass's cost in target decode steps (the draft's weight bytes over the target's);
  // max_len: the longest context (the engine's max_model_len); max_pass_tokens >= 1.
  DraftModelProposer(std::unique_ptr<ModelExecutor> executor, int32_t num_blocks, int32_t block_size, double cost,
                     int32_t max_len = 1 << 30, int32_t max_pass_tokens = 1 << 30);
  std::string name() const override { return "draft"; }
  double draft_cost() const override { return cost_; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;
  void forget(const std::string& id) override;

  size_t num_tracked_requests() const { return states_.size(); }
  int32_t num_free_blocks() const { return kv_.num_free_blocks(); }
  int32_t num_usable_blocks() const { return kv_.pool().num_usable_blocks(); }

 private:
  struct State {
    Request shadow;                // id and num_computed_tokens for the block manager
    std::vector<int32_t> cached;   // tokens whose K/V are in the draft cache, positions 0..
  };
  // Greedy ids of the batch's logits rows, in order (device sampling where the executor has it);
  // masks[r] (empty: none) restricts row r to the tokens whose bit is set (ids past it: none).
  void run_greedy(std::span<const std::span<const uint32_t>> masks, std::vector<int32_t>& out);

  std::unique_ptr<ModelExecutor> executor_;
  KvCacheManager kv_;
  int32_t block_size_;
  double cost_;
  int32_t max_len_, max_pass_tokens_;
  SamplingParams greedy_;
  std::vector<SampleSpec> specs_;
  std::vector<SampleResult> sampled_;
  std::unordered_map<std::string, State> states_;
  ForwardBatch batch_;
};

}  // namespace pagoda
