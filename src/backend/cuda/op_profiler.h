// Per-op GPU time of eager forward passes, for finding where a step's time goes
// (TuningConfig::cuda_profile: --cuda-profile, PAGODA_CUDA_PROFILE=1). A CUDA event is recorded after every op of a step; when
// the step ends, the time between consecutive events is added to that op's total, keyed by the
// step's kind (decode / prefill / mixed). Events serialise the ops they separate (programmatic
// dependent launch cannot overlap a kernel with the next across an event), so the figures are an
// eager breakdown: the shares are what to read, the sum is a little above a graph replay's time.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

namespace pagoda::cuda {

class OpProfiler {
 public:
  OpProfiler() = default;
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_; }
  // Starts a step of `kind` on `s` (no-op when disabled). Every mark() until end() belongs to it.
  void begin(const char* kind, cudaStream_t s);
  // The work enqueued on `s` since the previous mark (or begin) was `op`.
  void mark(const char* op, cudaStream_t s);
  // Waits for the step and adds its intervals to the totals.
  void end();
  // A table: kind, op, calls, total ms, mean us, share of the kind's time. Empty when disabled.
  std::string report() const;

 private:
  struct Total {
    double ms = 0;
    long calls = 0;
  };
  cudaEvent_t event(size_t i);

  bool enabled_ = false;
  bool active_ = false;
  std::string kind_;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> names_;  // names_[i]: the op that ended at event i + 1
  std::map<std::pair<std::string, std::string>, Total> totals_;
  std::map<std::string, long> steps_;
};

}  // namespace pagoda::cuda
