// DiskTierStore: the KV cache's disk tier. One file per full block, named by the block's chained
// prefix hash, in `dir/<namespace>/` where the namespace (16 hex digits) is a fingerprint of the
// model file, its KV geometry, the KV dtype and the block size: a directory can be shared by
// models and restarts without one ever reading another's blocks.
//
// File layout (little-endian): a 48-byte header
//   magic "PGKVBLK1" | namespace u64 | block hash u64 | num_tokens u32 | reserved u32 |
//   payload_bytes u64 | checksum u64
// then num_tokens int32 token ids, then payload_bytes of block data. checksum is XXH3-64 of the
// header's first 40 bytes, the token ids and the payload. A file that is short, long, of another
// namespace or hash, whose tokens differ from the lookup's or whose checksum does not match is a
// miss: it is deleted and counted (num_rejected), never returned.
//
// Capacity: at most capacity_bytes of files; storing beyond it deletes the least recently used
// files first. Files present at open (an earlier run) are indexed and kept, oldest first in LRU.
// Writes go to a temporary file renamed into place, so a crash leaves no half-written block under
// a block's name (and a torn one fails the checksum anyway).
// Thread-safety: none; the KV cache manager's thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/block_ids.h"

namespace pagoda {

class DiskTierStore {
 public:
  // Creates `dir/<namespace hex>/` if needed and indexes the block files already there.
  static Result<std::unique_ptr<DiskTierStore>> open(const std::string& dir, uint64_t name_space, int64_t capacity_bytes,
                                                     int64_t block_bytes);

  // Whether a file for `hash` is indexed (no bytes read; load() may still reject it).
  bool contains(BlockHash hash) const { return index_.count(hash) != 0; }
  // Reads the block into `dst` (block_bytes) after checking everything the header promises and
  // that its tokens are `tokens`. false: absent or rejected (the file is then deleted).
  bool load(BlockHash hash, std::span<const int32_t> tokens, std::span<uint8_t> dst);
  // Writes (or rewrites) the block's file, evicting LRU files to stay under capacity. An I/O
  // failure is logged once and the block is dropped (the tier is a cache). A block larger than
  // the whole capacity is not stored.
  void store(BlockHash hash, std::span<const int32_t> tokens, std::span<const uint8_t> src);

  const std::string& directory() const { return dir_; }
  // The file of `hash` (whether or not it exists): tests corrupt it.
  std::string path_of(BlockHash hash) const;
  int64_t block_bytes() const { return block_bytes_; }
  int64_t capacity_bytes() const { return capacity_; }
  int64_t bytes_used() const { return used_; }
  int64_t num_blocks() const { return static_cast<int64_t>(index_.size()); }
  int64_t num_rejected() const { return rejected_; }
  int64_t num_evicted() const { return evicted_; }

  static constexpr int64_t kHeaderBytes = 48;

 private:
  DiskTierStore(std::string dir, uint64_t name_space, int64_t capacity_bytes, int64_t block_bytes)
      : dir_(std::move(dir)), ns_(name_space), capacity_(capacity_bytes), block_bytes_(block_bytes) {}
  struct Entry {
    int64_t file_bytes = 0;
    std::list<BlockHash>::iterator lru;  // position in lru_ (front: least recently used)
  };
  void erase(BlockHash hash, bool remove_file);
  int64_t file_bytes(size_t num_tokens) const;

  std::string dir_;
  uint64_t ns_;
  int64_t capacity_, block_bytes_;
  int64_t used_ = 0, rejected_ = 0, evicted_ = 0;
  bool warned_ = false;
  std::list<BlockHash> lru_;
  std::unordered_map<BlockHash, Entry> index_;
};

}  // namespace pagoda
