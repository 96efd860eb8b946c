#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "common/check.h"
#include "core/kv_window.h"

namespace pagoda {

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, int32_t num_host_blocks)
    : pool_(num_blocks, block_size, enable_prefix_caching) {
  // The host tier caches by hash exactly when the primary pool does.
  if (num_host_blocks > 0) host_ = std::make_unique<BlockPool>(num_host_blocks + 1, block_size, enable_prefix_caching);
}

void KvCacheManager::set_disk_tier(std::unique_ptr<DiskTierStore> disk, KvHostBlockIo* io) {
  PAGODA_CHECK(host_tier() && disk != nullptr && io != nullptr, "the disk tier needs a host tier, prefix caching and block I/O");
  PAGODA_CHECK(disk->block_bytes() == io->host_block_bytes(), "disk tier blocks of {} bytes, host blocks of {}",
               disk->block_bytes(), io->host_block_bytes());
  disk_ = std::move(disk);
  io_ = io;
  disk_buffer_.resize(static_cast<size_t>(disk_->block_bytes()));
}

void KvCacheManager::set_sliding_window(int32_t window) {
  PAGODA_CHECK(window >= 0, "sliding window {}", window);
  window_ = window;
}

int32_t KvCacheManager::evict_outside_window(const Request& r) {
  if (window_ <= 0) return 0;
  auto it = tables_.find(r.id);
  if (it == tables_.end() || it->second.on_host) return 0;
  std::vector<BlockId>& blocks = it->second.blocks;
  const int32_t first_needed = r.num_computed_tokens - window_ + 1;
  if (first_needed <= 0) return 0;
  const int32_t skip = std::min<int32_t>(first_needed / pool_.block_size(), static_cast<int32_t>(blocks.size()));
  // From the newest skipped block back to the first already-null one (those before it were
  // released by earlier calls), so the release order is tail first, as free() does.
  std::vector<BlockId> released;
  for (int32_t i = skip - 1; i >= 0 && blocks[i] != kNullBlock; --i) {
    released.push_back(blocks[i]);
    blocks[i] = kNullBlock;
  }
  pool_.release(released);
  return static_cast<int32_t>(released.size());
}

int32_t KvCacheManager::max_blocks_held(int32_t num_tokens, int32_t step_tokens) const {
  return static_cast<int32_t>(kv_window_blocks_held(window_, pool_.block_size(), num_tokens, step_tokens));
}

void KvCacheManager::begin_step() {
  if (host_) host_->release(held_host_);
  held_host_.clear();
  fresh_primary_.clear();
}

std::pair<std::vector<BlockCopy>, std::vector<BlockCopy>> KvCacheManager::take_tier_copies() {
  std::pair<std::vector<BlockCopy>, std::vector<BlockCopy>> out{std::move(spills_), std::move(fills_)};
  spills_.clear();
  fills_.clear();
  return out;
}

std::vector<BlockId> KvCacheManager::allocate_primary(int32_t n) {
  if (!host_tier()) return pool_.allocate(n);
  std::vector<EvictedBlock> evicted;
  std::vector<BlockId> out = pool_.allocate(n, &evicted);
  for (const EvictedBlock& e : evicted) spill_to_host(e);
  return out;
}

void KvCacheManager::spill_to_host(const EvictedBlock& e) {
  if (fresh_primary_.count(e.block)) return;                 // its K/V is not written yet
  if (host_->find_cached(e.hash, e.tokens)) return;           // the tier has it already
  if (host_->num_free_blocks() == 0) return;                  // every host block is in use: drop it
  const BlockId h = allocate_host(1)[0];
  host_->cache_block(h, e.hash, e.tokens);
  spills_.emplace_back(e.block, h);
  held_host_.push_back(h);  // written by this step's copy; evictable from the next step on
  ++tier_stats_.host_stores;
}

