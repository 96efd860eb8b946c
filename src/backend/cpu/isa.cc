#include "backend/cpu/isa.h"

namespace pagoda::cpu {
namespace {
IsaLevel min_level(IsaLevel a, IsaLevel b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }
}  // namespace

IsaLevel active_isa_level() { return min_level(pagoda::active_isa_level(), kBestImplementedIsa); }

std::vector<IsaLevel> supported_isa_levels() {
  std::vector<IsaLevel> out;
  const IsaLevel best = min_level(detect_isa_level(), kBestImplementedIsa);
  for (int l = 0; l <= static_cast<int>(best); ++l) out.push_back(static_cast<IsaLevel>(l));
  return out;
}

}  // namespace pagoda::cpu
