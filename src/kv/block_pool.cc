#include "kv/block_pool.h"

#include <algorithm>

#include "common/check.h"

namespace pagoda {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), caching_(enable_prefix_caching), blocks_(num_blocks) {
  PAGODA_CHECK(num_blocks >= 2 && block_size >= 1, "block pool of {} blocks of {}", num_blocks, block_size);
  blocks_[kNullBlock].ref_count = 1;  // never free
  for (BlockId b = 1; b < num_blocks; ++b) push_free_tail(b);
}

double BlockPool::usage() const {
  return num_usable_blocks() == 0 ? 0.0 : 1.0 - static_cast<double>(num_free_) / num_usable_blocks();
}

void BlockPool::push_free_tail(BlockId b) {
  Block& blk = blocks_[b];
  PAGODA_CHECK(!blk.in_free_queue, "block {} already free", b);
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) blocks_[free_tail_].next = b;
  else free_head_ = b;
  free_tail_ = b;
  blk.in_free_queue = true;
  ++num_free_;
}

void BlockPool::unlink_free(BlockId b) {
  Block& blk = blocks_[b];
  PAGODA_CHECK(blk.in_free_queue, "block {} not in the free queue", b);
  if (blk.prev >= 0) blocks_[blk.prev].next = blk.next;
  else free_head_ = blk.next;
  if (blk.next >= 0) blocks_[blk.next].prev = blk.prev;
  else free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_queue = false;
  --num_free_;
}

void BlockPool::evict_hash(BlockId b) {
  Block& blk = blocks_[b];
  if (!blk.hashed) return;
  auto range = cached_.equal_range(blk.hash);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == b) {
      cached_.erase(it);
      break;
    }
  }
  blk.hashed = false;
  blk.tokens.clear();
}

std::vector<BlockId> BlockPool::allocate(int32_t n, std::vector<EvictedBlock>* evicted) {
  PAGODA_CHECK(n >= 0 && n <= num_free_, "allocate {} blocks with {} free", n, num_free_);
  std::vector<BlockId> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = free_head_;
    unlink_free(b);
    if (evicted != nullptr && blocks_[b].hashed) evicted->push_back({b, blocks_[b].hash, blocks_[b].tokens});
    evict_hash(b);
    blocks_[b].ref_count = 1;
    out.push_back(b);
  }
  return out;
}

std::optional<BlockId> BlockPool::find_cached(BlockHash hash, std::span<const int32_t> tokens) const {
  if (!caching_) return std::nullopt;
  auto range = cached_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    const Block& blk = blocks_[it->second];
    if (std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end())) return it->second;
  }
  return std::nullopt;
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    PAGODA_CHECK(b > 0 && b < num_blocks(), "touch block {}", b);
    if (blocks_[b].ref_count == 0) unlink_free(b);
    ++blocks_[b].ref_count;
  }
}

void BlockPool::release(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    if (b == kNullBlock) continue;
    Block& blk = blocks_[b];
    PAGODA_CHECK(blk.ref_count > 0, "release of free block {}", b);
    if (--blk.ref_count == 0) push_free_tail(b);
  }
}

void BlockPool::cache_block(BlockId block, BlockHash hash, std::span<const int32_t> tokens) {
  if (!caching_) return;
  PAGODA_CHECK(static_cast<int32_t>(tokens.size()) == block_size_, "cache_block needs a full block");
  Block& blk = blocks_[block];
  if (blk.hashed) return;
  if (find_cached(hash, tokens)) return;  // same content already cached in another block
  blk.hashed = true;
  blk.hash = hash;
  blk.tokens.assign(tokens.begin(), tokens.end());
  cached_.emplace(hash, block);
}

void BlockPool::reset_prefix_cache() {
  for (auto& [_, b] : cached_) {
    blocks_[b].hashed = false;
    blocks_[b].tokens.clear();
  }
  cached_.clear();
}

bool BlockPool::check_invariants() const {
  int32_t free_count = 0;
  for (BlockId b = free_head_, prev = -1; b >= 0; prev = b, b = blocks_[b].next) {
    if (blocks_[b].prev != prev || !blocks_[b].in_free_queue || blocks_[b].ref_count != 0) return false;
    ++free_count;
  }
  if (free_count != num_free_) return false;
  for (BlockId b = 1; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref_count < 0 || (blk.ref_count == 0) != blk.in_free_queue) return false;
  }
  size_t hashed = 0;
  for (BlockId b = 1; b < num_blocks(); ++b) hashed += blocks_[b].hashed;
  if (hashed != cached_.size()) return false;
  for (const auto& [h, b] : cached_)
    if (!blocks_[b].hashed || blocks_[b].hash != h) return false;
  return true;
}

}  // namespace pagoda
