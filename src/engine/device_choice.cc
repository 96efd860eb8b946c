#include "engine/device_choice.h"

#include "model/model_loader.h"
#include "runtime/cuda_executor.h"

namespace pagoda {

Result<DeviceSpec> choose_engine_device(std::string_view device, const std::string& model, std::string* why) {
  std::string reason;
  PAGODA_ASSIGN_OR_RETURN(DeviceSpec d, resolve_device(device, &reason));
  if (device == "auto" && d.type == Device::kCuda && !model.empty()) {
    // A model the CUDA executor would refuse at load runs on the CPU.
    if (auto c = load_model_config(model); c.ok()) {
      if (Status s = cuda_supports_model(*c); !s.ok()) {
        reason = s.message();
        d = DeviceSpec{};
      }
    }
  }
  if (why && device == "auto") *why = reason;
  return d;
}

}  // namespace pagoda
