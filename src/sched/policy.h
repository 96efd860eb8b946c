// Scheduling policies as small strategy objects: the order of the waiting queue and the choice of
// a preemption victim. FCFS serves by arrival; priority serves by (priority, arrival) and
// preempts the lowest-priority, latest-arriving running request first.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "core/request.h"

namespace pagoda {

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual const char* name() const = 0;
  // True if a should be served before b.
  virtual bool before(const Request& a, const Request& b) const = 0;
  // Index in `running` of the request to preempt (all candidates are running).
  virtual size_t pick_victim(const std::vector<Request*>& running) const;
  // Whether a waiting request may preempt running ones to get in (priority only).
  virtual bool may_preempt_for(const Request& waiting, const Request& victim) const { return false; }
};

std::unique_ptr<SchedulingPolicy> make_policy(std::string_view name);  // "fcfs" | "priority"; nullptr if unknown

class FcfsPolicy : public SchedulingPolicy {
 public:
  const char* name() const override { return "fcfs"; }
  bool before(const Request& a, const Request& b) const override;
};

class PriorityPolicy : public SchedulingPolicy {
 public:
  const char* name() const override { return "priority"; }
  bool before(const Request& a, const Request& b) const override;
  bool may_preempt_for(const Request& waiting, const Request& victim) const override;
};

}  // namespace pagoda
