// Per-request sampling parameters (OpenAI / vLLM semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/token_constraint.h"

namespace pagoda {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1: off. Prompt and output tokens (HF/vLLM rule)
  float presence_penalty = 0.0f;    // [-2, 2]; output tokens (OpenAI rule)
  float frequency_penalty = 0.0f;   // [-2, 2]; output tokens
  std::optional<uint64_t> seed;     // same seed, same output
  // -1: none; 0: the chosen token's; N: also the top N. Logprobs are of the row as the model
  // gives it with the tokens that cannot be emitted removed (min_tokens' blocked ids, the
  // constraint's mask), renormalised over the rest; before logit_bias, penalties, temperature and
  // truncation (docs/decisions.md#d37).
  int32_t logprobs = -1;
  // Prompt logprobs (vLLM's prompt_logprobs; OpenAI's echo with logprobs): -1 none; N >= 0 the
  // log-softmax of the raw model row at every prompt position, for the next prompt token (its
  // logprob and rank) and the top N. The prompt is then computed in full (no prefix-cache hit).
  int32_t prompt_logprobs = -1;
  // OpenAI logit_bias: (token id, bias) added to the logit after the masks, before penalties.
  // Ids outside the vocabulary are ignored here (the server refuses them with a 400).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output: only tokens the constraint allows are sampled (null: unconstrained).
  std::shared_ptr<const TokenConstraintSpec> constraint;

  bool greedy() const { return temperature < 1e-5f; }
  // Range checks; the message names the parameter.
  Status validate() const;
};

}  // namespace pagoda
