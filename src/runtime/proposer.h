// Proposer: drafts tokens for speculative decoding (runtime/spec_verifier.h verifies them).
//
// The runner calls propose() after each step for the requests that got new tokens, with their
// verified tokens (prompt + output) and how many drafts it wants; a proposer returns up to that
// many per request (fewer or none when it has no guess). Proposers here draft deterministically
// (no distribution q: the verifier treats each draft as one-hot). Implementations:
//   n-gram prompt lookup  runtime/ngram_proposer.h (no model)
//   draft model           engine/draft_model_proposer.h (a smaller model of the same vocabulary)
//   EAGLE-3 head          engine/draft_head_proposer.h (reads the target's hidden states)
// Thread-safety: called from the engine-core thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/token_constraint.h"

namespace pagoda {

// The target's captured hidden states of one request's rows of a step (proposers that read
// them): positions [first_position, first_position + num_rows), each row `width` floats.
struct HiddenRows {
  const std::string* id = nullptr;
  int32_t first_position = 0;
  int32_t num_rows = 0;
  const float* rows = nullptr;  // valid for the call
};

struct ProposeRequest {
  const std::string* id = nullptr;
  std::span<const int32_t> tokens;  // prompt + verified output, valid for the call
  int32_t max_drafts = 0;           // >= 1
  // Structured output (null: none): the request's constraint in its state after `tokens`. A
  // proposer may advance it to draft only tokens it allows (the draft model masks its choices)
  // and must roll those advances back before returning. The runner cuts drafts before the first
  // forbidden token either way.
  TokenConstraint* constraint = nullptr;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // drafts is resized to reqs.size(); drafts[i] gets at most reqs[i].max_drafts tokens.
  virtual void propose(std::span<const ProposeRequest> reqs, std::vector<std::vector<int32_t>>& drafts) = 0;
  // Cost of drafting one token in units of a plain target decode step (adaptive speculation):
  // 0 for lookup proposers, about the weight-bytes ratio for a draft model.
  virtual double draft_cost() const { return 0.0; }
  // Proposers that read the target's hidden states name the target layers (outputs) the executor
  // must capture (ModelExecutor::set_hidden_capture); empty: none.
  virtual std::vector<int64_t> hidden_layers() const { return {}; }
  // After every step (before propose()), for every request the step computed: the hidden states
  // of its verified positions (rejected drafts' rows left out). Positions of one request arrive in
  // order; a request whose next rows do not start where its last ones ended starts over.
  virtual void observe_hidden(std::span<const HiddenRows> rows, int64_t width) {}
  // The request finished or lost its KV (recompute preemption): drop any state kept for it.
  virtual void forget(const std::string& id) {}
};

}  // namespace pagoda
