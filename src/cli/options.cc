#include "cli/options.h"

#include "common/log.h"
#include "model/family.h"
#include "model/model_loader.h"
#include "runtime/device_spec.h"

namespace pagoda::cli {

bool resolve_device_option(std::string& device, std::string_view cmd, const std::string& model) {
  std::string why;
  auto d = resolve_device(device, &why);
  if (!d.ok()) {
    log_error(cmd, "--device: {}", d.status().message());
    return false;
  }
  if (device == "auto" && d->type == Device::kCuda && !model.empty()) {
    // The CUDA executor runs the Llama family's layer ops only (it refuses the others at load).
    if (auto c = load_model_config(model); c.ok() && family_of(*c).name != "llama") {
      why = fmt::format("the CUDA backend does not run the {} family yet", family_of(*c).name);
      d = DeviceSpec{};
    }
  }
  if (device == "auto") {
    log_info(cmd, "device auto: {} ({})", d->to_string(), why);
    device = d->to_string();
  }
  return true;
}

bool check_max_model_len(std::string_view cmd, const std::string& model, int64_t max_model_len) {
  if (max_model_len <= 0) return true;
  auto config = load_model_config(model);
  if (!config.ok()) return true;  // the load that follows reports the model's own error
  const int64_t ctx = config->max_position_embeddings;
  if (ctx > 0 && max_model_len > ctx) {
    log_error(cmd, "--max-model-len {} exceeds the model's context length {} (max_position_embeddings of {}); "
                   "use at most {}", max_model_len, ctx, model, ctx);
    return false;
  }
  return true;
}

void add_log_level_option(CLI::App* app) {
  app->add_option_function<std::string>(
         "--log-level", [](const std::string& name) { set_log_level(*parse_log_level(name)); },
         "Log level: debug, info, warn, error")
      ->check(CLI::IsMember({"debug", "info", "warn", "warning", "error"}))
      ->default_str("info");
}

}  // namespace pagoda::cli
