#include "kv/kv_tier_config.h"

#include <fmt/format.h>

namespace pagoda {

std::string KvTierConfig::to_string() const {
  if (!enabled()) return "none";
  std::string s = fmt::format("host {:.2f} GiB", host_bytes / 1073741824.0);
  if (!disk_dir.empty()) s += fmt::format(", disk {} (cap {:.2f} GiB)", disk_dir, disk_bytes / 1073741824.0);
  return s;
}

}  // namespace pagoda
