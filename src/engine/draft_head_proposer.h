// Draft-head proposer (EAGLE-3 heads and MiMo MTP modules, model/draft_head.h): a one-layer head
// drafts from the target's own hidden states. The head's cache row at position p pairs the target's captured states at p
// (fused by fc) with the verified token p + 1; the row at the last verified position gives the
// first draft, and each further draft feeds the previous one with the head's own output hidden
// (EAGLE's chained steps), k - 1 one-row passes batched over the requests.
//
// State per request: the head's paged cache (its own KvCacheManager, no prefix cache) holds rows
// fed with target states for positions [base, base + fed); the target states of later verified
// positions wait in `pending` (observe_hidden()) until the next propose(). Rows of chained drafts
// sit after them and are overwritten each call (their hidden inputs were the head's, not the
// target's). Positions before `base` (a prefix-cache hit the target never computed) are not in the
// head's cache: its attention sees the positions it has. A request whose rows arrive with a gap
// starts over at the new position (so does one with more than kMaxPendingRows waiting rows, keeping
// the latest). A request whose blocks cannot be allocated gets no drafts.
// The catch-up pass is cut into passes of at most max_pass_tokens rows.
// Thread-safety: engine-core thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/request.h"
#include "kv/kv_cache_manager.h"
#include "model/draft_head.h"
#include "runtime/draft_head_forward.h"
#include "runtime/proposer.h"

namespace pagoda {

class DraftHeadProposer final : public Proposer {
 public:
  // `cost`: a draft step's cost in target decode steps (the head's weight bytes over the target's).
  // `output_head`: DraftHeadForward's, for a head without a host lm_head. `runner`: makes the
  // runner of the head's passes (a device's, ModelExecutor::make_draft_head_runner) for a cache of
  // num_blocks x block_size slots; unset or returning null: DraftHeadForward on `pool`.
  using RunnerFactory = std::function<std::unique_ptr<DraftHeadRunner>(const DraftHead& head)>;
  DraftHeadProposer(std::unique_ptr<DraftHead> head, int32_t num_blocks, int32_t block_size, DType kv_dtype, double cost,
                 ThreadPool& pool, int32_t max_len = 1 << 30, int32_t max_pass_tokens = 1 << 30,
                 DraftOutputHead output_head = {}, const RunnerFactory& runner = {});
  // Whether the passes run on a device runner.
  bool device_runner() const { return dynamic_cast<const DraftHeadForward*>(forward_.get()) == nullptr; }
  std::string name() const override { return head_->kind == DraftHeadKind::kEagle3 ? "eagle3" : "mtp"; }
  double draft_cost() const override { return cost_; }
  std::vector<int64_t> hidden_layers() const override { return head_->capture_after; }
  void observe_hidden(std::span<const HiddenRows> rows, int64_t width) override;
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;
  void forget(const std::string& id) override;

  const DraftHead& head() const { return *head_; }
  size_t num_tracked_requests() const { return states_.size(); }
  int32_t num_free_blocks() const { return kv_.num_free_blocks(); }
  int32_t num_usable_blocks() const { return kv_.pool().num_usable_blocks(); }

 private:
  struct State {
    Request shadow;              // id and num_computed_tokens (rows in the cache) for the block manager
    int32_t base = 0;            // position of cache row 0
    int32_t fed = 0;             // rows fed with target states
    std::vector<float> pending;  // target states of positions [base + fed, ...), width_ floats each
  };
  // Pending rows kept per request between propose() calls (a request that is not drafted for a
  // while, e.g. above the batch-size off-switch): past it the oldest go and the head's cache
  // restarts after them.
  static constexpr int64_t kMaxPendingRows = 4096;
  void restart(State& st, int32_t position);
  // Slot of cache row `row` of request `id`.
  int64_t slot_of(const std::string& id, int32_t row) const;

  std::unique_ptr<DraftHead> head_;
  std::unique_ptr<DraftHeadRunner> forward_;
  KvCacheManager kv_;
  int32_t block_size_;
  double cost_;
  int32_t max_len_, max_pass_tokens_;
  int64_t width_ = 0;  // floats per target-state row (captured layers x target hidden)
  std::unordered_map<std::string, State> states_;
};

}  // namespace pagoda
