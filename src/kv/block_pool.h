// BlockPool: the paged KV cache's blocks as host-side bookkeeping (no tensors, no devices).
//
// Every block has a reference count. Blocks with count 0 sit in a free queue in eviction order
// (least recently freed first); a freed block that holds a cached prefix keeps its hash and stays
// findable by prefix lookups until it is handed out again (LRU eviction). Block 0 is the null
// block: never allocated, used as padding in block tables.
//
// Prefix cache: a full block is keyed by a chained hash of (parent block's hash, its token ids);
// a lookup hit is confirmed by comparing the stored token ids (collision guard).
//
// Thread-safety: none; the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/block_ids.h"

namespace pagoda {

struct PrefixCacheStats {
  int64_t queries = 0;  // tokens looked up
  int64_t hits = 0;     // tokens found in the primary pool
};

// A cached block whose hash allocate() dropped to hand the block out again.
struct EvictedBlock {
  BlockId block = kNullBlock;
  BlockHash hash = 0;
  std::vector<int32_t> tokens;
};

class BlockPool {
 public:
  // num_blocks includes the null block; usable blocks are [1, num_blocks).
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return caching_; }
  int32_t num_free_blocks() const { return num_free_; }
  int32_t num_usable_blocks() const { return num_blocks() - 1; }
  // Fraction of usable blocks with a non-zero reference count.
  double usage() const;

  // Pops `n` blocks from the head of the free queue (evicting their cached hashes), each with
  // reference count 1. Precondition: n <= num_free_blocks(). With `evicted`, the blocks whose
  // cached hash was dropped are appended there (their contents are still intact until the caller
  // writes the blocks).
  std::vector<BlockId> allocate(int32_t n, std::vector<EvictedBlock>* evicted = nullptr);

  // A cached block holding exactly `tokens` (block_size of them) under `hash`, or nullopt.
  std::optional<BlockId> find_cached(BlockHash hash, std::span<const int32_t> tokens) const;

  // Takes a reference on blocks found in the cache (removing those with count 0 from the free
  // queue).
  void touch(std::span<const BlockId> blocks);

  // Drops one reference per block; blocks reaching 0 join the free queue's tail in the given
  // order (pass a request's blocks in reverse so its tail blocks are evicted first).
  void release(std::span<const BlockId> blocks);

  // Registers a full block's hash and tokens so later requests can find it. A block that
  // already has a hash keeps it; a hash already present (another block with the same content)
  // keeps the existing entry.
  void cache_block(BlockId block, BlockHash hash, std::span<const int32_t> tokens);

  int32_t ref_count(BlockId b) const { return blocks_[b].ref_count; }
  bool is_cached(BlockId b) const { return blocks_[b].hashed; }
  // Drops every cached hash (e.g. after weights change); blocks stay allocated as they are.
  void reset_prefix_cache();

  // Invariant check for tests: counts, free-queue membership and hash-map consistency.
  bool check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    BlockId prev = -1, next = -1;  // free-queue links (-1: none)
    bool in_free_queue = false;
    bool hashed = false;
    BlockHash hash = 0;
    std::vector<int32_t> tokens;  // for the collision guard
  };
  void push_free_tail(BlockId b);
  void unlink_free(BlockId b);
  void evict_hash(BlockId b);

  int32_t block_size_;
  bool caching_;
  std::vector<Block> blocks_;
  BlockId free_head_ = -1, free_tail_ = -1;
  int32_t num_free_ = 0;
  std::unordered_multimap<BlockHash, BlockId> cached_;
};

}  // namespace pagoda
