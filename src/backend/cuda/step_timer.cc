#include "backend/cuda/step_timer.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_common.h"

namespace pagoda::cuda {

StepTimer::~StepTimer() {
  for (cudaEvent_t e : events_)
    if (e) cudaEventDestroy(e);
}

void StepTimer::init() {
  for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
}

void StepTimer::launch_graph(cudaGraphExec_t graph, cudaStream_t s) {
  CUDA_CHECK(cudaEventRecord(events_[0], s));
  const auto t = Clock::now();
  CUDA_CHECK(cudaGraphLaunch(graph, s));
  graph_launch_s_ += seconds(t, Clock::now());
  CUDA_CHECK(cudaEventRecord(events_[1], s));
  graph_timed_ = true;
}

void StepTimer::end_step() {
  if (!graph_timed_) return;
  graph_timed_ = false;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, events_[0], events_[1]) == cudaSuccess) {
    graph_device_s_ += ms * 1e-3;
    ++graph_steps_;
  } else {
    (void)cudaGetLastError();  // a timing, not a failure of the step: do not leave it for the next check
  }
}

void StepTimer::add_host(double launch_s, double sampling_s, double wait_s) {
  launch_s_ += launch_s;
  sampling_s_ += sampling_s;
  wait_s_ += wait_s;
  ++steps_;
}

std::string StepTimer::report() const {
  std::string r;
  if (steps_ > 0)
    r += fmt::format("host time per step ({} steps): inputs + launches {:.3f} ms, sampling set-up {:.3f} ms, waiting "
                     "for the device {:.3f} ms\n",
                     steps_, 1e3 * launch_s_ / steps_, 1e3 * sampling_s_ / steps_, 1e3 * wait_s_ / steps_);
  if (graph_steps_ > 0)
    r += fmt::format("decode graphs ({} steps): cudaGraphLaunch {:.3f} ms on the host, {:.3f} ms on the device\n",
                     graph_steps_, 1e3 * graph_launch_s_ / graph_steps_, 1e3 * graph_device_s_ / graph_steps_);
  return r;
}

}  // namespace pagoda::cuda
