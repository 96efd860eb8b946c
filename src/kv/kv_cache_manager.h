// KvCacheManager: which KV blocks each request holds, prefix-cache lookups, and swap to host.
//
// Contract (vLLM v1 style): capacity is a return value. allocate_slots() returns nullopt when the
// free blocks cannot cover the request's next tokens — the scheduler then preempts someone and
// retries — never an exception. The scheduler sees block ids only as an opaque table it forwards
// to the runner; it never touches the pool.
//
// Thread-safety: none; owned by the scheduler thread.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "core/request.h"

namespace pagoda {

struct ComputedBlocks {
  std::vector<BlockId> blocks;  // cached full blocks of the request's prefix, in order
  int32_t num_tokens = 0;       // tokens they hold
};


class KvCacheManager {
 public:
  // num_blocks includes the null block. num_host_blocks > 0 enables swap preemption.
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, int32_t num_host_blocks = 0);

  int32_t block_size() const { return pool_.block_size(); }
  // Tokens the whole cache can hold.
  int64_t capacity_tokens() const { return static_cast<int64_t>(pool_.num_usable_blocks()) * pool_.block_size(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  double usage() const { return pool_.usage(); }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  bool swap_enabled() const { return host_ != nullptr; }

  // Longest cached prefix of the request's tokens in full blocks, leaving at least the last token
  // uncomputed (its logits are needed). Takes no references; counts a prefix-cache query.
  ComputedBlocks find_computed_blocks(Request& r);

  // Makes room for `num_new_tokens` tokens after r.num_computed_tokens (+ new_computed's tokens,
  // for a request being admitted with a prefix hit). On success returns the block ids appended to
  // the request's table (the computed ones first) and registers newly full blocks in the prefix
  // cache; on failure returns nullopt and changes nothing.
  std::optional<std::vector<BlockId>> allocate_slots(Request& r, int32_t num_new_tokens, const ComputedBlocks& new_computed = {});

  // Releases all blocks of the request (tail first, so its last blocks are evicted first).
  void free(const Request& r);

  // Speculative decoding: releases the request's tail blocks that hold none of its first
  // `num_tokens` token slots (the lookahead slots of rejected drafts). Blocks registered in the
  // prefix cache are never among them (only verified tokens are hashed). Returns the number of
  // blocks released (the runner's block table must then be replaced).
  int32_t trim(const Request& r, int32_t num_tokens);

  std::span<const BlockId> block_table(const std::string& request_id) const;
  bool holds(const std::string& request_id) const { return tables_.count(request_id) != 0; }

  // Swap preemption: moves the request's blocks to host memory (nullopt: host space is full);
  // returns the (device, host) copies the runner must make before the device blocks are reused.
  std::optional<std::vector<BlockCopy>> swap_out(Request& r);
  // Moves a swapped-out request back: (host, device) copies, or nullopt if device blocks are short.
  std::optional<std::vector<BlockCopy>> swap_in(Request& r);
  int32_t num_free_host_blocks() const { return host_ ? host_->num_free_blocks() : 0; }

  void reset_prefix_cache() { pool_.reset_prefix_cache(); }
  const BlockPool& pool() const { return pool_; }

 private:
  struct Table {
    std::vector<BlockId> blocks;
    int32_t num_hashed_blocks = 0;  // leading blocks already registered in the prefix cache
    bool on_host = false;
  };
  void extend_hashes(Request& r) const;
  void cache_full_blocks(Request& r, Table& t, int32_t num_tokens);

  BlockPool pool_;
  std::unique_ptr<BlockPool> host_;
  std::unordered_map<std::string, Table> tables_;
  PrefixCacheStats stats_;
};

}  // namespace pagoda
