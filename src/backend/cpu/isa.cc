#include "backend/cpu/isa.h"

#include <algorithm>
#include <atomic>

namespace pagoda::cpu {
namespace {
std::atomic<int> g_cap{static_cast<int>(IsaLevel::kAmx)};
IsaLevel min_level(IsaLevel a, IsaLevel b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }
}  // namespace

void set_isa_level_cap(IsaLevel cap) { g_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }
IsaLevel isa_level_cap() { return static_cast<IsaLevel>(g_cap.load(std::memory_order_relaxed)); }

IsaLevel active_isa_level() {
  return min_level(min_level(detect_isa_level(), isa_level_cap()), kBestImplementedIsa);
}

std::vector<IsaLevel> supported_isa_levels() {
  std::vector<IsaLevel> out;
  const IsaLevel best = min_level(detect_isa_level(), kBestImplementedIsa);
  for (int l = 0; l <= static_cast<int>(best); ++l) out.push_back(static_cast<IsaLevel>(l));
  return out;
}

}  // namespace pagoda::cpu