std::vector<BlockId> KvCacheManager::allocate_host(int32_t n) {
  if (!disk_) return host_->allocate(n);
  std::vector<EvictedBlock> evicted;
  std::vector<BlockId> out = host_->allocate(n, &evicted);
  // Held blocks (this step's copies) are never in the free queue, so every evicted block holds
  // what an earlier step wrote.
  for (const EvictedBlock& e : evicted) {
    if (disk_->contains(e.hash)) continue;
    io_->read_host_block(e.block, disk_buffer_);
    disk_->store(e.hash, e.tokens, disk_buffer_);
    ++tier_stats_.disk_stores;
  }
  return out;
}

std::optional<BlockId> KvCacheManager::promote_from_disk(BlockHash hash, std::span<const int32_t> tokens) {
  if (!disk_ || !disk_->contains(hash) || host_->num_free_blocks() == 0) return std::nullopt;
  // The host block first: evicting for it may write another block to disk through disk_buffer_.
  const BlockId h = allocate_host(1)[0];
  const int64_t rejected = disk_->num_rejected();
  if (!disk_->load(hash, tokens, disk_buffer_)) {
    tier_stats_.disk_rejected += disk_->num_rejected() - rejected;
    host_->release(std::span<const BlockId>(&h, 1));
    return std::nullopt;
  }
  io_->write_host_block(h, disk_buffer_);
  host_->cache_block(h, hash, tokens);
  held_host_.push_back(h);
  return h;
}

void KvCacheManager::reset_prefix_cache() {
  pool_.reset_prefix_cache();
  if (host_) host_->reset_prefix_cache();
}

void KvCacheManager::extend_hashes(Request& r) const {
  const int32_t bs = pool_.block_size();
  const int32_t full = r.num_tokens() / bs;
  std::vector<int32_t> tokens(bs);
  while (static_cast<int32_t>(r.block_hashes.size()) < full) {
    const int32_t b = static_cast<int32_t>(r.block_hashes.size());
    for (int32_t i = 0; i < bs; ++i) tokens[i] = r.token_at(b * bs + i);
    const BlockHash parent = b == 0 ? kRootHash : r.block_hashes[b - 1];
    r.block_hashes.push_back(hash_block_tokens(parent, tokens));
  }
}

ComputedBlocks KvCacheManager::find_computed_blocks(Request& r) {
  ComputedBlocks out;
  if (!pool_.prefix_caching()) return out;
  extend_hashes(r);
  const int32_t bs = pool_.block_size();
  // The last token must be computed to get logits, so at most num_tokens - 1 tokens can hit.
  const int32_t max_blocks = (r.num_tokens() - 1) / bs;
  std::vector<int32_t> tokens(bs);
  int32_t disk_blocks = 0;
  for (int32_t b = 0; b < max_blocks; ++b) {
    for (int32_t i = 0; i < bs; ++i) tokens[i] = r.token_at(b * bs + i);
    const BlockHash hash = r.block_hashes[b];
    if (out.host_blocks.empty()) {
      if (auto hit = pool_.find_cached(hash, tokens)) {
        out.blocks.push_back(*hit);
        continue;
      }
    }
    if (!host_tier()) break;
    std::optional<BlockId> h = host_->find_cached(hash, tokens);
    if (h) {
      // Held from now on: a promotion below must not evict it for another block.
      host_->touch(std::span<const BlockId>(&*h, 1));
      held_host_.push_back(*h);
    } else {
      h = promote_from_disk(hash, tokens);
      if (!h) break;
      ++disk_blocks;
    }
    out.host_blocks.push_back(*h);
  }
  const int32_t host_blocks = static_cast<int32_t>(out.host_blocks.size());
  out.num_tokens = static_cast<int32_t>(out.blocks.size() + out.host_blocks.size()) * bs;
  stats_.queries += r.num_tokens();
  stats_.hits += static_cast<int64_t>(out.blocks.size()) * bs;
  tier_stats_.host_hits += static_cast<int64_t>(host_blocks - disk_blocks) * bs;
  tier_stats_.disk_hits += static_cast<int64_t>(disk_blocks) * bs;
  return out;
}

