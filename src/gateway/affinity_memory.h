// The worker that served a prefix key last, for the prefix-affinity hit rate
// (prefix_affinity_hits_total). Bounded: cleared when it grows past kMax keys. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace pagoda::gateway {

class AffinityMemory {
 public:
  // Records `worker` for `key`; true when it was the same worker as last time.
  bool record(uint64_t key, const std::string& worker) {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_.size() >= kMax) last_.clear();
    auto [it, inserted] = last_.try_emplace(key, worker);
    if (inserted) return false;
    const bool hit = it->second == worker;
    it->second = worker;
    return hit;
  }

 private:
  static constexpr size_t kMax = 1 << 16;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> last_;
};

}  // namespace pagoda::gateway
