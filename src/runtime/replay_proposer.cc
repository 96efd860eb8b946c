#include "runtime/replay_proposer.h"

#include <algorithm>
#include <functional>

#include "common/check.h"

namespace pagoda {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

ReplayProposer::ReplayProposer(std::unordered_map<std::string, std::vector<int32_t>> records, double acceptance,
                               int64_t vocab, uint64_t seed, std::unique_ptr<Proposer> inner)
    : records_(std::move(records)), acceptance_(acceptance), vocab_(vocab), seed_(seed), inner_(std::move(inner)) {
  PAGODA_CHECK(acceptance_ >= 0.0 && acceptance_ <= 1.0, "replay proposer: acceptance {} outside [0, 1]", acceptance_);
  PAGODA_CHECK(vocab_ >= 2, "replay proposer: a vocabulary of {} has no wrong token", vocab_);
}

bool ReplayProposer::corrupted(const std::string& id, int64_t pos) const {
  const uint64_t h = mix(mix(seed_ ^ std::hash<std::string>{}(id)) ^ static_cast<uint64_t>(pos));
  return static_cast<double>(h >> 11) * 0x1.0p-53 >= acceptance_;
}

void ReplayProposer::forget(const std::string& id) {
  if (inner_) inner_->forget(id);
}

void ReplayProposer::propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  if (inner_) inner_->propose(reqs, inner_drafts_);  // for its time only
  drafts.assign(reqs.size(), {});
  for (size_t i = 0; i < reqs.size(); ++i) {
    const ProposeRequest& q = reqs[i];
    auto it = records_.find(*q.id);
    if (it == records_.end() || diverged_.count(*q.id)) continue;
    const std::vector<int32_t>& rec = it->second;
    const size_t n = q.tokens.size();
    if (n > rec.size() || !std::equal(q.tokens.begin(), q.tokens.end(), rec.begin())) {
      diverged_.insert(*q.id);
      continue;
    }
    const size_t end = std::min(rec.size(), n + static_cast<size_t>(q.max_drafts));
    for (size_t p = n; p < end; ++p) {
      int32_t t = rec[p];
      if (corrupted(*q.id, static_cast<int64_t>(p))) {
        const uint64_t h = mix(seed_ ^ 0x5851f42d4c957f2dull ^ static_cast<uint64_t>(p));
        t = static_cast<int32_t>((t + 1 + static_cast<int64_t>(h % static_cast<uint64_t>(vocab_ - 1))) % vocab_);
      }
      drafts[i].push_back(t);
    }
  }
}

}  // namespace pagoda
