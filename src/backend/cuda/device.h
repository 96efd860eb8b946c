// Device memory reading shared by the executor and the engine's stats (NVML when libnvidia-ml
// can be dlopen'ed, else cudaMemGetInfo).
#pragma once

#include "runtime/model_executor.h"

namespace pagoda::cuda {

DeviceMemoryStats device_memory_stats(int device);
bool nvml_available();

}  // namespace pagoda::cuda
