// Hits and traffic per KV cache tier (kv/kv_cache_manager.h counts them; the engine reports them).
// Hits are tokens (as the prefix cache counts them), stores and rejections blocks.
#pragma once

#include <cstdint>

namespace pagoda {

struct KvTierStats {
  int64_t host_hits = 0;      // prefix tokens found in the host tier
  int64_t disk_hits = 0;      // prefix tokens found in the disk tier (read back through the host tier)
  int64_t host_stores = 0;    // primary blocks spilled to the host tier
  int64_t disk_stores = 0;    // host blocks written to the disk tier
  int64_t disk_rejected = 0;  // disk files found corrupt or truncated (misses)
  int64_t swap_outs = 0, swap_ins = 0;  // requests swapped (preemption)
};

}  // namespace pagoda
