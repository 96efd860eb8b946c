// KvTierConfig: the secondary tiers of the KV cache below the primary block pool (the executor's
// KV memory: device HBM on CUDA, host memory on the CPU). One struct, filled from the command line
// (`--kv-host-gb`, `--kv-disk-dir`, `--kv-disk-gb`; `--swap-space` is the host tier in bytes) and
// printed at start-up.
//
//   host tier  blocks in host memory (page-locked on CUDA): full blocks evicted from the primary
//              pool are copied here and found again by their chained prefix hash; preempted
//              requests swap here instead of recomputing.
//   disk tier  one file per block in a local directory, below the host tier: host blocks evicted
//              by the host tier's LRU are written here; a hit is read back through the host tier.
//              Every file carries a checksum; a corrupt or truncated file is a miss.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

struct KvTierConfig {
  int64_t host_bytes = 0;   // host tier size (0: none, unless the disk tier needs its staging)
  std::string disk_dir;     // disk tier directory (empty: none)
  int64_t disk_bytes = int64_t{16} << 30;  // disk tier cap (files are deleted LRU beyond it)

  bool enabled() const { return host_bytes > 0 || !disk_dir.empty(); }
  std::string to_string() const;
};

}  // namespace pagoda
