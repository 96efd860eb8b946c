// The device an engine for `model` runs on, from a user's --device / device= choice: "auto" is
// cuda:0 when this build has the CUDA backend and a device is visible and the CUDA backend runs
// the model (runtime/cuda_executor.h: cuda_supports_model), else the CPU; explicit devices are parsed (engine/device_spec.h)
// and kept. Shared by the command line and the offline API (offline/), so both choose alike.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/device_spec.h"

namespace pagoda {

// *why (for "auto" only) receives the reason of the choice, e.g. "no CUDA device visible".
// `model` may be empty (no family check). Errors: kInvalidArgument for an unknown device name.
Result<DeviceSpec> choose_engine_device(std::string_view device, const std::string& model, std::string* why);

}  // namespace pagoda
