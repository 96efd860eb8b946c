#include "engine/device_choice.h"

#include <fmt/format.h>

#include "model/family.h"
#include "model/model_loader.h"

namespace pagoda {

Result<DeviceSpec> choose_engine_device(std::string_view device, const std::string& model, std::string* why) {
  std::string reason;
  PAGODA_ASSIGN_OR_RETURN(DeviceSpec d, resolve_device(device, &reason));
  if (device == "auto" && d.type == Device::kCuda && !model.empty()) {
    // The CUDA executor runs the Llama family's layer ops only (it refuses the others at load).
    if (auto c = load_model_config(model); c.ok() && family_of(*c).name != "llama") {
      reason = fmt::format("the CUDA backend does not run the {} family yet", family_of(*c).name);
      d = DeviceSpec{};
    }
  }
  if (why && device == "auto") *why = reason;
  return d;
}

}  // namespace pagoda
