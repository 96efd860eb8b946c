// The engine plan of one start (common/plan_file.h): what a CPU start-up computes that the next
// start can reuse instead, kept in the plan cache directory (EngineConfig::plan_cache).
//
// Persisted today: the CPU kernels' packed weights (sections "cpu-linear/<label>"), the bulk of a
// CPU load (docs/decisions.md: what else was measured and left out). A later start with the same
// model file (path, size, mtime, header hash), the same binary and the same CPU (brand, ISA
// level) maps the plan and uses the packed weights in place: nothing is read from the model file
// for them, nothing is repacked or copied. A missing plan is written after the load (on a thread
// of its own: the first request is not held); a stale or corrupt one is reported, never used, and
// replaced.
// Thread-safety: one EnginePlan per engine start; write_async() once, then join() before the
// model whose weights it writes is destroyed.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/plan_file.h"
#include "engine/engine_config.h"

namespace pagoda {

class EnginePlan {
 public:
  // Opens the plan for a CPU start of `config` (a CUDA start or a random-weight load, load_format
  // dummy: none); "off", a model identity that cannot be read, or no valid plan all leave `in()`
  // null. Never fails.
  static std::unique_ptr<EnginePlan> open_for(const EngineConfig& config, bool cuda);
  ~EnginePlan();

  const std::string& path() const { return path_; }
  // The valid plan found, or null.
  const PlanFile* in() const { return in_.get(); }
  // Where the load lists what a new plan would hold.
  PlanWriter* out() { return enabled_ ? &out_ : nullptr; }
  // "off", "absent", "reused", "stale: <why>", "corrupt: <why>".
  const std::string& state() const { return state_; }
  // Writes out() on a thread unless the plan found already held all `entries` of this load.
  void write_async(int64_t entries, int64_t reused);
  // Waits for the write (if any); logs its outcome.
  void join();

 private:
  bool enabled_ = false;
  std::string path_, key_, state_ = "off";
  std::unique_ptr<PlanFile> in_;
  PlanWriter out_;
  std::thread writer_;
};

}  // namespace pagoda
