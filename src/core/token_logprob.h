// One token and its log-probability (a top-N logprob entry); a plain value type shared by the
// sampler and the engine's outputs.
#pragma once

#include <cstdint>

namespace pagoda {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

}  // namespace pagoda
