#include "backend/cuda/op_profiler.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/cuda_common.h"

namespace pagoda::cuda {

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void OpProfiler::begin(const char* kind, cudaStream_t s) {
  if (!enabled_) return;
  active_ = true;
  kind_ = kind;
  names_.clear();
  CUDA_CHECK(cudaEventRecord(event(0), s));
}

void OpProfiler::mark(const char* op, cudaStream_t s) {
  if (!active_) return;
  names_.push_back(op);
  CUDA_CHECK(cudaEventRecord(event(names_.size()), s));
}

void OpProfiler::end() {
  if (!active_) return;
  active_ = false;
  if (names_.empty()) return;
  CUDA_CHECK(cudaEventSynchronize(events_[names_.size()]));
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    Total& t = totals_[{kind_, names_[i]}];
    t.ms += ms;
    ++t.calls;
  }
  ++steps_[kind_];
}

std::string OpProfiler::report() const {
  if (!enabled_ || totals_.empty()) return {};
  std::map<std::string, double> kind_ms;
  for (const auto& [key, t] : totals_) kind_ms[key.first] += t.ms;
  std::vector<std::pair<std::pair<std::string, std::string>, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.first.first != b.first.first ? a.first.first < b.first.first : a.second.ms > b.second.ms;
  });
  std::string s = "GPU time per op (eager steps, CUDA events between ops; --cuda-profile)\n";
  s += fmt::format("| {:<8} | {:<22} | {:>8} | {:>11} | {:>10} | {:>6} |\n", "step", "op", "calls", "total ms", "mean us",
                   "share");
  s += "|----------|------------------------|----------|-------------|------------|--------|\n";
  for (const auto& [key, t] : rows) {
    s += fmt::format("| {:<8} | {:<22} | {:>8} | {:>11.2f} | {:>10.2f} | {:>5.1f}% |\n", key.first, key.second, t.calls,
                     t.ms, 1e3 * t.ms / static_cast<double>(t.calls), 100.0 * t.ms / kind_ms[key.first]);
  }
  for (const auto& [kind, n] : steps_)
    s += fmt::format("{}: {} steps, {:.2f} ms GPU time, {:.3f} ms a step\n", kind, n, kind_ms[kind], kind_ms[kind] / n);
  return s;
}

}  // namespace pagoda::cuda
