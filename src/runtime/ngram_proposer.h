// N-gram prompt lookup proposer: drafts the tokens that followed an earlier occurrence of the
// sequence's last n tokens (n from ngram_max down to ngram_min, longest n first), anywhere in the
// prompt or the output: the most recent occurrence followed by at least max_drafts tokens, else
// the one followed by the most. No model, no state; cost O(length * n) per request.
#pragma once

#include <memory>

#include "runtime/proposer.h"

namespace pagoda {

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t ngram_min, int32_t ngram_max);
  std::string name() const override { return "ngram"; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;

  // The drafts for one token sequence (exposed for tests).
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t max_drafts) const;

 private:
  int32_t min_, max_;
};

}  // namespace pagoda
