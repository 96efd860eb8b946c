// KvCacheManager: which KV blocks each request holds, prefix-cache lookups, and the secondary
// tiers (host memory, disk) below the primary pool.
//
// Contract (vLLM v1 style): capacity is a return value. allocate_slots() returns nullopt when the
// free blocks cannot cover the request's next tokens — the scheduler then preempts someone and
// retries — never an exception. The scheduler sees block ids only as an opaque table it forwards
// to the runner; it never touches the pools.
//
// Tiers (kv/kv_tier_config.h; docs/decisions.md#d40). The host tier is a second BlockPool whose
// blocks live in the executor's host memory; it serves three uses with one LRU:
//   - spill: a full, cached primary block handed out again is first copied to a host block that
//     keeps its chained hash (a device-to-host copy of the step, in take_tier_copies());
//   - fill: a prefix-cache lookup that misses the primary pool continues in the host tier (and
//     below it the disk tier); hits get fresh primary blocks and host-to-device copies instead of
//     being recomputed;
//   - swap preemption: swap_out() moves a request's blocks to host blocks (its full blocks keep
//     their hashes there, so others can hit them too).
// A host block evicted by the host LRU goes to the disk tier (DiskTierStore) when one is set;
// a disk hit is read, checked and written into a host block at lookup time (through
// KvHostBlockIo), so a corrupt file is a miss before anything is scheduled.
// Ordering: the copies of one step run spills and swap-outs (device to host) before fills and
// swap-ins (host to device), before the forward pass. Host blocks used by a step's copies keep a
// reference until the next begin_step(), so no other copy of the same step can overwrite them;
// primary blocks registered in the current step are never spilled (their K/V is not written yet).
//
// Sliding window (docs/decisions.md#d45): for a model whose every layer attends over the
// last W positions only (Mistral v0.1 style), set_sliding_window(W) lets evict_outside_window()
// free the blocks no later query can see: with n tokens computed, every later query is at a
// position >= n and sees keys >= n - W + 1, so the blocks wholly before that are released (cached
// ones stay findable until handed out again) and their table entries become the null block. A
// running request then holds at most ceil((W - 1) / block_size) + 1 blocks plus its step's new
// tokens. Tables keep their length (entry i is still positions [i * bs, (i + 1) * bs)); every
// operation here skips null entries. Models with full-attention layers keep every block (their
// full layers read all of them); one table per layer group is not implemented.
//
// Thread-safety: none; owned by the scheduler thread.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/request.h"
#include "kv/block_pool.h"
#include "core/kv_tier_stats.h"
#include "kv/disk_tier_store.h"
#include "kv/kv_host_block_io.h"

namespace pagoda {

struct ComputedBlocks {
  std::vector<BlockId> blocks;       // cached primary blocks of the request's prefix, in order
  std::vector<BlockId> host_blocks;  // then host-tier blocks (filled into fresh primary blocks)
  int32_t num_tokens = 0;            // tokens they hold, both kinds
};

class KvCacheManager {
 public:
  // num_blocks includes the null block. num_host_blocks > 0 enables the host tier (and swap
  // preemption).
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, int32_t num_host_blocks = 0);

  // Puts the disk tier below the host tier; `io` reads and writes host blocks (it must outlive
  // the manager). Needs a host tier and prefix caching.
  void set_disk_tier(std::unique_ptr<DiskTierStore> disk, KvHostBlockIo* io);

  // Every layer attends over the last `window` positions (0: full attention, nothing evicted).
  void set_sliding_window(int32_t window);
  int32_t sliding_window() const { return window_; }
  // Releases the request's blocks that lie wholly before the window of its next query (see the
  // top of this file) and nulls their table entries; returns how many were released (the
  // runner's block table must then be replaced). 0 without a window.
  int32_t evict_outside_window(const Request& r);
  // Most blocks a request of `num_tokens` tokens holds at once (the window bounds it), for a
  // step that computes up to `step_tokens` of them.
  int32_t max_blocks_held(int32_t num_tokens, int32_t step_tokens) const;

  int32_t block_size() const { return pool_.block_size(); }
  // Tokens the whole cache can hold.
  int64_t capacity_tokens() const { return static_cast<int64_t>(pool_.num_usable_blocks()) * pool_.block_size(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }
  double usage() const { return pool_.usage(); }
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  const KvTierStats& tier_stats() const { return tier_stats_; }
  bool swap_enabled() const { return host_ != nullptr; }
  bool host_tier() const { return host_ != nullptr && pool_.prefix_caching(); }
  const DiskTierStore* disk_tier() const { return disk_.get(); }
  int32_t num_host_blocks() const { return host_ ? host_->num_usable_blocks() : 0; }

  // Start of a scheduler step: the previous step's copies are done; releases the host blocks
  // they held and forgets which primary blocks were registered during it.
  void begin_step();
  // The step's tier copies so far (spills: device to host; fills: host to device), moved out.
  std::pair<std::vector<BlockCopy>, std::vector<BlockCopy>> take_tier_copies();

  // Longest cached prefix of the request's tokens in full blocks (primary pool, then the host and
  // disk tiers), leaving at least the last token uncomputed (its logits are needed). Takes no
  // references on primary blocks; host-tier hits are held until the next begin_step() and a disk
  // hit is moved into a host block here, so allocate_slots() in the same step can fill from them.
  // Counts a query.
  ComputedBlocks find_computed_blocks(Request& r);

  // Makes room for `num_new_tokens` tokens after r.num_computed_tokens (+ new_computed's tokens,
  // for a request being admitted with a prefix hit). On success returns the block ids appended to
  // the request's table (the computed ones first), queues the fills of new_computed's host blocks
  // and registers newly full blocks in the prefix cache; on failure returns nullopt and changes
  // nothing.
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

  // Drops every cached hash of the primary pool and the host tier (the disk tier keeps only
  // blocks written from checked host blocks of earlier steps).
  void reset_prefix_cache();
  const BlockPool& pool() const { return pool_; }

 private:
  struct Table {
    std::vector<BlockId> blocks;
    int32_t num_hashed_blocks = 0;  // leading blocks already registered in the prefix cache
    bool on_host = false;
  };
  void extend_hashes(Request& r) const;
  void cache_full_blocks(Request& r, Table& t, int32_t num_tokens);
  // Primary blocks, spilling evicted cached ones to the host tier.
  std::vector<BlockId> allocate_primary(int32_t n);
  // Host blocks, writing evicted cached ones to the disk tier. Precondition: n free.
  std::vector<BlockId> allocate_host(int32_t n);
  void spill_to_host(const EvictedBlock& e);
  // Moves a disk-tier block into a fresh host block (kept referenced until begin_step());
  // nullopt on a miss or a rejected file.
  std::optional<BlockId> promote_from_disk(BlockHash hash, std::span<const int32_t> tokens);

  BlockPool pool_;
  std::unique_ptr<BlockPool> host_;
  std::unique_ptr<DiskTierStore> disk_;
  KvHostBlockIo* io_ = nullptr;
  int32_t window_ = 0;
  std::vector<uint8_t> disk_buffer_;  // one block's bytes
  std::unordered_map<std::string, Table> tables_;
  PrefixCacheStats stats_;
  KvTierStats tier_stats_;
  std::vector<BlockCopy> spills_, fills_;     // this step's tier copies
  std::vector<BlockId> held_host_;            // host blocks referenced until begin_step()
  std::unordered_set<BlockId> fresh_primary_; // primary blocks registered this step
};

}  // namespace pagoda
