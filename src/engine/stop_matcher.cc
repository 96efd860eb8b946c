#include "engine/stop_matcher.h"

#include <algorithm>

namespace pagoda {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop_in_output) : include_(include_stop_in_output) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

StopMatcher::Step StopMatcher::push(std::string_view text) {
  Step step;
  pending_.append(text);
  if (stops_.empty()) {
    step.emit = std::move(pending_);
    pending_.clear();
    return step;
  }
  // Earliest match in the pending text (earliest start; longest stop at a tie).
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos != std::string::npos && (pos < best || (pos == best && s.size() > best_stop->size()))) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    step.stopped = true;
    step.matched = *best_stop;
    step.emit = pending_.substr(0, include_ ? best + best_stop->size() : best);
    pending_.clear();
    return step;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  const size_t max_check = std::min(pending_.size(), max_len_ - 1);
  for (size_t k = max_check; k > 0; --k) {
    const std::string_view tail(pending_.data() + pending_.size() - k, k);
    if (std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) { return s.size() > k && s.compare(0, k, tail) == 0; })) {
      hold = k;
      break;
    }
  }
  step.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return step;
}

std::string StopMatcher::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace pagoda
