// Verification of draft tokens (speculative decoding), beside the plain sampler (sampler.h).
//
// Given the target model's logits at a request's last known token and at each of its m drafts
// (m + 1 rows), the verifier returns the tokens the request keeps this step: the accepted drafts
// and one token of the target's own (1..m+1 tokens).
//   greedy   (temperature 0): drafts are accepted while they equal the target's choice at their
//            position (Sampler::sample over the penalised row: the plain sampler's argmax); the
//            first mismatch is replaced by that choice; after m matches the bonus token is the
//            target's choice at the last row. Output is the same token sequence as without drafts.
//   sampling draft d at row j is accepted with probability min(1, p(d) / q(d)), where p is the
//            target's distribution at row j after penalties, temperature, min-p, top-k and top-p
//            (target_probabilities(), the plain sampler's candidate set and weights) and q the
//            proposer's distribution (q = one-hot at d for proposers without one: n-gram, greedy
//            draft model); on reject the token is drawn from max(0, p - q) renormalised. After m
//            acceptances the bonus token is the plain sampler's draw at the last row. Every kept
//            token is thus distributed exactly as the target's (Leviathan et al., Chen et al.).
// Penalties and min_tokens blocking at row j see the output extended by drafts 0..j-1; logit_bias
// applies as in the plain sampler. Logprobs of a kept token are of the row after the min_tokens
// block and the constraint's mask (as the plain sampler reports them).
// Structured outputs (VerifyInput::constraint): row j is masked with the constraint's mask in its
// state advanced through drafts 0..j-1, so p above is the masked target distribution (what the
// plain sampler draws from under the constraint). A draft the mask forbids has p(d) = 0: greedy
// never matches it, the rejection rule rejects it and draws from max(0, p - q), which is exact for
// any proposer distribution q, including one that puts mass on forbidden tokens (the runner cuts a
// deterministic proposer's drafts before a forbidden one instead: with q one-hot at a forbidden d
// the residual is p itself, so the cut changes nothing but the work). Greedy output is the same
// token sequence as plain constrained decoding.
// Randomness: row j uses token_rng(seed, n_out + j) (the runner's per-token stream), so a seed
// reproduces the same tokens whatever the batch.
// Thread-safety: a SpecVerifier holds scratch; one per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/token_constraint.h"
#include "runtime/sampler.h"

namespace pagoda {

// The target distribution the plain sampler draws from for `logits` (not greedy: temperature > 0),
// as probabilities over the whole vocabulary (zeros outside the candidate set), normalised.
// `blocked` ids get probability 0 (min_tokens).
void target_probabilities(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                          std::span<const int32_t> blocked, std::vector<float>& probs);

struct VerifyInput {
  std::span<const float> logits;        // [(m + 1) * vocab] rows: last known token, then each draft
  int64_t vocab = 0;
  std::span<const int32_t> drafts;      // m draft tokens
  // Optional proposer distributions q: [m * vocab] (empty: one-hot at each draft).
  std::span<const float> draft_probs;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;      // penalties' history
  std::span<const int32_t> output;      // generated tokens before this step
  uint64_t seed = 0;
  int32_t min_tokens = 0;               // blocked_ids masked while the output is shorter
  std::span<const int32_t> blocked_ids;
  // Structured output (null: none): the request's constraint in its state after `output`. verify()
  // advances it over accepted drafts to mask the later rows and rolls them back: on return it is
  // in its state on entry (the caller advances it over the kept tokens). Ids at or past its
  // vocab_size() are disallowed (a model vocabulary padded past the tokenizer's).
  TokenConstraint* constraint = nullptr;
};

class SpecVerifier {
 public:
  // Returns the kept tokens (1..m+1); the number of accepted drafts is size() - 1.
  std::vector<SampleResult> verify(const VerifyInput& in);

 private:
  Sampler sampler_;
  std::vector<float> row_, p_;
  std::vector<int32_t> history_;
  std::vector<int32_t> scratch_;
  std::vector<uint32_t> mask_;
};

}  // namespace pagoda
