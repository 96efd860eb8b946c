// KvHostBlockIo: what the KV cache manager needs of the storage side to move blocks between the
// host tier and the disk tier: a host-tier block's bytes, read or written synchronously on the
// calling (engine-core) thread. A block's bytes are all layers' K and V of its slots, in the
// executor's own order; the manager only moves them, never interprets them.
//
// Contract: read_host_block() sees every copy into the block issued by earlier steps (an
// asynchronous device-to-host copy is waited for); write_host_block() is complete when it returns
// and is seen by every later host-to-device copy.
#pragma once

#include <cstdint>
#include <span>

#include "core/block_ids.h"

namespace pagoda {

class KvHostBlockIo {
 public:
  virtual ~KvHostBlockIo() = default;
  virtual int64_t host_block_bytes() const = 0;
  virtual void read_host_block(BlockId block, std::span<uint8_t> dst) = 0;
  virtual void write_host_block(BlockId block, std::span<const uint8_t> src) = 0;
};

}  // namespace pagoda
