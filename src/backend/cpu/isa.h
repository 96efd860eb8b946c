// ISA level selection for the CPU kernels.
//
// The level a kernel set is chosen for is min(pagoda::active_isa_level() (the hardware level under
// the process-wide cap of common/cpu_features.h), kBestImplemented). Tests lower the cap to run
// every level the machine supports against the references; the cap only affects weights
// prepared after the change.
#pragma once

#include <vector>

#include "common/cpu_features.h"

namespace pagoda::cpu {

// Highest level with kernels in this build (no AMX kernels yet: untestable on the dev machines).
constexpr IsaLevel kBestImplementedIsa = IsaLevel::kAvx512Vnni;

// min(hardware, cap, best implemented).
IsaLevel active_isa_level();
// Every level from kScalar to min(hardware, best implemented): what tests should iterate.
std::vector<IsaLevel> supported_isa_levels();

}  // namespace pagoda::cpu
