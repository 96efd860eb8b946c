#include "sched/policy.h"

namespace pagoda {

size_t SchedulingPolicy::pick_victim(const std::vector<Request*>& running) const {
  // The request served last: the one every other is `before`.
  size_t victim = 0;
  for (size_t i = 1; i < running.size(); ++i)
    if (before(*running[victim], *running[i])) victim = i;
  return victim;
}

bool FcfsPolicy::before(const Request& a, const Request& b) const {
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  return a.arrival_seq < b.arrival_seq;
}

bool PriorityPolicy::before(const Request& a, const Request& b) const {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  return a.arrival_seq < b.arrival_seq;
}

bool PriorityPolicy::may_preempt_for(const Request& waiting, const Request& victim) const {
  return waiting.priority < victim.priority;
}

std::unique_ptr<SchedulingPolicy> make_policy(std::string_view name) {
  if (name == "fcfs") return std::make_unique<FcfsPolicy>();
  if (name == "priority") return std::make_unique<PriorityPolicy>();
  return nullptr;
}

}  // namespace pagoda
