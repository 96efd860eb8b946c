#include "runtime/ngram_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace pagoda {

NgramProposer::NgramProposer(int32_t ngram_min, int32_t ngram_max) : min_(ngram_min), max_(ngram_max) {
  PAGODA_CHECK(min_ >= 1 && max_ >= min_, "n-gram proposer: n in [{}, {}]", min_, max_);
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> t, int32_t max_drafts) const {
  const int64_t len = static_cast<int64_t>(t.size());
  for (int64_t n = std::min<int64_t>(max_, len - 1); n >= min_; --n) {
    const int32_t* suffix = t.data() + len - n;
    // Earlier occurrences, most recent first; the first with max_drafts tokens after it wins,
    // else the one with the longest continuation (a match near the end has few tokens after it).
    int64_t best_from = -1, best_len = 0;
    for (int64_t s = len - n - 1; s >= 0 && best_len < max_drafts; --s) {
      if (!std::equal(suffix, suffix + n, t.data() + s)) continue;
      const int64_t from = s + n, avail = std::min<int64_t>(len - from, max_drafts);
      if (avail > best_len) {
        best_from = from;
        best_len = avail;
      }
    }
    if (best_from >= 0) return std::vector<int32_t>(t.begin() + best_from, t.begin() + best_from + best_len);
  }
  return {};
}

void NgramProposer::propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  for (size_t i = 0; i < reqs.size(); ++i) drafts[i] = lookup(reqs[i].tokens, reqs[i].max_drafts);
}

}  // namespace pagoda
