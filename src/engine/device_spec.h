// Which device an engine runs on: "cpu", "cuda" (device 0), "cuda:N" or "auto" (cuda:0 when this
// build has the CUDA backend and a device is visible, else the CPU).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "common/tensor.h"

namespace pagoda {

struct DeviceSpec {
  Device type = Device::kCpu;
  int index = 0;
  std::string to_string() const;
};

Result<DeviceSpec> parse_device(std::string_view s);

// parse_device, and for "auto" the reason of the choice in *why (e.g. "no CUDA device visible",
// "this build has no CUDA backend ..."); *why is left alone for an explicit device.
Result<DeviceSpec> resolve_device(std::string_view s, std::string* why);

}  // namespace pagoda
