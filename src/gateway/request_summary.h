// What the gateway reads from an OpenAI request body to admit and route it, without a tokenizer.
//
// affinity_text is the prompt as the gateway sees it: for /v1/completions the prompt string (or
// the first prompt of a list; token-id prompts as their decimal ids joined by spaces); for
// /v1/chat/completions the messages in order, each "role\x1f" + text + "\x1e" (text parts of a
// content array concatenated). It is not the worker's rendered chat template, but a shared system
// prompt or few-shot preamble is a shared leading text either way, which is what affinity needs.
// estimated_tokens = ceil(prompt characters / 4) + max_tokens (the request's max_tokens or
// max_completion_tokens, else the configured default): the charge against tokens/min limits and
// the unit of "outstanding tokens" of least-load routing.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace pagoda::gateway {

struct RequestSummary {
  std::string model;           // "" when the request names none
  bool stream = false;
  int64_t max_tokens = 0;
  int64_t prompt_chars = 0;
  int64_t estimated_tokens = 0;
  std::string affinity_text;
};

// kInvalidArgument (the caller answers 400) when the body is not a JSON object or a field the
// gateway reads has the wrong type.
Result<RequestSummary> summarize_request(bool chat, const std::string& body, int64_t default_max_tokens);

}  // namespace pagoda::gateway
