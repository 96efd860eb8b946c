// ISA level selection for the CPU kernels.
//
// The level a kernel set is chosen for is min(detect_isa_level(), cap, kBestImplemented). The cap
// is process-wide configuration (the config module sets it from PAGODA_ISA-style settings once at
// start-up; tests lower it to run every level the machine supports against the references).
// Thread-safety: the cap is an atomic; it only affects weights prepared after the change.
#pragma once

#include <vector>

#include "common/cpu_features.h"

namespace pagoda::cpu {

// Highest level with kernels in this build (no AMX kernels yet: untestable on the dev machines).
constexpr IsaLevel kBestImplementedIsa = IsaLevel::kAvx512Vnni;

void set_isa_level_cap(IsaLevel cap);
IsaLevel isa_level_cap();  // kAmx (no cap) unless set
// min(hardware, cap, best implemented).
IsaLevel active_isa_level();
// Every level from kScalar to min(hardware, best implemented): what tests should iterate.
std::vector<IsaLevel> supported_isa_levels();

}  // namespace pagoda::cpu
