#include "engine/device_spec.h"

#include <charconv>

#include "runtime/cuda_executor.h"

namespace pagoda {

std::string DeviceSpec::to_string() const { return type == Device::kCpu ? "cpu" : fmt::format("cuda:{}", index); }

Result<DeviceSpec> parse_device(std::string_view s) { return resolve_device(s, nullptr); }

Result<DeviceSpec> resolve_device(std::string_view s, std::string* why) {
  DeviceSpec d;
  if (s.empty() || s == "cpu") return d;
  if (s == "auto") {
    std::string reason;
    if (cuda_available(&reason)) {
      d.type = Device::kCuda;
      reason = fmt::format("{} CUDA device(s) visible", cuda_device_count());
    }
    if (why) *why = reason;
    return d;
  }
  if (s == "cuda" || s == "gpu") {
    d.type = Device::kCuda;
    return d;
  }
  if (s.starts_with("cuda:")) {
    const std::string_view n = s.substr(5);
    int idx = -1;
    const auto r = std::from_chars(n.data(), n.data() + n.size(), idx);
    if (r.ec == std::errc() && r.ptr == n.data() + n.size() && idx >= 0) {
      d.type = Device::kCuda;
      d.index = idx;
      return d;
    }
  }
  return invalid_argument("unknown device '{}': expected auto, cpu, cuda or cuda:N", s);
}

}  // namespace pagoda
