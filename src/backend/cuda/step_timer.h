// Where a CUDA step's time goes, for `pagoda bench` (docs/cuda.md, "Diagnostics"):
// host wall time of the executor's phases (inputs + launches, sampling set-up, waiting for the
// device) and, for decode graphs, the host time of cudaGraphLaunch against the device time between
// events recorded before and after it. Always on: a few clock reads and two event records a step.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace pagoda::cuda {

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

  StepTimer() = default;
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  void init();  // creates the events (on the current device)
  // A step starts: a graph launched by an earlier step that threw is no longer timed.
  void begin_step() { graph_timed_ = false; }
  // Launches `graph` on `s` between the two events.
  void launch_graph(cudaGraphExec_t graph, cudaStream_t s);
  // After the step's synchronisation: the graph's device time, if this step launched one.
  void end_step();
  // Host phases of one forward_sample call (a step), seconds.
  void add_host(double launch_s, double sampling_s, double wait_s);
  // Per-step averages; empty before the first step.
  std::string report() const;

 private:
  double launch_s_ = 0, sampling_s_ = 0, wait_s_ = 0;
  int64_t steps_ = 0;
  double graph_launch_s_ = 0, graph_device_s_ = 0;
  int64_t graph_steps_ = 0;
  cudaEvent_t events_[2] = {nullptr, nullptr};
  bool graph_timed_ = false;  // the events bracket this step's graph
};

}  // namespace pagoda::cuda
