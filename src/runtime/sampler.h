// Token sampling from one row of logits.
//
// Order (vLLM v1): the constraint mask -> logit_bias -> penalties (repetition over prompt +
// output, presence/frequency over output) -> greedy if temperature == 0 -> temperature -> min-p
// -> top-k -> top-p -> draw. Logprobs are the log-softmax of the row with the masks applied (the
// caller's min_tokens block and the constraint's mask: only tokens that can be emitted, as the
// CUDA sampler reports them) and nothing else: before logit_bias, penalties and temperature
// (docs/decisions.md#d37).
//
// Exact and allocation-light: top-k and top-p use partial selection (nth_element on growing
// prefixes), not a full sort of the vocabulary. Determinism: the draw uses only the request's
// Rng, so the same seed and inputs give the same tokens on every run and batch composition.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/sampling_params.h"
#include "core/token_logprob.h"

namespace pagoda {

// xoshiro256** seeded through splitmix64: small, fast, reproducible across platforms.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0x9e3779b97f4a7c15ull);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
 private:
  uint64_t s_[4];
};

// What the penalties need to know about a request's tokens.
struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;               // of `token` under the masked distribution (if requested)
  std::vector<TokenLogprob> top;      // top-N masked logprobs, descending (if requested); never a masked token
};

class Sampler {
 public:
  // logits: [vocab] f32 (not modified). Scratch buffers are reused between calls; a Sampler is
  // not thread-safe (one per thread). allowed (structured outputs): a packed token mask (bit
  // id % 32 of word id / 32, runtime/../core/token_constraint.h); tokens whose bit is clear get
  // probability 0 before penalties and temperature. Empty: every token allowed.
  SampleResult sample(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history, Rng& rng,
                      std::span<const uint32_t> allowed = {});

 private:
  std::vector<float> work_;
  std::vector<int32_t> idx_;
  std::unordered_map<int32_t, int32_t> counts_;
};

// Sets logits[t] = -inf for every t whose bit in `allowed` is clear (allowed covers logits.size() bits).
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> allowed);

// log-softmax helpers (exposed for tests and logprob reporting).
float log_sum_exp(std::span<const float> logits);
// r.logprob = log-softmax(row)[r.token] and, n > 0, r.top = the n best (logit desc, id asc) of the
// tokens with a finite logit. n < 0: nothing. scratch: reused index buffer.
void fill_logprobs(std::span<const float> row, int32_t n, SampleResult& r, std::vector<int32_t>& scratch);
// 1 + the number of tokens whose logit is greater than row[token] (vLLM's logprob rank; ties
// share a rank).
int32_t token_rank(std::span<const float> row, int32_t token);
// logits[t] += bias for each (t, bias) with t inside the row.
void apply_logit_bias(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias);

}  // namespace pagoda