void KvCacheManager::cache_full_blocks(Request& r, Table& t, int32_t num_tokens) {
  if (!pool_.prefix_caching()) return;
  const int32_t bs = pool_.block_size();
  const int32_t full = std::min(num_tokens, r.num_tokens()) / bs;
  if (full <= t.num_hashed_blocks) return;
  extend_hashes(r);
  std::vector<int32_t> tokens(bs);
  for (int32_t b = t.num_hashed_blocks; b < full; ++b) {
    if (t.blocks[b] == kNullBlock) continue;  // released: outside the sliding window
    for (int32_t i = 0; i < bs; ++i) tokens[i] = r.token_at(b * bs + i);
    pool_.cache_block(t.blocks[b], r.block_hashes[b], tokens);
    if (host_) fresh_primary_.insert(t.blocks[b]);
  }
  t.num_hashed_blocks = full;
}

std::optional<std::vector<BlockId>> KvCacheManager::allocate_slots(Request& r, int32_t num_new_tokens,
                                                                   const ComputedBlocks& new_computed) {
  PAGODA_CHECK(num_new_tokens >= 0, "allocate_slots({})", num_new_tokens);
  Table& t = tables_[r.id];
  PAGODA_CHECK(!t.on_host, "allocate_slots for swapped-out request {}", r.id);
  PAGODA_CHECK((new_computed.blocks.empty() && new_computed.host_blocks.empty()) || t.blocks.empty(),
               "prefix hit for a request that already has blocks");
  const int32_t bs = pool_.block_size();
  const int32_t total = r.num_computed_tokens + new_computed.num_tokens + num_new_tokens;
  const int32_t have = static_cast<int32_t>(t.blocks.size() + new_computed.blocks.size());
  const int32_t need = std::max(0, (total + bs - 1) / bs - have);
  // Computed blocks with no other user are in the free queue; touching them consumes free slots.
  int32_t evictable_hits = 0;
  for (BlockId b : new_computed.blocks) evictable_hits += pool_.ref_count(b) == 0;
  if (need > pool_.num_free_blocks() - evictable_hits) {
    if (t.blocks.empty()) tables_.erase(r.id);
    return std::nullopt;
  }
  std::vector<BlockId> added(new_computed.blocks);
  pool_.touch(new_computed.blocks);
  t.blocks.insert(t.blocks.end(), new_computed.blocks.begin(), new_computed.blocks.end());
  if (!new_computed.blocks.empty()) t.num_hashed_blocks = static_cast<int32_t>(new_computed.blocks.size());
  std::vector<BlockId> fresh = allocate_primary(need);
  // The host-tier hits come first among the fresh blocks: they are filled by copies.
  PAGODA_CHECK(fresh.size() >= new_computed.host_blocks.size(), "{} fresh blocks for {} host hits", fresh.size(),
               new_computed.host_blocks.size());
  for (size_t i = 0; i < new_computed.host_blocks.size(); ++i) {
    const BlockId h = new_computed.host_blocks[i];
    PAGODA_CHECK(host_->ref_count(h) > 0, "host hit {} not held since its lookup", h);
    fills_.emplace_back(h, fresh[i]);
  }
  t.blocks.insert(t.blocks.end(), fresh.begin(), fresh.end());
  added.insert(added.end(), fresh.begin(), fresh.end());
  // Blocks that will be full once this step's tokens are computed become findable now: a later
  // request in the same batch reads them only after this step writes them (K/V are written
  // layer by layer before attention reads them).
  cache_full_blocks(r, t, total);
  return added;
}

namespace {

// The table's blocks from `begin` on, last first, without the null entries (released ones).
std::vector<BlockId> held_reversed(const std::vector<BlockId>& blocks, size_t begin = 0) {
  std::vector<BlockId> rev;
  for (size_t i = blocks.size(); i > begin; --i)
    if (blocks[i - 1] != kNullBlock) rev.push_back(blocks[i - 1]);
  return rev;
}

}  // namespace

void KvCacheManager::free(const Request& r) {
  auto it = tables_.find(r.id);
  if (it == tables_.end()) return;
  std::vector<BlockId> rev = held_reversed(it->second.blocks);
  (it->second.on_host ? *host_ : pool_).release(rev);
  tables_.erase(it);
}

