// Log-probabilities as the sampler computes them and the engine reports them (plain value types).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

// One token and its log-probability (a top-N logprob entry).
struct TokenLogprob {
  int32_t token;
  float logprob;
};

// One scored row (prompt logprobs): of a given token, not a sampled one.
struct RowLogprobs {
  float logprob = 0;               // log-softmax(row)[token]
  int32_t rank = 0;                // token_rank(row, token) (runtime/sampler.h): 1 + tokens with a greater logit
  std::vector<TokenLogprob> top;   // the top_n best (logit desc, id asc), of the raw row
};

}  // namespace pagoda
