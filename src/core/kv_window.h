// How many KV blocks a sequence holds at once when every layer attends over a sliding window and
// the blocks that left it are released (kv/kv_cache_manager.h, evict_outside_window). Shared by the
// block manager and the memory planner, so both count the same bound.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pagoda {

// Blocks of `block_size` tokens held by a sequence of `num_tokens` tokens during a step that
// computes up to `step_tokens` of them; window 0: all of its blocks. Before a step with n tokens
// computed the sequence keeps the blocks of positions >= n - window + 1 (window - 1 keys, which
// start at most one block early), and the step adds its own tokens' blocks.
inline int64_t kv_window_blocks_held(int64_t window, int64_t block_size, int64_t num_tokens, int64_t step_tokens) {
  const int64_t all = (num_tokens + block_size - 1) / block_size;
  if (window <= 0) return all;
  const int64_t held = (window - 1 + block_size - 1) / block_size + 1 + (step_tokens + block_size - 1) / block_size;
  return std::min(all, held);
}

}  // namespace pagoda
