#include "engine/engine_plan.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cpu_features.h"
#include "common/env_config.h"
#include "common/log.h"
#include "common/startup_profile.h"

namespace pagoda {

std::unique_ptr<EnginePlan> EnginePlan::open_for(const EngineConfig& config, bool cuda) {
  auto plan = std::make_unique<EnginePlan>();
  const std::string dir = config.plan_cache.empty() ? default_plan_cache_dir() : config.plan_cache;
  // Random weights (--load-format dummy) must not be packed into a plan a real load of the same
  // path would map.
  if (dir == "off" || cuda || config.load_format == LoadFormat::kDummy) return plan;
  startup_profile::Scope phase("model/plan");
  // The packed weights depend on the on-line quantization too: it is part of the key and the file name.
  const std::string device = fmt::format("cpu {} isa {} | quantization {}", cpu_features().brand,
                                         isa_level_name(active_isa_level()), weight_quantization_name(config.quantization));
  auto key = plan_key(config.model, device);
  if (!key.ok()) {
    // The load reports a missing or unreadable model itself.
    log_debug("plan", "no plan: {}", key.status().message());
    return plan;
  }
  plan->enabled_ = true;
  plan->key_ = std::move(*key);
  plan->path_ = plan_file_path(
      dir, config.model,
      config.quantization == WeightQuantization::kNone ? std::string("cpu")
                                                       : fmt::format("cpu-{}", weight_quantization_name(config.quantization)));
  auto in = PlanFile::open(plan->path_, plan->key_);
  if (in.ok()) {
    plan->in_ = std::move(*in);
    plan->state_ = "reused";
    log_info("plan", "reusing {}", plan->path_);
  } else if (in.status().code() == StatusCode::kNotFound) {
    plan->state_ = "absent";
  } else {
    plan->state_ = fmt::format("{}: {}", in.status().code() == StatusCode::kDataLoss ? "corrupt" : "stale",
                               in.status().message());
    log_warn("plan", "{}; not used, rebuilding it", in.status().message());
  }
  phase.set_detail(plan->state_);
  return plan;
}

EnginePlan::~EnginePlan() { join(); }

void EnginePlan::write_async(int64_t entries, int64_t reused) {
  if (!enabled_ || entries == 0 || (in_ != nullptr && reused == entries)) return;
  writer_ = std::thread([this] {
    // At the lowest priority: the write must not take CPU from the requests being served.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    const double t0 = startup_profile::now_s();
    Status st = out_.write(path_, key_);
    if (st.ok()) log_info("plan", "wrote {} in {:.2f} s; the next start maps it", path_, startup_profile::now_s() - t0);
    else log_warn("plan", "cannot write the plan: {}", st.message());
  });
}

void EnginePlan::join() {
  if (writer_.joinable()) writer_.join();
}

}  // namespace pagoda
