// Which device an engine runs on: "cpu", "cuda" (device 0) or "cuda:N".
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

}  // namespace pagoda