int32_t KvCacheManager::trim(const Request& r, int32_t num_tokens) {
  auto it = tables_.find(r.id);
  if (it == tables_.end() || it->second.on_host) return 0;
  Table& t = it->second;
  const int32_t bs = pool_.block_size();
  const int32_t keep = std::max(0, (num_tokens + bs - 1) / bs);
  const int32_t n = static_cast<int32_t>(t.blocks.size());
  if (keep >= n) return 0;
  PAGODA_CHECK(keep >= t.num_hashed_blocks, "trim of request {} below its hashed blocks ({} < {})", r.id, keep,
               t.num_hashed_blocks);
  std::vector<BlockId> rev = held_reversed(t.blocks, static_cast<size_t>(keep));
  pool_.release(rev);
  t.blocks.resize(keep);
  return n - keep;
}

std::span<const BlockId> KvCacheManager::block_table(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  if (it == tables_.end()) return {};
  return it->second.blocks;
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_out(Request& r) {
  PAGODA_CHECK(host_ != nullptr, "swap_out without host blocks");
  auto it = tables_.find(r.id);
  PAGODA_CHECK(it != tables_.end() && !it->second.on_host, "swap_out of request {} without device blocks", r.id);
  Table& t = it->second;
  const int32_t n = static_cast<int32_t>(t.blocks.size());
  int32_t held = 0;
  for (BlockId b : t.blocks) held += b != kNullBlock;
  if (held > host_->num_free_blocks()) return std::nullopt;
  std::vector<BlockId> fresh = allocate_host(held);
  // Null entries (released outside the sliding window) stay null on the host.
  std::vector<BlockId> host_blocks(static_cast<size_t>(n), kNullBlock);
  std::vector<BlockCopy> copies;
  for (int32_t i = 0, k = 0; i < n; ++i) {
    if (t.blocks[i] == kNullBlock) continue;
    host_blocks[i] = fresh[k++];
    copies.emplace_back(t.blocks[i], host_blocks[i]);
  }
  // Its full blocks stay findable by hash in the host tier (for other requests too).
  if (host_->prefix_caching()) {
    const int32_t bs = pool_.block_size();
    std::vector<int32_t> tokens(bs);
    for (int32_t b = 0; b < std::min(t.num_hashed_blocks, n); ++b) {
      if (host_blocks[b] == kNullBlock) continue;
      for (int32_t i = 0; i < bs; ++i) tokens[i] = r.token_at(b * bs + i);
      host_->cache_block(host_blocks[b], r.block_hashes[b], tokens);
    }
  }
  ++tier_stats_.swap_outs;
  std::vector<BlockId> rev = held_reversed(t.blocks);
  pool_.release(rev);
  t.blocks = std::move(host_blocks);
  t.on_host = true;
  r.swapped_out = true;
  return copies;
}

std::optional<std::vector<BlockCopy>> KvCacheManager::swap_in(Request& r) {
  auto it = tables_.find(r.id);
  PAGODA_CHECK(it != tables_.end() && it->second.on_host, "swap_in of request {} not on host", r.id);
  Table& t = it->second;
  const int32_t n = static_cast<int32_t>(t.blocks.size());
  int32_t held = 0;
  for (BlockId b : t.blocks) held += b != kNullBlock;
  if (held > pool_.num_free_blocks()) return std::nullopt;
  std::vector<BlockId> fresh = allocate_primary(held);
  std::vector<BlockId> dev(static_cast<size_t>(n), kNullBlock);
  std::vector<BlockCopy> copies;
  for (int32_t i = 0, k = 0; i < n; ++i) {
    if (t.blocks[i] == kNullBlock) continue;
    dev[i] = fresh[k++];
    copies.emplace_back(t.blocks[i], dev[i]);
    // The host blocks are read by this step's copies: their references go at the next step.
    held_host_.push_back(t.blocks[i]);
  }
  ++tier_stats_.swap_ins;
  t.blocks = std::move(dev);
  t.on_host = false;
  t.num_hashed_blocks = 0;  // re-register below (the device blocks are new)
  r.swapped_out = false;
  cache_full_blocks(r, t, r.num_computed_tokens);
  return copies;
}

}  // namespace pagoda
