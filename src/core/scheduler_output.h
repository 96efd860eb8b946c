// SchedulerOutput: what one engine step computes, as a plain value handed to the model runner.
//
// New requests carry their full data; requests the runner already knows carry only diffs (new
// block ids, computed-token count). The runner keeps a persistent batch and patches it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/block_ids.h"
#include "core/sampling_params.h"

namespace pagoda {

struct NewRequestData {
  std::string id;
  std::vector<int32_t> tokens;      // prompt + output so far (resumed requests have output)
  int32_t num_prompt_tokens = 0;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<BlockId> block_ids;
  int32_t num_computed_tokens = 0;  // prefix-cache hit (or swapped-in state)
  // Until `min_tokens` tokens are generated these ids (EOS, stop ids) cannot be sampled.
  int32_t min_tokens = 0;
  std::vector<int32_t> min_tokens_blocked_ids;
};

struct CachedRequestData {
  std::string id;
  std::vector<BlockId> new_block_ids;      // appended to the runner's block table
  int32_t num_computed_tokens = 0;
  bool replace_block_table = false;        // after swap-in: new_block_ids is the whole table
};

struct ScheduledTokens {
  std::string id;
  int32_t num_tokens = 0;
  // Speculative decoding: the draft tokens this step verifies. They are the last
  // spec_tokens.size() of num_tokens (after the request's last known token); the runner computes
  // logits at each of them and at the token before them.
  std::vector<int32_t> spec_tokens = {};
};

struct SchedulerOutput {
  std::vector<NewRequestData> new_requests;
  std::vector<CachedRequestData> cached_requests;
  std::vector<ScheduledTokens> num_scheduled_tokens;  // in batch order
  int32_t total_num_scheduled_tokens = 0;
  std::vector<std::string> preempted;   // this step (recompute: runner drops their block table)
  std::vector<std::string> finished;    // since the last step (runner forgets them)
  // Block copies between the executor's KV cache and its host blocks (swap preemption and the
  // host tier's spills and fills), each list in the order made: every swap_out copy (device,
  // host) runs first, then every swap_in copy (host, device), then the forward pass.
  std::vector<BlockCopy> swap_out;
  std::vector<BlockCopy> swap_in;

  bool empty() const { return total_num_scheduled_tokens == 0; }
};

}  // namespace pagoda
