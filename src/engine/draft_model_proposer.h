// Draft-model proposer: a smaller model of the target's vocabulary drafts greedily, k forward
// passes per step (the first catches up on the tokens verified since its last call, each next
// one feeds the previous draft), batched over the requests.
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
  // `cost` is a draft pass's cost in target decode steps (the draft's weight bytes over the target's).
  DraftModelProposer(std::unique_ptr<ModelExecutor> executor, int32_t num_blocks, int32_t block_size, double cost);
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
  std::unique_ptr<ModelExecutor> executor_;
  KvCacheManager kv_;
  int32_t block_size_;
  double cost_;
  std::unordered_map<std::string, State> states_;
  ForwardBatch batch_;
};

}  // namespace pagoda
